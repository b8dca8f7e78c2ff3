//! SIGINT and SIGTERM as a file descriptor: blocked in the VMM's threads and read through a
//! signalfd by the event loop, so a signal stops the vCPUs cleanly instead of killing the
//! process mid-write.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A signalfd for SIGINT and SIGTERM; dropping it restores the previous signal mask.
pub struct StopSignals {
    fd: OwnedFd,
    old_mask: libc::sigset_t,
}

impl StopSignals {
    /// Blocks SIGINT and SIGTERM in the calling thread (threads spawned later inherit the
    /// mask) and opens a signalfd for them.
    pub fn block_and_open() -> std::io::Result<Self> {
        // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it fully.
        let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; zeroed is a valid starting value for the out-parameter.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `mask` is a valid, exclusively borrowed sigset_t.
        unsafe {
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGINT);
            libc::sigaddset(&mut mask, libc::SIGTERM);
        }
        // SAFETY: both pointers are valid sigset_t values owned by this frame.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &mask, &mut old_mask) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        // SAFETY: `mask` is initialised; -1 asks for a new descriptor.
        let raw = unsafe { libc::signalfd(-1, &mask, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if raw < 0 {
            let err = std::io::Error::last_os_error();
            // SAFETY: restores the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
            return Err(err);
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(StopSignals { fd, old_mask })
    }

    /// Reads one pending signal number, if any.
    pub fn read(&self) -> Option<i32> {
        // SAFETY: signalfd_siginfo is plain data; zeroed is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into `info`, which is that large.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                std::ptr::addr_of_mut!(info).cast(),
                size,
            )
        };
        (usize::try_from(n).ok() == Some(size)).then(|| i32::try_from(info.ssi_signo).unwrap_or(0))
    }
}

impl AsRawFd for StopSignals {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // Deliver nothing left pending to the restored handlers: drain first.
        while self.read().is_some() {}
        // SAFETY: restores the mask saved in `block_and_open` for this thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

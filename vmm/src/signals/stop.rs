//! The stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) as a file descriptor: blocked in the
//! VMM's threads and read through a signalfd by the event loop, so a signal stops the vCPUs
//! cleanly and the profile is written instead of the process dying mid-run or mid-write.
//! SIGHUP (the terminal or the session went away) and SIGQUIT (Ctrl-\\) end a run exactly as
//! SIGTERM does, except that a SIGHUP ignored when hvprof started (`nohup hvprof ...`) stays
//! ignored.
//!
//! The binary blocks them before it opens any input ([`StopSignals::block_and_open`] at the
//! start of `run`, `demo` and `profile`): a signal that arrives while a kernel is read stays
//! pending and ends the run as soon as the event loop starts, never killing hvprof before it
//! has written anything.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The signals that end a run.
pub const STOP_SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// A signalfd for the [`STOP_SIGNALS`]; dropping it restores the previous signal mask.
pub struct StopSignals {
    fd: OwnedFd,
    old_mask: libc::sigset_t,
}

impl StopSignals {
    /// Blocks the [`STOP_SIGNALS`] in the calling thread (threads spawned later inherit the
    /// mask) and opens a signalfd for them.
    pub fn block_and_open() -> std::io::Result<Self> {
        // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it fully.
        let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; zeroed is a valid starting value for the out-parameter.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `mask` is a valid, exclusively borrowed sigset_t.
        unsafe { libc::sigemptyset(&mut mask) };
        for sig in STOP_SIGNALS {
            if sig == libc::SIGHUP && ignored(sig) {
                // `nohup hvprof ...`: the user asked for the run to outlive the terminal.
                continue;
            }
            // SAFETY: as above.
            unsafe { libc::sigaddset(&mut mask, sig) };
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

/// True when `sig`'s disposition is SIG_IGN (inherited from whoever started hvprof). A blocked
/// signal is queued even then, so an ignored signal must be left out of the mask to stay
/// ignored.
fn ignored(sig: i32) -> bool {
    // SAFETY: sigaction is plain data; zeroed is a valid value for the out-parameter.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `old`.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    rc == 0 && old.sa_sigaction == libc::SIG_IGN
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

#[cfg(test)]
mod tests {
    use super::*;

    /// True when `sig` is blocked in the calling thread.
    fn blocked(sig: i32) -> bool {
        // SAFETY: sigset_t is plain data; pthread_sigmask fills it.
        let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a null new mask only reads the current one into `now`.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now) };
        // SAFETY: `now` is initialised above.
        unsafe { libc::sigismember(&now, sig) == 1 }
    }

    #[test]
    fn every_stop_signal_is_read_from_the_descriptor_and_the_mask_restored() {
        // A thread of its own: the mask is per thread, and the test harness's threads are
        // shared.
        std::thread::spawn(|| {
            let signals = StopSignals::block_and_open().unwrap();
            for sig in STOP_SIGNALS {
                assert!(blocked(sig), "{sig}");
                // SAFETY: tgkill takes no pointers; it targets this very thread, which
                // blocks `sig`, so the signal waits in the signalfd.
                let rc =
                    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), sig) };
                assert_eq!(rc, 0);
                assert_eq!(signals.read(), Some(sig));
            }
            assert_eq!(signals.read(), None);
            drop(signals);
            assert!(!blocked(libc::SIGHUP) && !blocked(libc::SIGQUIT));

            // Under nohup SIGHUP stays ignored (dispositions are per process: no other test
            // here sends SIGHUP).
            // SAFETY: SIG_IGN is a valid disposition; the previous one is restored below.
            let before = unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
            let signals = StopSignals::block_and_open().unwrap();
            let hup_blocked = blocked(libc::SIGHUP);
            drop(signals);
            // SAFETY: restores the disposition read above.
            unsafe { libc::signal(libc::SIGHUP, before) };
            assert!(!hup_blocked, "SIGHUP stays ignored under nohup");
        })
        .join()
        .unwrap();
    }
}

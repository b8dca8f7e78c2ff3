//! Perf-event overflows: the signal each of a vCPU thread's perf events sends that thread
//! when its counter overflows (see `sampler::perf`). The signal names the event's descriptor
//! (`si_fd`); the handler counts the overflow in the thread's slot for that descriptor and
//! kicks the thread, so `KVM_RUN` returns and the vCPU samples itself.
//!
//! When the kernel's queue of real-time signals is full it sends SIGIO instead, which names
//! no event: those are counted as stray overflows, lost samples of the thread. A signal
//! queued to the thread by the process itself (`sigqueue`, [`KickTable::queue`]) with a
//! descriptor as its value counts as that descriptor's overflow: `hvprof bench` times the
//! sample path from the signal on that way.
//!
//! [`KickTable::queue`]: super::KickTable::queue

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use vmm_sys_util::syscall::SyscallReturnCode;

/// Perf events one thread can watch.
pub const SLOTS: usize = 32;

const EMPTY: i32 = -1;

thread_local! {
    /// The descriptor each slot watches (EMPTY: free). Only the owning thread writes it.
    static FDS: [AtomicI32; SLOTS] = const { [const { AtomicI32::new(EMPTY) }; SLOTS] };
    /// Overflows delivered for each slot and not yet taken.
    static COUNTS: [AtomicU32; SLOTS] = const { [const { AtomicU32::new(0) }; SLOTS] };
    /// Overflow signals that named no watched descriptor, and SIGIOs.
    static STRAY: AtomicU32 = const { AtomicU32::new(0) };
}

/// The fields of a SIGPOLL-style siginfo (x86-64 layout): signo, errno, code, padding, then
/// the union, which for these signals holds `si_band` and `si_fd`.
#[repr(C)]
struct PollInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    pad: libc::c_int,
    band: libc::c_long,
    fd: libc::c_int,
}

// The overlay stays inside the kernel's 128-byte siginfo.
const _: () = assert!(std::mem::size_of::<PollInfo>() <= std::mem::size_of::<libc::siginfo_t>());

pub(super) extern "C" fn on_overflow(
    _: libc::c_int,
    info: *mut libc::siginfo_t,
    _: *mut libc::c_void,
) {
    let fd = if info.is_null() {
        EMPTY
    // SAFETY: the kernel passes a valid siginfo for the delivered signal.
    } else if unsafe { (*info).si_code } == libc::SI_QUEUE {
        // SAFETY: as above; a queued signal carries the sender's value.
        let value = unsafe { (*info).si_value() };
        i32::try_from(value.sival_ptr as usize).unwrap_or(EMPTY)
    } else {
        // SAFETY: as above; an F_SETSIG signal from an O_ASYNC descriptor fills the SIGPOLL
        // fields, which `PollInfo` overlays within the structure's size.
        unsafe { (*info.cast::<PollInfo>()).fd }
    };
    count(fd);
    super::kick::request_immediate_exit();
}

pub(super) extern "C" fn on_sigio(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STRAY.with(|s| s.fetch_add(1, Ordering::Relaxed));
    super::kick::request_immediate_exit();
}

fn count(fd: RawFd) {
    let slot = FDS.with(|fds| {
        fds.iter()
            .position(|f| fd != EMPTY && f.load(Ordering::Relaxed) == fd)
    });
    match slot {
        Some(i) => COUNTS.with(|c| c[i].fetch_add(1, Ordering::Relaxed)),
        None => STRAY.with(|s| s.fetch_add(1, Ordering::Relaxed)),
    };
}

// fcntl(2) values the libc crate does not export for this target (asm-generic/fcntl.h).
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex`.
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// Makes `fd` signal the calling thread, and only it, with the overflow signal whenever it
/// has news (for a perf event: each overflow): `F_SETOWN_EX` to this thread's id,
/// `F_SETSIG`, `O_ASYNC`.
pub fn route_to_current_thread(fd: RawFd) -> std::io::Result<()> {
    let owner = OwnerEx {
        kind: F_OWNER_TID,
        // SAFETY: gettid has no preconditions.
        pid: unsafe { libc::gettid() },
    };
    // SAFETY: F_SETOWN_EX reads a `struct f_owner_ex`, which `OwnerEx` lays out, from a
    // pointer live for the call.
    SyscallReturnCode(unsafe { libc::fcntl(fd, F_SETOWN_EX, &owner) }).into_empty_result()?;
    // SAFETY: F_SETSIG takes a signal number.
    SyscallReturnCode(unsafe { libc::fcntl(fd, F_SETSIG, super::overflow_signal()) })
        .into_empty_result()?;
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    SyscallReturnCode(flags).into_empty_result()?;
    // SAFETY: F_SETFL takes the flag word; O_ASYNC turns the owner's signal on.
    SyscallReturnCode(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) })
        .into_empty_result()
}

/// Starts counting the calling thread's overflow signals that name `fd`; returns its slot,
/// or None when all slots are taken.
pub fn watch(fd: RawFd) -> Option<usize> {
    FDS.with(|fds| {
        let i = fds
            .iter()
            .position(|f| f.load(Ordering::Relaxed) == EMPTY)?;
        COUNTS.with(|c| c[i].store(0, Ordering::Relaxed));
        fds[i].store(fd, Ordering::Relaxed);
        Some(i)
    })
}

/// Stops watching `slot` (before its descriptor is closed).
pub fn unwatch(slot: usize) {
    FDS.with(|fds| {
        if let Some(f) = fds.get(slot) {
            f.store(EMPTY, Ordering::Relaxed);
        }
    });
}

/// Takes the overflows `slot` received since the last call.
pub fn take(slot: usize) -> u32 {
    COUNTS.with(|c| c.get(slot).map_or(0, |n| n.swap(0, Ordering::Relaxed)))
}

/// Takes the calling thread's stray overflows (signals that named no watched event).
pub fn stray() -> u32 {
    STRAY.with(|s| s.swap(0, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflows_count_in_the_slot_of_the_descriptor_they_name() {
        std::thread::spawn(|| {
            let a = watch(100).unwrap();
            let b = watch(101).unwrap();
            assert_ne!(a, b);
            count(101);
            count(101);
            count(100);
            count(7);
            assert_eq!((take(a), take(b), stray()), (1, 2, 1));
            assert_eq!((take(a), take(b), stray()), (0, 0, 0));
            unwatch(a);
            count(100);
            assert_eq!(stray(), 1);
            // A freed slot is reused, with nothing carried over.
            let c = watch(102).unwrap();
            assert_eq!((c, take(c)), (a, 0));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_signal_queued_with_a_descriptor_counts_as_its_overflow() {
        super::super::install_handlers().unwrap();
        std::thread::spawn(|| {
            let slot = watch(42).unwrap();
            // Queued as a vCPU's tick is (kick.rs builds the siginfo_t the handler reads).
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            super::super::kick::queue(tid, super::super::overflow_signal(), 42).unwrap();
            assert_eq!((take(slot), stray()), (1, 0));
            unwatch(slot);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn every_slot_can_be_taken_and_then_none() {
        std::thread::spawn(|| {
            for fd in 0..SLOTS {
                assert!(watch(i32::try_from(fd).unwrap() + 10).is_some());
            }
            assert_eq!(watch(5), None);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_handler_reads_the_descriptor_the_kernel_names() {
        super::super::install_handlers().unwrap();
        std::thread::spawn(|| {
            // sigqueue cannot set si_fd; a real F_SETSIG descriptor can: a pipe with O_ASYNC
            // owned by this thread signals when it becomes readable.
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for the two descriptors.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            route_to_current_thread(fds[0]).unwrap();
            let slot = watch(fds[0]).unwrap();
            // SAFETY: writing one byte from a live buffer.
            assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
            // The signal is delivered to this thread before write returns to user mode.
            assert_eq!((take(slot), stray()), (1, 0));
            unwatch(slot);
            // SAFETY: closing the descriptors this test opened.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
        })
        .join()
        .unwrap();
    }
}

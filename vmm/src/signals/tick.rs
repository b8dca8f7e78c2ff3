//! Sampling ticks: the signal each vCPU's own sampling timer delivers to that vCPU's thread
//! (see `sampler`). The handler counts the tick and kicks the thread it runs on, so
//! `KVM_RUN` returns and the vCPU samples itself.

use std::sync::atomic::{AtomicU32, Ordering};

thread_local! {
    /// Ticks delivered to this thread and not yet taken. Only this thread and signal handlers
    /// running on it touch it; atomic operations make the handler's increment and the
    /// thread's take indivisible without blocking the signal.
    static TICKS: AtomicU32 = const { AtomicU32::new(0) };
}

pub(super) extern "C" fn on_tick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    TICKS.with(|t| t.fetch_add(1, Ordering::Relaxed));
    super::kick::request_immediate_exit();
}

/// Takes the ticks delivered to the calling thread since the last call.
pub fn take_ticks() -> u32 {
    TICKS.with(|t| t.swap(0, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_count_on_the_thread_that_received_them() {
        super::super::install_handlers().unwrap();
        let on_thread = std::thread::spawn(|| {
            // SAFETY: raise has no preconditions; the handler is installed.
            unsafe { libc::raise(super::super::tick_signal()) };
            // SAFETY: as above.
            unsafe { libc::raise(super::super::tick_signal()) };
            (take_ticks(), take_ticks())
        })
        .join()
        .unwrap();
        // raise() delivers to the calling thread before it returns.
        assert_eq!(on_thread, (2, 0));
        assert_eq!(take_ticks(), 0);
    }
}

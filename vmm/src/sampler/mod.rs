//! Sampling timers: every vCPU thread owns a POSIX timer that the kernel delivers to that very
//! thread (`SIGEV_THREAD_ID`) at the ProfileTime interval in force. The signal handler counts
//! the tick and sets `immediate_exit`, so KVM_RUN returns and the vCPU samples itself from its
//! sync-regs area: a vCPU that is halted or has interrupts disabled is sampled like any other,
//! and no other thread has to be scheduled for a sample to be taken.
//!
//! A timer is armed only while some started object's affinity includes its vCPU. Ticks that
//! arrive before the previous one was taken, and expirations the kernel folded into one signal
//! (timer overruns), are counted as lost samples.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;
use std::time::Duration;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use crate::vcpu::kick;

thread_local! {
    /// Ticks delivered to this thread and not yet taken. Only this thread and signal handlers
    /// running on it touch it; atomic operations make the handler's increment and the
    /// thread's take indivisible without blocking the signal.
    static TICKS: AtomicU32 = const { AtomicU32::new(0) };
}

/// The timer signal.
pub fn sample_signal() -> i32 {
    SIGRTMIN() + 1
}

extern "C" fn on_tick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    TICKS.with(|t| t.fetch_add(1, Ordering::Relaxed));
    kick::request_immediate_exit();
}

/// Installs the tick handler (once per process).
pub fn install_handler() -> Result<(), vmm_sys_util::errno::Error> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| result = register_signal_handler(sample_signal(), on_tick));
    result
}

/// Takes the ticks delivered to the calling thread since the last call.
pub fn take_ticks() -> u32 {
    TICKS.with(|t| t.swap(0, Ordering::Relaxed))
}

/// ProfileTime's unit is 100 ns.
pub fn interval_duration(interval_100ns: u32) -> Duration {
    Duration::from_nanos(u64::from(interval_100ns.max(1)) * 100)
}

/// A timer that signals the thread that created it.
pub struct SampleTimer {
    id: libc::timer_t,
    armed: Option<u32>,
}

impl SampleTimer {
    /// Creates a disarmed timer that will signal the calling thread.
    pub fn for_current_thread() -> std::io::Result<Self> {
        // SAFETY: sigevent is plain data; zeroed is a valid starting value.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = sample_signal();
        // SAFETY: gettid has no preconditions.
        sev.sigev_notify_thread_id = unsafe { libc::gettid() };
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `sev` and `id` are valid for the call; the timer targets this live thread.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SampleTimer { id, armed: None })
    }

    /// Arms the timer at `interval` (100 ns units) or disarms it (`None`); does nothing if
    /// that is already its setting.
    pub fn set(&mut self, interval: Option<u32>) -> std::io::Result<()> {
        if self.armed == interval {
            return Ok(());
        }
        let period = interval.map(interval_duration).unwrap_or_default();
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(period.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(period.subsec_nanos()),
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        // SAFETY: `self.id` is a live timer created by `for_current_thread`; `spec` is valid.
        if unsafe { libc::timer_settime(self.id, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.armed = interval;
        Ok(())
    }

    /// Expirations folded into the last delivered signal (lost samples).
    pub fn overruns(&self) -> u32 {
        // SAFETY: `self.id` is a live timer.
        let n = unsafe { libc::timer_getoverrun(self.id) };
        u32::try_from(n).unwrap_or(0)
    }
}

impl Drop for SampleTimer {
    fn drop(&mut self) {
        // SAFETY: `self.id` is a live timer, deleted exactly once here.
        unsafe { libc::timer_delete(self.id) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_unit_is_100ns() {
        assert_eq!(interval_duration(39_063), Duration::from_nanos(3_906_300));
        assert_eq!(interval_duration(10_000), Duration::from_millis(1));
    }

    #[test]
    fn a_timer_signals_its_own_thread() {
        install_handler().unwrap();
        let ticks = std::thread::spawn(|| {
            let mut t = SampleTimer::for_current_thread().unwrap();
            t.set(Some(10_000)).unwrap();
            let start = std::time::Instant::now();
            let mut n = 0;
            while start.elapsed() < Duration::from_millis(50) {
                n += take_ticks();
                std::thread::sleep(Duration::from_millis(1));
            }
            t.set(None).unwrap();
            n
        })
        .join()
        .unwrap();
        // About 50 ticks in 50 ms at 1 kHz; sleeps overshoot, so allow a wide margin.
        assert!((10..=60).contains(&ticks), "{ticks} ticks");
    }
}

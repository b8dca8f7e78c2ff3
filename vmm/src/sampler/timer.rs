//! The time source: a POSIX timer per vCPU thread that the kernel delivers to that very thread
//! (`SIGEV_THREAD_ID`) as a sampling tick (`signals::tick`) at the ProfileTime interval in
//! force.

use std::time::Duration;

use crate::signals::tick_signal;

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
        sev.sigev_signo = tick_signal();
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
            tv_sec: period.as_secs().try_into().unwrap_or(i64::MAX),
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
    use crate::signals::tick::take_ticks;

    #[test]
    fn interval_unit_is_100ns() {
        assert_eq!(interval_duration(39_063), Duration::from_nanos(3_906_300));
        assert_eq!(interval_duration(10_000), Duration::from_millis(1));
    }

    #[test]
    fn a_timer_signals_its_own_thread() {
        crate::signals::install_handlers().unwrap();
        let ticks = std::thread::spawn(|| {
            let mut t = SampleTimer::for_current_thread().unwrap();
            t.set(Some(10_000)).unwrap();
            // Wait for three ticks however long a loaded host takes to deliver them; a timer
            // that never fires fails through the test runner's time limit.
            let mut n = 0;
            while n < 3 {
                n += take_ticks();
                std::thread::sleep(Duration::from_millis(1));
            }
            t.set(None).unwrap();
            n
        })
        .join()
        .unwrap();
        assert!(ticks >= 3);
        // None went to the thread that did not create the timer.
        assert_eq!(take_ticks(), 0);
    }
}

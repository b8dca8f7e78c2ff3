//! The run's one clock ([`RunClock`]), and calendar time from the host clock for report
//! timestamps. The conversion from seconds to dates is the devices crate's (the guest's RTC
//! shows it too): the one place hvprof does it.

use std::time::{Duration, Instant, SystemTime};

pub use devices::calendar::CivilTime;

/// `t` as RFC 3339 in UTC with milliseconds (`1970-01-01T00:00:00.000Z` before the epoch), as
/// profile.json records a run's start.
pub fn rfc3339(t: SystemTime) -> String {
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let ms = u64::try_from(ms).unwrap_or(u64::MAX);
    let t = CivilTime::from_unix(ms / 1000);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        ms % 1000
    )
}

/// The run's start, read once: on the monotonic clock, and the same moment on the wall clock.
/// Every time the run records counts from it (profile.json's `start_time` and `wall_time_s`,
/// the timeline's zero and `start_unix_ns`, the process table's `first_seen_s`, the guest's
/// running time), so they share one origin.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    start: Instant,
    unix: SystemTime,
}

impl RunClock {
    /// The run starts now.
    pub fn start() -> Self {
        RunClock {
            start: Instant::now(),
            unix: SystemTime::now(),
        }
    }

    /// A run that started at `start`, `unix` on the wall clock (reports made up in tests).
    pub fn at(start: Instant, unix: SystemTime) -> Self {
        RunClock { start, unix }
    }

    /// The start on the monotonic clock.
    pub fn instant(&self) -> Instant {
        self.start
    }

    /// The start on the wall clock.
    pub fn unix(&self) -> SystemTime {
        self.unix
    }

    /// The start in nanoseconds since the Unix epoch (0 before it).
    pub fn unix_ns(&self) -> u64 {
        self.unix
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_clock_is_one_start_on_both_clocks() {
        let c = RunClock::start();
        let copy = c;
        assert_eq!(copy.instant(), c.instant());
        assert_eq!(copy.unix_ns(), c.unix_ns());
        assert_eq!(
            rfc3339(c.unix()),
            rfc3339(SystemTime::UNIX_EPOCH + Duration::from_nanos(c.unix_ns()))
        );
        assert!(c.elapsed() <= c.instant().elapsed());
    }

    #[test]
    fn rfc3339_dates() {
        use std::time::Duration;
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }
}

//! Calendar time from the host clock, for report timestamps. The conversion from seconds to
//! dates is the devices crate's (the guest's RTC shows it too): the one place hvprof does it.

use std::time::SystemTime;

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

#[cfg(test)]
mod tests {
    use super::*;

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

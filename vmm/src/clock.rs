//! Calendar time from the host clock, for the guest's RTC and for report timestamps: the one
//! place hvprof turns seconds into dates.

use std::time::SystemTime;

/// A UTC calendar time.
#[derive(Debug, PartialEq, Eq)]
pub struct CivilTime {
    /// Year.
    pub year: u64,
    /// Month, 1-12.
    pub month: u8,
    /// Day of the month, 1-31.
    pub day: u8,
    /// Day of the week, Sunday = 1.
    pub weekday: u8,
    /// Hour, 0-23.
    pub hour: u8,
    /// Minute.
    pub minute: u8,
    /// Second.
    pub second: u8,
}

impl CivilTime {
    /// Converts seconds since 1970 (Howard Hinnant's days-to-civil algorithm).
    pub fn from_unix(secs: u64) -> Self {
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        let small = |v: u64| u8::try_from(v).unwrap_or(0);
        CivilTime {
            year,
            month: small(month),
            day: small(day),
            weekday: small((days + 4) % 7 + 1), // 1970-01-01 was a Thursday; Sunday = 1
            hour: small(rem / 3600),
            minute: small(rem % 3600 / 60),
            second: small(rem % 60),
        }
    }
}

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
    fn civil_time_of_a_known_instant() {
        // 2026-11-21 06:28:43 UTC, a Saturday.
        let t = CivilTime::from_unix(1_795_242_523);
        assert_eq!(
            t,
            CivilTime {
                year: 2026,
                month: 11,
                day: 21,
                weekday: 7,
                hour: 6,
                minute: 28,
                second: 43
            }
        );
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

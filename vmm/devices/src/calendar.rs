//! Calendar time: seconds since 1970 as the date and time of day the guest's RTC shows (and
//! the VMM's report timestamps). The one place hvprof turns seconds into dates.

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
}

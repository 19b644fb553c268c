//! UTC wall-clock formatting without a date crate (days-to-civil, proleptic Gregorian).

use std::time::{SystemTime, UNIX_EPOCH};

/// A UTC instant broken into calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millis: u32,
}

impl Utc {
    /// Now (a clock before 1970 reads as 1970-01-01).
    pub fn now() -> Utc {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Utc::from_unix(d.as_secs() as i64, d.subsec_millis())
    }

    /// From seconds since the Unix epoch.
    pub fn from_unix(secs: i64, millis: u32) -> Utc {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Utc {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            millis,
        }
    }

    /// `YYYY-mm-dd-HHMMSS`, the suffix of step log files.
    pub fn log_stamp(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// RFC 3339 with milliseconds, `2025-01-02T03:04:05.678Z`.
    pub fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(Utc::from_unix(0, 0).rfc3339(), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T23:59:59Z, a leap day.
        let t = Utc::from_unix(1_709_251_199, 7);
        assert_eq!(t.rfc3339(), "2024-02-29T23:59:59.007Z");
        assert_eq!(t.log_stamp(), "2024-02-29-235959");
        assert_eq!(
            Utc::from_unix(1_735_689_600, 0).log_stamp(),
            "2025-01-01-000000"
        );
    }
}

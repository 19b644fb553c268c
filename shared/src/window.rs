//! Maintenance windows (`DeploymentPolicy.spec.windows`): when new nodes may start.
//!
//! The webhook parses them at admission ([`parse`] reports every problem, naming the field) and the
//! operator, the preview and `kubectl nodewright` evaluate them through the same [`Windows`], so
//! what admission accepts is exactly what the rollout follows.
//!
//! Times are wall-clock times in the window's IANA time zone, from the database compiled into the
//! binaries (no dependency on the host's or the image's zoneinfo). A window opens on each of its
//! days at `start` and closes at `end` on the same day, or on the next day when `end` is at or before
//! `start` (so `start == end` is a whole day). Daylight saving time is followed: a time that does not
//! exist on a spring-forward day is moved forward by the gap (02:30 becomes 03:30), an ambiguous one
//! on a fall-back day is its first occurrence; a window that would then close before it opens
//! (`02:30`-`03:00` on a day whose 02:00-03:00 does not exist) does not open that day.

use std::fmt;

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

use crate::api::{MaintenanceWindow, Weekday};

/// How `status.waitingFor` starts while a closed window holds nodes back (the metric reads it).
pub const WAITING: &str = "waiting for window";

/// The time zone of a window without `timeZone`.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// Why a window is not valid; each names the field (relative to the policy's spec, [`Self::field`])
/// and what to write instead ([`Self::problem`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// `start` or `end` is not `HH:MM`.
    #[error("windows[{index}].{field}: {}", self.problem())]
    BadTime {
        /// The window's index.
        index: usize,
        /// `start` or `end`.
        field: &'static str,
        /// The text as written.
        value: String,
    },
    /// `timeZone` is not in the IANA database.
    #[error("windows[{index}].timeZone: {}", self.problem())]
    BadTimeZone {
        /// The window's index.
        index: usize,
        /// The name as written.
        value: String,
    },
}

impl WindowError {
    /// The field, from the policy's spec: `windows[0].start`.
    pub fn field(&self) -> String {
        match self {
            WindowError::BadTime { index, field, .. } => format!("windows[{index}].{field}"),
            WindowError::BadTimeZone { index, .. } => format!("windows[{index}].timeZone"),
        }
    }

    /// What is wrong and how to fix it.
    pub fn problem(&self) -> String {
        match self {
            WindowError::BadTime { value, .. } => format!(
                "{value:?} is not a time of day; write HH:MM on a 24-hour clock, from 00:00 to \
                 23:59 (e.g. \"22:00\")"
            ),
            WindowError::BadTimeZone { value, .. } => format!(
                "{value:?} is not an IANA time zone name; write one such as \"Europe/Berlin\", \
                 \"America/New_York\" or \"UTC\" (names are case-sensitive)"
            ),
        }
    }
}

/// One parsed window.
#[derive(Debug, Clone)]
struct Window {
    /// Indexed by `Weekday::to_monday_zero_offset`; all true when the window names no day.
    days: [bool; 7],
    start: Time,
    end: Time,
    zone: TimeZone,
    zone_name: String,
    source: MaintenanceWindow,
}

/// Where the clock stands against a policy's windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowState {
    /// No window is configured: nodes may start at any time.
    Always,
    /// A window is open until `closes`.
    Open {
        /// When the last of the open windows closes.
        closes: Zoned,
    },
    /// Every window is closed; the next opens at `opens` (`None`: none ever opens, e.g. every
    /// window lies in a daylight-saving gap).
    Closed {
        /// The next opening.
        opens: Option<Zoned>,
    },
}

impl WindowState {
    /// Whether new nodes may start now.
    pub fn is_open(&self) -> bool {
        !matches!(self, WindowState::Closed { .. })
    }

    /// The status text of a closed window: `waiting for window (opens 2026-12-03T22:00+01:00)`.
    pub fn waiting(&self) -> Option<String> {
        match self {
            WindowState::Closed { opens: Some(at) } => {
                Some(format!("{WAITING} (opens {})", format_local(at)))
            }
            WindowState::Closed { opens: None } => {
                Some(format!("{WAITING} (no window ever opens)"))
            }
            _ => None,
        }
    }

    /// The next opening, when closed.
    pub fn opens(&self) -> Option<&Zoned> {
        match self {
            WindowState::Closed { opens } => opens.as_ref(),
            _ => None,
        }
    }

    /// How long until the next opening (for a requeue), when closed.
    pub fn until_open(&self, now: Timestamp) -> Option<std::time::Duration> {
        match self {
            WindowState::Closed { opens: Some(at) } => {
                let secs = at.timestamp().as_second().saturating_sub(now.as_second());
                Some(std::time::Duration::from_secs(
                    u64::try_from(secs.max(0)).unwrap_or_default(),
                ))
            }
            _ => None,
        }
    }
}

/// A time in its zone's local time with its offset, to the minute: `2026-12-03T22:00+01:00`.
pub fn format_local(at: &Zoned) -> String {
    at.strftime("%Y-%m-%dT%H:%M%:z").to_string()
}

/// A policy's windows, parsed.
#[derive(Debug, Clone, Default)]
pub struct Windows(Vec<Window>);

fn weekday_index(day: Weekday) -> usize {
    match day {
        Weekday::Mon => 0,
        Weekday::Tue => 1,
        Weekday::Wed => 2,
        Weekday::Thu => 3,
        Weekday::Fri => 4,
        Weekday::Sat => 5,
        Weekday::Sun => 6,
    }
}

/// `HH:MM` with 00 ≤ HH ≤ 23 and 00 ≤ MM ≤ 59, exactly five characters.
fn parse_time(text: &str) -> Option<Time> {
    let bytes = text.as_bytes();
    if bytes.len() != 5 || bytes[2] != b':' {
        return None;
    }
    let digits = |a: u8, b: u8| -> Option<i8> {
        (a.is_ascii_digit() && b.is_ascii_digit())
            .then(|| i8::try_from((a - b'0') * 10 + (b - b'0')).ok())
            .flatten()
    };
    let hour = digits(bytes[0], bytes[1]).filter(|h| *h <= 23)?;
    let minute = digits(bytes[3], bytes[4]).filter(|m| *m <= 59)?;
    Time::new(hour, minute, 0, 0).ok()
}

/// Parses a policy's windows, reporting every problem.
pub fn parse(windows: &[MaintenanceWindow]) -> Result<Windows, Vec<WindowError>> {
    let mut problems = Vec::new();
    let mut parsed = Vec::new();
    for (index, w) in windows.iter().enumerate() {
        let start = parse_time(&w.start);
        if start.is_none() {
            problems.push(WindowError::BadTime {
                index,
                field: "start",
                value: w.start.clone(),
            });
        }
        let end = parse_time(&w.end);
        if end.is_none() {
            problems.push(WindowError::BadTime {
                index,
                field: "end",
                value: w.end.clone(),
            });
        }
        let zone_name = w
            .time_zone
            .clone()
            .unwrap_or_else(|| DEFAULT_TIME_ZONE.to_owned());
        let zone = jiff::tz::db().get(&zone_name).ok();
        if zone.is_none() {
            problems.push(WindowError::BadTimeZone {
                index,
                value: zone_name.clone(),
            });
        }
        if let (Some(start), Some(end), Some(zone)) = (start, end, zone) {
            let mut days = [w.days.is_empty(); 7];
            for d in &w.days {
                days[weekday_index(*d)] = true;
            }
            parsed.push(Window {
                days,
                start,
                end,
                zone,
                zone_name,
                source: w.clone(),
            });
        }
    }
    if problems.is_empty() {
        Ok(Windows(parsed))
    } else {
        Err(problems)
    }
}

impl Window {
    /// The window that opens on local date `day`, as `[open, close)`; `None` when it does not open
    /// that day (not one of its days, or it lies inside a daylight-saving gap).
    fn on(&self, day: Date) -> Option<(Zoned, Zoned)> {
        let index = usize::from(day.weekday().to_monday_zero_offset().unsigned_abs());
        if !self.days.get(index).copied().unwrap_or(false) {
            return None;
        }
        let open = day
            .to_datetime(self.start)
            .to_zoned(self.zone.clone())
            .ok()?;
        let end_day = if self.end <= self.start {
            day.checked_add(1.day()).ok()?
        } else {
            day
        };
        let close = end_day
            .to_datetime(self.end)
            .to_zoned(self.zone.clone())
            .ok()?;
        (open.timestamp() < close.timestamp()).then_some((open, close))
    }

    fn local_date(&self, now: Timestamp) -> Date {
        now.to_zoned(self.zone.clone()).date()
    }
}

impl Windows {
    /// No window configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where `now` stands against the windows.
    pub fn state(&self, now: Timestamp) -> WindowState {
        if self.0.is_empty() {
            return WindowState::Always;
        }
        let mut closes: Option<Zoned> = None;
        let mut opens: Option<Zoned> = None;
        for w in &self.0 {
            let today = w.local_date(now);
            // A window is at most a day and an hour (a fall-back day) long: one that opened before
            // yesterday has closed.
            for offset in -1..=8_i64 {
                let Ok(day) = today.checked_add(offset.days()) else {
                    continue;
                };
                let Some((open, close)) = w.on(day) else {
                    continue;
                };
                if open.timestamp() <= now && now < close.timestamp() {
                    if closes
                        .as_ref()
                        .is_none_or(|c| c.timestamp() < close.timestamp())
                    {
                        closes = Some(close);
                    }
                } else if open.timestamp() > now
                    && opens
                        .as_ref()
                        .is_none_or(|o| o.timestamp() > open.timestamp())
                {
                    opens = Some(open);
                }
            }
        }
        match closes {
            Some(closes) => WindowState::Open { closes },
            None => WindowState::Closed { opens },
        }
    }

    /// One line per window, for `kubectl nodewright plan`: `Mon,Tue 22:00-04:00 Europe/Berlin`.
    pub fn describe(&self) -> Vec<String> {
        self.0.iter().map(Window::to_string).collect()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = if self.source.days.is_empty() {
            "every day".to_owned()
        } else {
            self.source
                .days
                .iter()
                .map(|d| format!("{d:?}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let next_day = if self.end <= self.start {
            " (next day)"
        } else {
            ""
        };
        write!(
            f,
            "{days} {}-{}{next_day} {}",
            self.source.start, self.source.end, self.zone_name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(days: &[Weekday], start: &str, end: &str, tz: Option<&str>) -> MaintenanceWindow {
        MaintenanceWindow {
            days: days.to_vec(),
            start: start.to_owned(),
            end: end.to_owned(),
            time_zone: tz.map(str::to_owned),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn state(windows: &[MaintenanceWindow], now: &str) -> WindowState {
        parse(windows).expect("valid windows").state(at(now))
    }

    fn opens(windows: &[MaintenanceWindow], now: &str) -> String {
        match state(windows, now) {
            WindowState::Closed { opens: Some(at) } => format_local(&at),
            other => panic!("expected a closed window, got {other:?}"),
        }
    }

    #[test]
    fn no_window_means_any_time() {
        assert_eq!(state(&[], "2026-12-03T12:00:00Z"), WindowState::Always);
        assert!(WindowState::Always.is_open());
    }

    #[test]
    fn a_night_window_crosses_midnight() {
        let w = [window(&[], "22:00", "04:00", Some("Europe/Berlin"))];
        // 12:00 UTC is 13:00 in Berlin (winter, +01:00): closed until 22:00.
        assert_eq!(opens(&w, "2026-12-03T12:00:00Z"), "2026-12-03T22:00+01:00");
        assert_eq!(
            state(&w, "2026-12-03T12:00:00Z").waiting().as_deref(),
            Some("waiting for window (opens 2026-12-03T22:00+01:00)")
        );
        // 23:30 Berlin and 03:59 Berlin the next day are inside; 04:00 is not.
        assert!(state(&w, "2026-12-03T22:30:00Z").is_open());
        assert!(state(&w, "2026-12-04T02:59:00Z").is_open());
        assert!(!state(&w, "2026-12-04T03:00:00Z").is_open());
    }

    #[test]
    fn days_are_the_opening_days_in_the_window_zone() {
        // Friday night into Saturday, in New York.
        let w = [window(
            &[Weekday::Fri],
            "23:00",
            "02:00",
            Some("America/New_York"),
        )];
        // 2026-12-04 is a Friday. Saturday 01:00 New York (06:00 UTC) is inside Friday's window.
        assert!(state(&w, "2026-12-05T06:00:00Z").is_open());
        // Saturday 23:30 New York is not a Friday.
        assert_eq!(opens(&w, "2026-12-06T04:30:00Z"), "2026-12-11T23:00-05:00");
    }

    #[test]
    fn equal_start_and_end_is_a_whole_day() {
        let w = [window(&[Weekday::Sun], "00:00", "00:00", None)];
        // 2026-12-06 is a Sunday.
        assert!(state(&w, "2026-12-06T00:00:00Z").is_open());
        assert!(state(&w, "2026-12-06T23:59:59Z").is_open());
        assert!(!state(&w, "2026-12-07T00:00:00Z").is_open());
    }

    #[test]
    fn several_windows_the_earliest_opening_wins() {
        let w = [
            window(&[], "22:00", "23:00", Some("UTC")),
            window(&[], "14:00", "15:00", Some("UTC")),
        ];
        assert_eq!(opens(&w, "2026-12-03T12:00:00Z"), "2026-12-03T14:00+00:00");
        assert_eq!(opens(&w, "2026-12-03T15:00:00Z"), "2026-12-03T22:00+00:00");
        match state(&w, "2026-12-03T14:30:00Z") {
            WindowState::Open { closes } => {
                assert_eq!(format_local(&closes), "2026-12-03T15:00+00:00")
            }
            other => panic!("expected open, got {other:?}"),
        }
    }

    #[test]
    fn daylight_saving_time_moves_the_window_with_the_wall_clock() {
        let w = [window(&[], "01:00", "05:00", Some("Europe/Berlin"))];
        // Before the spring change the window is 00:00-04:00 UTC, after it 23:00-03:00 UTC.
        assert!(state(&w, "2026-03-28T00:30:00Z").is_open());
        assert!(state(&w, "2026-03-29T23:30:00Z").is_open());
        assert_eq!(opens(&w, "2026-03-29T12:00:00Z"), "2026-03-30T01:00+02:00");
        // 2026-03-29 02:00 → 03:00 in Berlin: the window of that night is an hour shorter.
        assert!(state(&w, "2026-03-29T02:30:00Z").is_open());
        assert!(!state(&w, "2026-03-29T03:00:00Z").is_open());
    }

    #[test]
    fn a_time_inside_the_spring_gap_moves_forward() {
        // 02:30 does not exist in Berlin on 2026-03-29: the window opens at 03:30 (+02:00).
        let w = [window(
            &[Weekday::Sun],
            "02:30",
            "04:00",
            Some("Europe/Berlin"),
        )];
        assert_eq!(opens(&w, "2026-03-28T12:00:00Z"), "2026-03-29T03:30+02:00");
        // A window inside the gap moves forward with it (02:10-02:50 is 03:10-03:50 that day)...
        let inside = [window(
            &[Weekday::Sun],
            "02:10",
            "02:50",
            Some("Europe/Berlin"),
        )];
        assert_eq!(
            opens(&inside, "2026-03-28T12:00:00Z"),
            "2026-03-29T03:10+02:00"
        );
        // ...but one that would close before it opens (02:30 → 03:30, closing at 03:00) does not open
        // that day: the next opening is a week later.
        let gap = [window(
            &[Weekday::Sun],
            "02:30",
            "03:00",
            Some("Europe/Berlin"),
        )];
        assert_eq!(
            opens(&gap, "2026-03-28T12:00:00Z"),
            "2026-04-05T02:30+02:00"
        );
    }

    #[test]
    fn the_fall_back_day_window_is_an_hour_longer() {
        // 2026-10-25 03:00 → 02:00 in Berlin: 00:00-06:00 local is seven hours long.
        let w = [window(
            &[Weekday::Sun],
            "00:00",
            "06:00",
            Some("Europe/Berlin"),
        )];
        assert!(state(&w, "2026-10-24T22:00:00Z").is_open());
        assert!(state(&w, "2026-10-25T04:59:00Z").is_open());
        assert!(!state(&w, "2026-10-25T05:00:00Z").is_open());
    }

    #[test]
    fn bad_windows_name_the_field_and_the_fix() {
        let problems = parse(&[
            window(&[], "25:00", "4:00", Some("Europe/Berln")),
            window(&[], "22:00", "04:00", None),
        ])
        .expect_err("invalid");
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text[0].starts_with("windows[0].start: \"25:00\" is not a time of day"));
        assert!(text[1].starts_with("windows[0].end: \"4:00\""));
        assert!(text[2].starts_with("windows[0].timeZone: \"Europe/Berln\" is not an IANA"));
        for bad in [
            "24:00", "12:60", "1200", "ab:cd", "12:0 ", "-1:00", "12:00:00",
        ] {
            assert!(parse_time(bad).is_none(), "{bad}");
        }
        assert!(parse_time("00:00").is_some() && parse_time("23:59").is_some());
    }

    #[test]
    fn describe_reads_like_the_spec() {
        let w = parse(&[
            window(
                &[Weekday::Mon, Weekday::Tue],
                "22:00",
                "04:00",
                Some("Europe/Berlin"),
            ),
            window(&[], "10:00", "12:00", None),
        ])
        .expect("valid");
        assert_eq!(
            w.describe(),
            vec![
                "Mon,Tue 22:00-04:00 (next day) Europe/Berlin",
                "every day 10:00-12:00 UTC"
            ]
        );
    }

    #[test]
    fn until_open_is_the_wait_for_a_requeue() {
        let w = [window(&[], "14:00", "15:00", None)];
        let now = at("2026-12-03T13:59:30Z");
        assert_eq!(
            parse(&w).expect("valid").state(now).until_open(now),
            Some(std::time::Duration::from_secs(30))
        );
    }
}

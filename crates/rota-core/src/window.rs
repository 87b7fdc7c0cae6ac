//! Maintenance windows: the days and hours in which new maintenance may start (design §2).
//!
//! A window is written `[DAYS] HH:MM-HH:MM [TIME ZONE]`, for example
//! `mon-fri 22:00-04:00 Europe/Berlin`; either time may carry seconds (`HH:MM:SS`):
//! - DAYS is one day (`mon`), a range (`mon-fri`, or `fri-mon` wrapping over the weekend), a
//!   comma-separated list of days and ranges (`mon,wed,fri-sat`), or `*` / `daily`. Left out, it
//!   means every day. Names are the first three letters of the English day, in any case.
//! - An end before the start means the window crosses midnight; DAYS names the day on which it
//!   *starts*, so `fri 22:00-04:00` runs from Friday 22:00 to Saturday 04:00. Start and end must
//!   differ (a whole day is `00:00-23:59`).
//! - TIME ZONE is an IANA name from the tz database bundled into the binary; left out, it is UTC.
//!
//! # Daylight saving time
//!
//! Every occurrence of a window runs from the first instant at which the local wall clock reads
//! the start time (or later) on its start day, to the first instant after that at which the
//! clock reads the end time (or later). What follows:
//! - a start or end in a gap (the hour skipped when clocks go forward) happens when the gap
//!   ends: `sun 02:30-04:00 Europe/Berlin` opens at 03:00 CEST on the last Sunday of March, and
//!   a window wholly inside the gap (`sun 02:00-02:30`) does not open that day;
//! - a start or end in a fold (the hour repeated when clocks go back) happens at its first
//!   occurrence, and the window does not reopen when the clock passes the same times again;
//! - so an occurrence lasts as long as the wall clock takes from start to end: an hour less or
//!   more than usual on the days the clocks change.

use std::fmt;
use std::str::FromStr;

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Day names in Monday-first order, as written in windows.
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// What [`MaintenanceWindows::closes_at`] looks ahead: windows that together stay open longer
/// than this cover the whole week, and the close reported is then only a lower bound.
pub const CLOSE_HORIZON: SignedDuration = SignedDuration::from_hours(8 * 24);

/// How many start days [`MaintenanceWindow::next_open`] tries: two weeks and a day, since an
/// occurrence that falls into a DST gap is skipped and the next one is a week later.
const SEARCH_DAYS: usize = 16;

/// A malformed window, or an empty list of windows. Each message names the value and what is
/// allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The window text could not be understood.
    #[error("invalid window {window:?}: {problem}")]
    Invalid {
        /// The whole window as given.
        window: String,
        /// What is wrong with it.
        problem: WindowProblem,
    },
    /// A list of windows with no window in it.
    #[error(
        "no maintenance window given; expected at least one window like \"mon-fri 22:00-04:00 Europe/Berlin\""
    )]
    Empty,
}

/// The part of a window that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowProblem {
    /// No time range where one was expected.
    #[error(
        "missing times; expected [DAYS] HH:MM-HH:MM [TIME ZONE], like \"mon-fri 22:00-04:00 Europe/Berlin\""
    )]
    MissingTimes,
    /// A day that is not a day name.
    #[error(
        "unknown day {value:?}; expected mon,tue,wed,thu,fri,sat,sun, a range like mon-fri, a list like mon,wed,fri, or * for every day"
    )]
    Day {
        /// The rejected day.
        value: String,
    },
    /// A time range that is not `HH:MM-HH:MM`.
    #[error(
        "invalid times {value:?}; expected HH:MM-HH:MM (or HH:MM:SS) with times from 00:00 to 23:59:59, like 22:00-04:00"
    )]
    Times {
        /// The rejected time range.
        value: String,
    },
    /// A time range that starts where it ends.
    #[error(
        "times {value:?} start and end at the same time; expected an end before the start (crossing midnight) or after it"
    )]
    EmptyTimes {
        /// The rejected time range.
        value: String,
    },
    /// A time zone the bundled tz database does not know.
    #[error("unknown time zone {value:?}; expected an IANA name like Europe/Berlin, or UTC")]
    TimeZone {
        /// The rejected time zone.
        value: String,
    },
    /// Text after the time zone.
    #[error("unexpected {value:?} after the time zone; expected [DAYS] HH:MM-HH:MM [TIME ZONE]")]
    Trailing {
        /// The first unexpected word.
        value: String,
    },
}

/// One maintenance window: days, start and end time, and time zone. Parse it with
/// [`str::parse`]; see the [module documentation](self) for the syntax and DST behaviour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceWindow {
    /// Bit `i` set: the window starts on the day with Monday-zero offset `i`.
    days: u8,
    start: Time,
    end: Time,
    zone: TimeZone,
    zone_name: String,
}

impl MaintenanceWindow {
    /// Whether new maintenance may start at `at`.
    pub fn is_open(&self, at: Timestamp) -> bool {
        self.occurrence_containing(at).is_some()
    }

    /// When the window next opens: `at` itself when it is open then. `None` only when the next
    /// opening lies beyond the range of [`Timestamp`].
    pub fn next_open(&self, at: Timestamp) -> Option<Timestamp> {
        if self.is_open(at) {
            return Some(at);
        }
        let mut day = self.zone.to_datetime(at).date().yesterday().ok()?;
        for _ in 0..SEARCH_DAYS {
            if let Some((open, close)) = self.occurrence(day)
                && open >= at
                && open < close
            {
                return Some(open);
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// When the window, open at `at`, closes (the first instant at which it is no longer open).
    /// `None` when it is closed at `at`.
    pub fn closes_at(&self, at: Timestamp) -> Option<Timestamp> {
        closes_at(std::slice::from_ref(self), at)
    }

    /// The occurrence (open, close) that contains `at`, if any. Only occurrences starting the
    /// local day before `at` or on its day can: one starting earlier ends, by wall clock, before
    /// `at`'s day begins.
    fn occurrence_containing(&self, at: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let today = self.zone.to_datetime(at).date();
        [today.yesterday().ok(), Some(today)]
            .into_iter()
            .flatten()
            .filter_map(|day| self.occurrence(day))
            .find(|&(open, close)| open <= at && at < close)
    }

    /// The occurrence that starts on `day`, if the window starts on that day of the week. It
    /// may be empty (open == close) when it lies wholly inside a DST gap.
    fn occurrence(&self, day: Date) -> Option<(Timestamp, Timestamp)> {
        if self.days & day_bit(day.weekday()) == 0 {
            return None;
        }
        let end_day = if self.end > self.start {
            day
        } else {
            day.tomorrow().ok()?
        };
        Some((
            self.resolve(day, self.start)?,
            self.resolve(end_day, self.end)?,
        ))
    }

    /// The first instant at which the local wall clock reads `time` on `day`, or later.
    fn resolve(&self, day: Date, time: Time) -> Option<Timestamp> {
        let civil = day.to_datetime(time);
        match self.zone.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok(),
            AmbiguousOffset::Fold { before, after } => {
                let first = before.to_timestamp(civil).ok()?;
                let second = after.to_timestamp(civil).ok()?;
                Some(first.min(second))
            }
            AmbiguousOffset::Gap { before, after } => {
                // Read with either offset, the time lands on both sides of the transition that
                // made the gap; the clock first reads it or later at that transition.
                let first = before.to_timestamp(civil).ok()?;
                let second = after.to_timestamp(civil).ok()?;
                let transition = self.zone.following(first.min(second)).next()?;
                Some(transition.timestamp())
            }
        }
    }
}

impl FromStr for MaintenanceWindow {
    type Err = WindowError;

    fn from_str(window: &str) -> Result<Self, Self::Err> {
        parse(window).map_err(|problem| WindowError::Invalid {
            window: window.to_owned(),
            problem,
        })
    }
}

impl fmt::Display for MaintenanceWindow {
    /// The canonical form, which parses back to an equal window.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.days == ALL_DAYS {
            f.write_str("*")?;
        } else {
            let names: Vec<&str> = DAY_NAMES
                .iter()
                .enumerate()
                .filter(|&(i, _)| self.days & (1 << i) != 0)
                .map(|(_, name)| *name)
                .collect();
            f.write_str(&names.join(","))?;
        }
        write!(
            f,
            " {}-{} {}",
            clock(self.start),
            clock(self.end),
            self.zone_name
        )
    }
}

/// Several windows: maintenance may start while any of them is open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceWindows(Vec<MaintenanceWindow>);

impl MaintenanceWindows {
    /// At least one window; an empty list is refused, since it would never be open (to allow
    /// maintenance at any time, configure no windows at all).
    pub fn new(windows: Vec<MaintenanceWindow>) -> Result<MaintenanceWindows, WindowError> {
        if windows.is_empty() {
            return Err(WindowError::Empty);
        }
        Ok(MaintenanceWindows(windows))
    }

    /// Parses each window, failing on the first malformed one or on an empty list.
    pub fn parse<'a>(
        windows: impl IntoIterator<Item = &'a str>,
    ) -> Result<MaintenanceWindows, WindowError> {
        let windows = windows
            .into_iter()
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?;
        MaintenanceWindows::new(windows)
    }

    /// The windows, in the order given.
    pub fn windows(&self) -> &[MaintenanceWindow] {
        &self.0
    }

    /// Whether any window is open at `at`.
    pub fn is_open(&self, at: Timestamp) -> bool {
        self.0.iter().any(|w| w.is_open(at))
    }

    /// When the first window next opens: `at` itself when one is open then.
    pub fn next_open(&self, at: Timestamp) -> Option<Timestamp> {
        self.0.iter().filter_map(|w| w.next_open(at)).min()
    }

    /// When no window is open any more, counting from `at`: windows that overlap or touch hand
    /// over to each other. `None` when none is open at `at`. Past [`CLOSE_HORIZON`] the search
    /// stops, and the result is a lower bound.
    pub fn closes_at(&self, at: Timestamp) -> Option<Timestamp> {
        closes_at(&self.0, at)
    }
}

/// The first instant from `at` on at which none of `windows` is open, or `None` if none is
/// open at `at`. Each step moves to the latest close among the occurrences open at the current
/// instant, so windows that overlap or touch chain into one open stretch.
fn closes_at(windows: &[MaintenanceWindow], at: Timestamp) -> Option<Timestamp> {
    let latest_close = |t: Timestamp| {
        windows
            .iter()
            .filter_map(|w| w.occurrence_containing(t))
            .map(|(_, close)| close)
            .max()
    };
    let horizon = at.checked_add(CLOSE_HORIZON).unwrap_or(Timestamp::MAX);
    let mut close = latest_close(at)?;
    while close < horizon {
        match latest_close(close) {
            Some(later) => close = later,
            None => break,
        }
    }
    Some(close)
}

const ALL_DAYS: u8 = 0b111_1111;

/// `HH:MM`, or `HH:MM:SS` when the time has seconds, as windows are written.
fn clock(time: Time) -> String {
    if time.second() == 0 {
        time.strftime("%H:%M").to_string()
    } else {
        time.strftime("%H:%M:%S").to_string()
    }
}

fn day_bit(day: Weekday) -> u8 {
    1 << day.to_monday_zero_offset()
}

fn parse(window: &str) -> Result<MaintenanceWindow, WindowProblem> {
    let mut words = window.split_whitespace().peekable();
    let starts_with_digit = |w: &&str| w.starts_with(|c: char| c.is_ascii_digit());
    let days = match words.next_if(|w| !starts_with_digit(w)) {
        Some(days) => parse_days(days)?,
        None => ALL_DAYS,
    };
    let times = words.next().ok_or(WindowProblem::MissingTimes)?;
    let (start, end) = parse_times(times)?;
    let zone_name = words.next().unwrap_or("UTC");
    let zone = TimeZone::get(zone_name).map_err(|_| WindowProblem::TimeZone {
        value: zone_name.to_owned(),
    })?;
    if let Some(extra) = words.next() {
        return Err(WindowProblem::Trailing {
            value: extra.to_owned(),
        });
    }
    Ok(MaintenanceWindow {
        days,
        start,
        end,
        zone_name: zone.iana_name().unwrap_or(zone_name).to_owned(),
        zone,
    })
}

fn parse_days(days: &str) -> Result<u8, WindowProblem> {
    if days == "*" || days.eq_ignore_ascii_case("daily") {
        return Ok(ALL_DAYS);
    }
    let mut set = 0;
    for part in days.split(',') {
        set |= match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (day_index(first)?, day_index(last)?);
                // A range may wrap past Sunday: fri-mon is fri,sat,sun,mon.
                let len = (last + 7 - first) % 7 + 1;
                (0..len).fold(0, |set, i| set | 1 << ((first + i) % 7))
            }
            None => 1 << day_index(part)?,
        };
    }
    Ok(set)
}

fn day_index(day: &str) -> Result<usize, WindowProblem> {
    DAY_NAMES
        .iter()
        .position(|name| name.eq_ignore_ascii_case(day))
        .ok_or_else(|| WindowProblem::Day {
            value: day.to_owned(),
        })
}

fn parse_times(times: &str) -> Result<(Time, Time), WindowProblem> {
    let invalid = || WindowProblem::Times {
        value: times.to_owned(),
    };
    let (start, end) = times.split_once('-').ok_or_else(invalid)?;
    let (start, end) = (
        parse_time(start).ok_or_else(invalid)?,
        parse_time(end).ok_or_else(invalid)?,
    );
    if start == end {
        return Err(WindowProblem::EmptyTimes {
            value: times.to_owned(),
        });
    }
    Ok((start, end))
}

/// `HH:MM` or `HH:MM:SS`, exactly two digits each.
fn parse_time(time: &str) -> Option<Time> {
    let mut parts = time.split(':');
    let (hour, minute, second) = (parts.next()?, parts.next()?, parts.next().unwrap_or("00"));
    let two_digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some() || ![hour, minute, second].into_iter().all(two_digits) {
        return None;
    }
    Time::new(
        hour.parse().ok()?,
        minute.parse().ok()?,
        second.parse().ok()?,
        0,
    )
    .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn window(text: &str) -> MaintenanceWindow {
        text.parse().unwrap()
    }

    fn ts(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn error(text: &str) -> String {
        text.parse::<MaintenanceWindow>().unwrap_err().to_string()
    }

    #[test]
    fn parses_day_forms_to_canonical_text() {
        let cases = [
            (
                "mon-fri 22:00-04:00 Europe/Berlin",
                "mon,tue,wed,thu,fri 22:00-04:00 Europe/Berlin",
            ),
            ("sat-sun 01:00-05:00", "sat,sun 01:00-05:00 UTC"),
            ("Mon,WED,fri 10:00-11:30 UTC", "mon,wed,fri 10:00-11:30 UTC"),
            ("fri-mon 00:00-06:00", "mon,fri,sat,sun 00:00-06:00 UTC"),
            ("tue-tue 00:00-06:00", "tue 00:00-06:00 UTC"),
            ("mon,tue-thu 00:00-06:00", "mon,tue,wed,thu 00:00-06:00 UTC"),
            ("* 22:00-04:00", "* 22:00-04:00 UTC"),
            ("daily 22:00-04:00", "* 22:00-04:00 UTC"),
            ("mon-sun 22:00-04:00", "* 22:00-04:00 UTC"),
            (
                "22:00-04:00 America/New_York",
                "* 22:00-04:00 America/New_York",
            ),
            ("  sun   03:00-04:00  ", "sun 03:00-04:00 UTC"),
        ];
        for (given, canonical) in cases {
            let parsed = window(given);
            assert_eq!(parsed.to_string(), canonical, "{given}");
            assert_eq!(window(canonical), parsed, "{canonical} parses back");
        }
    }

    #[test]
    fn errors_name_the_value_and_what_is_allowed() {
        assert_eq!(
            error("mon-fry 22:00-04:00"),
            "invalid window \"mon-fry 22:00-04:00\": unknown day \"fry\"; expected \
             mon,tue,wed,thu,fri,sat,sun, a range like mon-fri, a list like mon,wed,fri, \
             or * for every day"
        );
        assert!(error("mon,,fri 22:00-04:00").contains("unknown day \"\""));
        assert!(error("weekdays 22:00-04:00").contains("unknown day \"weekdays\""));
        for bad in [
            "22:00",
            "24:00-01:00",
            "9:00-10:00",
            "22:60-23:00",
            "22:00-",
            "aa:bb-cc:dd",
            "22:00:60-23:00",
            "22:00:5-23:00",
            "22:00:00:00-23:00",
            "22:00:-23:00",
        ] {
            assert_eq!(
                error(&format!("mon {bad}")),
                format!(
                    "invalid window \"mon {bad}\": invalid times {bad:?}; expected HH:MM-HH:MM \
                     (or HH:MM:SS) with times from 00:00 to 23:59:59, like 22:00-04:00"
                )
            );
        }
        assert!(error("mon 22:00-22:00").contains("times \"22:00-22:00\" start and end"));
        assert_eq!(
            error("mon 22:00-04:00 Europe/Berln"),
            "invalid window \"mon 22:00-04:00 Europe/Berln\": unknown time zone \
             \"Europe/Berln\"; expected an IANA name like Europe/Berlin, or UTC"
        );
        assert!(error("mon 22:00-04:00 UTC extra").contains("unexpected \"extra\""));
        assert!(error("").contains("missing times"));
        assert!(error("mon").contains("missing times"));
        assert_eq!(
            MaintenanceWindows::parse([]).unwrap_err(),
            WindowError::Empty
        );
        assert!(matches!(
            MaintenanceWindows::parse(["mon 01:00-02:00", "mon-fry 01:00-02:00"]),
            Err(WindowError::Invalid { window, .. }) if window == "mon-fry 01:00-02:00"
        ));
    }

    #[test]
    fn seconds_are_optional_and_count() {
        let w = window("12:00:30-12:00:45");
        assert_eq!(w.to_string(), "* 12:00:30-12:00:45 UTC");
        assert_eq!(window(&w.to_string()), w, "parses back");
        assert_eq!(window("12:00:00-13:00").to_string(), "* 12:00-13:00 UTC");
        assert_eq!(window("12:00:00-13:00"), window("12:00-13:00"));
        assert!(!w.is_open(ts("2026-11-27T12:00:29.999Z")));
        assert!(w.is_open(ts("2026-11-27T12:00:30Z")));
        assert!(w.is_open(ts("2026-11-27T12:00:44.999Z")));
        assert!(!w.is_open(ts("2026-11-27T12:00:45Z")));
        assert_eq!(
            w.next_open(ts("2026-11-27T12:00:00Z")),
            Some(ts("2026-11-27T12:00:30Z"))
        );
        assert_eq!(
            w.closes_at(ts("2026-11-27T12:00:31Z")),
            Some(ts("2026-11-27T12:00:45Z"))
        );
        // Crossing midnight by a few seconds.
        let late = window("23:59:50-00:00:10");
        assert!(late.is_open(ts("2026-11-28T00:00:05Z")));
        assert!(!late.is_open(ts("2026-11-28T00:00:10Z")));
    }

    #[test]
    fn a_window_crossing_midnight_belongs_to_its_start_day() {
        let w = window("mon-fri 22:00-04:00");
        // 2026-11-27 is a Friday.
        assert!(!w.is_open(ts("2026-11-27T21:59:59Z")));
        assert!(w.is_open(ts("2026-11-27T22:00:00Z")));
        assert!(w.is_open(ts("2026-11-28T03:59:59.999Z")));
        assert!(!w.is_open(ts("2026-11-28T04:00:00Z")));
        // Saturday evening starts no window, so Sunday morning is closed too.
        assert!(!w.is_open(ts("2026-11-28T23:00:00Z")));
        assert!(!w.is_open(ts("2026-11-29T02:00:00Z")));
        // Monday morning is the tail of no window: Sunday is not in mon-fri.
        assert!(!w.is_open(ts("2026-11-30T02:00:00Z")));
        assert!(w.is_open(ts("2026-11-30T22:30:00Z")));
    }

    #[test]
    fn next_open_and_closes_at() {
        let w = window("mon-fri 22:00-04:00 Europe/Berlin");
        // Friday 2026-11-27 23:00 in Berlin (CET, +01:00) is open until Saturday 04:00.
        let open = ts("2026-11-27T22:00:00Z");
        assert_eq!(w.next_open(open), Some(open));
        assert_eq!(w.closes_at(open), Some(ts("2026-11-28T03:00:00Z")));
        // From Saturday noon the next window is Monday 22:00 CET.
        let closed = ts("2026-11-28T12:00:00Z");
        assert_eq!(w.next_open(closed), Some(ts("2026-11-30T21:00:00Z")));
        assert_eq!(w.closes_at(closed), None);
        // The close is the first closed instant.
        assert_eq!(
            w.closes_at(ts("2026-11-28T02:59:59Z")),
            Some(ts("2026-11-28T03:00:00Z"))
        );
        assert_eq!(
            w.next_open(ts("2026-11-28T03:00:00Z")),
            Some(ts("2026-11-30T21:00:00Z"))
        );
    }

    #[test]
    fn a_start_in_the_spring_gap_opens_when_the_gap_ends() {
        // Berlin skips 02:00-03:00 on Sunday 2026-03-29: 01:00Z is 03:00 CEST.
        let w = window("sun 02:30-04:00 Europe/Berlin");
        let saturday = ts("2026-03-28T12:00:00Z");
        assert_eq!(w.next_open(saturday), Some(ts("2026-03-29T01:00:00Z")));
        assert!(!w.is_open(ts("2026-03-29T00:59:59Z")));
        assert_eq!(
            w.closes_at(ts("2026-03-29T01:00:00Z")),
            Some(ts("2026-03-29T02:00:00Z"))
        );
    }

    #[test]
    fn a_window_inside_the_spring_gap_skips_that_day() {
        let w = window("sun 02:00-02:30 Europe/Berlin");
        assert_eq!(
            w.next_open(ts("2026-03-28T12:00:00Z")),
            Some(ts("2026-04-05T00:00:00Z")),
            "the next Sunday, 02:00 CEST"
        );
        assert!(!w.is_open(ts("2026-03-29T01:00:00Z")));
    }

    #[test]
    fn an_end_in_the_spring_gap_closes_when_the_gap_ends() {
        let w = window("sun 01:30-02:30 Europe/Berlin");
        let open = ts("2026-03-29T00:30:00Z");
        assert_eq!(w.next_open(ts("2026-03-28T12:00:00Z")), Some(open));
        assert_eq!(w.closes_at(open), Some(ts("2026-03-29T01:00:00Z")));
    }

    #[test]
    fn a_window_over_the_spring_change_is_an_hour_shorter() {
        let w = window("sat 22:00-04:00 Europe/Berlin");
        let open = ts("2026-03-28T21:00:00Z");
        assert_eq!(w.next_open(ts("2026-03-28T12:00:00Z")), Some(open));
        assert_eq!(w.closes_at(open), Some(ts("2026-03-29T02:00:00Z")));
    }

    #[test]
    fn times_in_the_autumn_fold_happen_at_their_first_occurrence() {
        // Berlin repeats 02:00-03:00 on Sunday 2026-10-25: 00:30Z is 02:30 CEST, 01:30Z is
        // 02:30 CET.
        let w = window("sun 02:30-03:30 Europe/Berlin");
        assert_eq!(
            w.next_open(ts("2026-10-24T12:00:00Z")),
            Some(ts("2026-10-25T00:30:00Z"))
        );
        assert_eq!(
            w.closes_at(ts("2026-10-25T00:30:00Z")),
            Some(ts("2026-10-25T02:30:00Z")),
            "two hours by the clock's way from 02:30 CEST to 03:30 CET"
        );

        let w = window("sun 01:00-02:30 Europe/Berlin");
        let open = ts("2026-10-24T23:00:00Z");
        assert_eq!(w.closes_at(open), Some(ts("2026-10-25T00:30:00Z")));
        assert!(
            !w.is_open(ts("2026-10-25T01:10:00Z")),
            "02:10 CET, the second time round, does not reopen the window"
        );
    }

    #[test]
    fn windows_open_when_any_is_and_chain_when_they_touch() {
        let ws = MaintenanceWindows::parse([
            "mon 20:00-23:00",
            "mon 22:00-02:00",
            "tue 02:00-03:00",
            "sat 10:00-11:00 Asia/Kolkata",
        ])
        .unwrap();
        // 2026-11-30 is a Monday.
        let monday = ts("2026-11-30T20:30:00Z");
        assert!(ws.is_open(monday));
        assert_eq!(ws.closes_at(monday), Some(ts("2026-12-01T03:00:00Z")));
        assert!(!ws.is_open(ts("2026-12-01T03:00:00Z")));
        // Saturday 10:00 in Kolkata (+05:30) is 04:30Z, before Monday's windows.
        assert_eq!(
            ws.next_open(ts("2026-12-01T03:00:00Z")),
            Some(ts("2026-12-05T04:30:00Z"))
        );
        assert_eq!(ws.windows().len(), 4);
    }

    #[test]
    fn windows_covering_the_whole_week_report_a_close_past_the_horizon() {
        let ws = MaintenanceWindows::parse(["* 00:00-12:00", "* 11:00-01:00"]).unwrap();
        let at = ts("2026-11-30T05:00:00Z");
        let close = ws.closes_at(at).unwrap();
        assert!(close >= at.checked_add(CLOSE_HORIZON).unwrap());
        assert!(ws.is_open(close), "a lower bound, not a real close");
    }

    const ZONES: [&str; 6] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        // DST at midnight: the gap is 00:00-01:00, so whole days start at 01:00.
        "America/Santiago",
        // A 30-minute DST shift.
        "Australia/Lord_Howe",
        "Asia/Kolkata",
    ];

    fn arb_window() -> impl Strategy<Value = String> {
        (
            1u8..=127,
            0u16..1440,
            1u16..1440,
            prop::sample::select(&ZONES[..]),
        )
            .prop_map(|(days, start, length, zone)| {
                let end = (start + length) % 1440;
                let days: Vec<&str> = (0..7)
                    .filter(|i| days & (1 << i) != 0)
                    .map(|i| DAY_NAMES[i])
                    .collect();
                format!(
                    "{} {:02}:{:02}-{:02}:{:02} {zone}",
                    days.join(","),
                    start / 60,
                    start % 60,
                    end / 60,
                    end % 60
                )
            })
    }

    /// Instants from 2024 to 2030, around several DST changes in every zone above.
    fn arb_instant() -> impl Strategy<Value = Timestamp> {
        (1_704_067_200i64..1_893_456_000).prop_map(|s| Timestamp::from_second(s).unwrap())
    }

    /// With `near`, an instant up to three days before the first DST change of `w`'s zone
    /// after `at`, so that the properties meet the changes often; else `at` itself.
    fn maybe_near_change(w: &MaintenanceWindow, at: Timestamp, near: bool, back: i64) -> Timestamp {
        let change = w.zone.following(at).next().map(|t| t.timestamp());
        match change {
            Some(change) if near => change - SignedDuration::from_mins(back),
            _ => at,
        }
    }

    /// Every whole minute strictly between `from` and `to`.
    fn minutes_between(from: Timestamp, to: Timestamp) -> impl Iterator<Item = Timestamp> {
        let first = from.as_second().div_euclid(60) * 60 + 60;
        (first..to.as_second())
            .step_by(60)
            .map(|s| Timestamp::from_second(s).unwrap())
            .filter(move |&t| t < to)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn display_round_trips(text in arb_window()) {
            let w = window(&text);
            prop_assert_eq!(window(&w.to_string()), w);
        }

        #[test]
        fn next_open_is_open_and_nothing_before_it_is(
            text in arb_window(),
            at in arb_instant(),
            near in any::<bool>(),
            back in 0i64..4320,
        ) {
            let w = window(&text);
            let at = maybe_near_change(&w, at, near, back);
            let next = w.next_open(at).unwrap();
            prop_assert!(next >= at);
            prop_assert!(w.is_open(next), "{} is not open at {}", text, next);
            if next > at {
                prop_assert!(!w.is_open(at));
                for t in minutes_between(at, next) {
                    prop_assert!(!w.is_open(t), "{} is open at {} before {}", text, t, next);
                }
            }
        }

        #[test]
        fn closes_at_is_the_end_of_the_open_stretch(
            text in arb_window(),
            at in arb_instant(),
            near in any::<bool>(),
            back in 0i64..4320,
        ) {
            let w = window(&text);
            let at = maybe_near_change(&w, at, near, back);
            let Some(open) = w.next_open(at) else {
                return Err(TestCaseError::fail("no next opening"));
            };
            let close = w.closes_at(open).unwrap();
            prop_assert!(close > open);
            prop_assert!(!w.is_open(close), "{} is still open at {}", text, close);
            for t in minutes_between(open, close) {
                prop_assert!(w.is_open(t), "{} is closed at {} before {}", text, t, close);
            }
        }

        #[test]
        fn in_utc_open_means_the_clock_is_inside(
            days in 1u8..=127,
            start in 0u16..1440,
            length in 1u16..1440,
            at in arb_instant(),
        ) {
            let end = (start + length) % 1440;
            let names: Vec<&str> =
                (0..7).filter(|i| days & (1 << i) != 0).map(|i| DAY_NAMES[i]).collect();
            let text = format!(
                "{} {:02}:{:02}-{:02}:{:02}",
                names.join(","), start / 60, start % 60, end / 60, end % 60
            );
            let civil = TimeZone::UTC.to_datetime(at);
            let minute = u16::try_from(civil.hour()).unwrap() * 60
                + u16::try_from(civil.minute()).unwrap();
            let day = civil.weekday().to_monday_zero_offset();
            let starts = |d: i8| days & (1 << d.rem_euclid(7)) != 0;
            let expected = if end > start {
                starts(day) && start <= minute && minute < end
            } else {
                (starts(day) && minute >= start) || (starts(day - 1) && minute < end)
            };
            prop_assert_eq!(window(&text).is_open(at), expected, "{} at {}", text, at);
        }
    }
}

//! Maintenance hours: the days and times of day in which disruptive work may start (design §2).
//!
//! Maintenance hours are written `[DAYS] HH:MM-HH:MM [TIME ZONE]`, for example
//! `mon-fri 22:00-04:00 Europe/Berlin`; either time may carry seconds (`HH:MM:SS`):
//! - DAYS is one day (`mon`), a range (`mon-fri`, or `fri-mon` wrapping over the weekend), a
//!   comma-separated list of days and ranges (`mon,wed,fri-sat`), or `*` / `daily`. Left out, it
//!   means every day. Names are the first three letters of the English day, in any case.
//! - An end before the start means the hours cross midnight; DAYS names the day on which they
//!   *start*, so `fri 22:00-04:00` runs from Friday 22:00 to Saturday 04:00. Start and end must
//!   differ (a whole day is `00:00-23:59`).
//! - TIME ZONE is an IANA name from the tz database bundled into the binary; left out, it is UTC.
//!
//! # Daylight saving time
//!
//! Each day's maintenance hours run from the first instant at which the local wall clock reads
//! the start time (or later) on its start day, to the first instant after that at which the
//! clock reads the end time (or later). What follows:
//! - a start or end in a gap (the hour skipped when clocks go forward) happens when the gap
//!   ends: `sun 02:30-04:00 Europe/Berlin` starts at 03:00 CEST on the last Sunday of March, and
//!   hours wholly inside the gap (`sun 02:00-02:30`) do not start that day;
//! - a start or end in a fold (the hour repeated when clocks go back) happens at its first
//!   occurrence, and the hours do not start over when the clock passes the same times again;
//! - so a day's hours last as long as the wall clock takes from start to end: an hour less or
//!   more than usual on the days the clocks change.

use std::fmt;
use std::str::FromStr;

use crate::decision::Millis;
use jiff::civil::{Date, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Day names in Monday-first order, as written in maintenance hours.
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// What [`MaintenanceHours::ends_at`] looks ahead: hours that together last longer than this
/// cover the whole week, and the end reported is then only a lower bound.
pub const END_HORIZON: SignedDuration = SignedDuration::from_hours(8 * 24);

/// How many start days [`Hours::next_start`] tries: two weeks and a day, since an
/// occurrence that falls into a DST gap is skipped and the next one is a week later.
const SEARCH_DAYS: usize = 16;

/// Malformed maintenance hours, or an empty list of them. Each message names the value and what
/// is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoursError {
    /// The hours' text could not be understood.
    #[error("invalid maintenance hours {hours:?}: {problem}")]
    Invalid {
        /// The whole text as given.
        hours: String,
        /// What is wrong with it.
        problem: HoursProblem,
    },
    /// A list of maintenance hours with nothing in it.
    #[error(
        "no maintenance hours given; expected at least one like \"mon-fri 22:00-04:00 Europe/Berlin\""
    )]
    Empty,
}

/// The part of the maintenance hours that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoursProblem {
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

/// One span of maintenance hours: days, start and end time, and time zone. Parse it with
/// [`str::parse`]; see the [module documentation](self) for the syntax and DST behaviour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hours {
    /// Bit `i` set: the hours start on the day with Monday-zero offset `i`.
    days: u8,
    start: Time,
    end: Time,
    zone: TimeZone,
    zone_name: String,
}

impl Hours {
    /// Whether `at` is within these hours: disruptive work may start then.
    pub fn contains(&self, at: Timestamp) -> bool {
        self.occurrence_containing(at).is_some()
    }

    /// When these hours next start: `at` itself when it is within them. `None` only when the
    /// next start lies beyond the range of [`Timestamp`].
    pub fn next_start(&self, at: Timestamp) -> Option<Timestamp> {
        if self.contains(at) {
            return Some(at);
        }
        let mut day = self.zone.to_datetime(at).date().yesterday().ok()?;
        for _ in 0..SEARCH_DAYS {
            if let Some((start, end)) = self.occurrence(day)
                && start >= at
                && start < end
            {
                return Some(start);
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// When these hours, containing `at`, end (the first instant no longer within them).
    /// `None` when `at` is outside them.
    pub fn ends_at(&self, at: Timestamp) -> Option<Timestamp> {
        ends_at(std::slice::from_ref(self), at)
    }

    /// The occurrence (start, end) that contains `at`, if any. Only occurrences starting the
    /// local day before `at` or on its day can: one starting earlier ends, by wall clock, before
    /// `at`'s day begins.
    fn occurrence_containing(&self, at: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let today = self.zone.to_datetime(at).date();
        [today.yesterday().ok(), Some(today)]
            .into_iter()
            .flatten()
            .filter_map(|day| self.occurrence(day))
            .find(|&(start, end)| start <= at && at < end)
    }

    /// The occurrence that starts on `day`, if the hours start on that day of the week. It
    /// may be empty (start == end) when it lies wholly inside a DST gap.
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

impl FromStr for Hours {
    type Err = HoursError;

    fn from_str(hours: &str) -> Result<Self, Self::Err> {
        parse(hours).map_err(|problem| HoursError::Invalid {
            hours: hours.to_owned(),
            problem,
        })
    }
}

impl fmt::Display for Hours {
    /// The canonical form, which parses back to equal hours.
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

/// All the maintenance hours of an agent (one [`Hours`] for each `--hours`): disruptive work
/// may start within any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceHours(Vec<Hours>);

impl MaintenanceHours {
    /// At least one [`Hours`]; an empty list is refused, since no time would be within it (to
    /// allow maintenance at any time, configure no maintenance hours at all).
    pub fn new(hours: Vec<Hours>) -> Result<MaintenanceHours, HoursError> {
        if hours.is_empty() {
            return Err(HoursError::Empty);
        }
        Ok(MaintenanceHours(hours))
    }

    /// Parses each [`Hours`], failing on the first malformed one or on an empty list.
    pub fn parse<'a>(
        hours: impl IntoIterator<Item = &'a str>,
    ) -> Result<MaintenanceHours, HoursError> {
        let hours = hours
            .into_iter()
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?;
        MaintenanceHours::new(hours)
    }

    /// Each [`Hours`], in the order given.
    pub fn hours(&self) -> &[Hours] {
        &self.0
    }

    /// Whether `at` is within any of the hours.
    pub fn contains(&self, at: Timestamp) -> bool {
        self.0.iter().any(|h| h.contains(at))
    }

    /// When the hours next start: `at` itself when it is within them.
    pub fn next_start(&self, at: Timestamp) -> Option<Timestamp> {
        self.0.iter().filter_map(|h| h.next_start(at)).min()
    }

    /// When the hours end, counting from `at`: hours that overlap or touch hand over to each
    /// other. `None` when `at` is outside them. Past [`END_HORIZON`] the search stops, and the
    /// result is a lower bound.
    pub fn ends_at(&self, at: Timestamp) -> Option<Timestamp> {
        ends_at(&self.0, at)
    }

    /// Whether the store time `at` (milliseconds since the epoch) is within the hours.
    pub fn contains_millis(&self, at: Millis) -> bool {
        self.contains(timestamp(at))
    }

    /// When the hours next start after the store time `at`, in store time: `at` itself when
    /// it is within them.
    pub fn next_start_millis(&self, at: Millis) -> Option<Millis> {
        self.next_start(timestamp(at)).map(|t| t.as_millisecond())
    }

    /// When a node eligible at `at` (its backoff over) may take a slot: at once within the
    /// hours, else when they next start. A node waiting for its hours is not yet in the queue,
    /// so that it holds up no node within its hours.
    pub fn eligible_at(&self, at: Millis) -> Millis {
        self.next_start_millis(at).map_or(at, |start| start.max(at))
    }
}

/// A store time as a timestamp; past the end of time, its end.
fn timestamp(at: Millis) -> Timestamp {
    Timestamp::from_millisecond(at).unwrap_or(Timestamp::MAX)
}

/// The first instant from `at` on that is within none of `hours`, or `None` if `at` is outside
/// all of them. Each round moves to the latest end among the occurrences containing the current
/// instant, so hours that overlap or touch chain into one stretch.
fn ends_at(hours: &[Hours], at: Timestamp) -> Option<Timestamp> {
    let latest_end = |t: Timestamp| {
        hours
            .iter()
            .filter_map(|h| h.occurrence_containing(t))
            .map(|(_, end)| end)
            .max()
    };
    let horizon = at.checked_add(END_HORIZON).unwrap_or(Timestamp::MAX);
    let mut end = latest_end(at)?;
    while end < horizon {
        match latest_end(end) {
            Some(later) => end = later,
            None => break,
        }
    }
    Some(end)
}

const ALL_DAYS: u8 = 0b111_1111;

/// `HH:MM`, or `HH:MM:SS` when the time has seconds, as maintenance hours are written.
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

fn parse(hours: &str) -> Result<Hours, HoursProblem> {
    let mut words = hours.split_whitespace().peekable();
    let starts_with_digit = |w: &&str| w.starts_with(|c: char| c.is_ascii_digit());
    let days = match words.next_if(|w| !starts_with_digit(w)) {
        Some(days) => parse_days(days)?,
        None => ALL_DAYS,
    };
    let times = words.next().ok_or(HoursProblem::MissingTimes)?;
    let (start, end) = parse_times(times)?;
    let zone_name = words.next().unwrap_or("UTC");
    let zone = TimeZone::get(zone_name).map_err(|_| HoursProblem::TimeZone {
        value: zone_name.to_owned(),
    })?;
    if let Some(extra) = words.next() {
        return Err(HoursProblem::Trailing {
            value: extra.to_owned(),
        });
    }
    Ok(Hours {
        days,
        start,
        end,
        zone_name: zone.iana_name().unwrap_or(zone_name).to_owned(),
        zone,
    })
}

fn parse_days(days: &str) -> Result<u8, HoursProblem> {
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

fn day_index(day: &str) -> Result<usize, HoursProblem> {
    DAY_NAMES
        .iter()
        .position(|name| name.eq_ignore_ascii_case(day))
        .ok_or_else(|| HoursProblem::Day {
            value: day.to_owned(),
        })
}

fn parse_times(times: &str) -> Result<(Time, Time), HoursProblem> {
    let invalid = || HoursProblem::Times {
        value: times.to_owned(),
    };
    let (start, end) = times.split_once('-').ok_or_else(invalid)?;
    let (start, end) = (
        parse_time(start).ok_or_else(invalid)?,
        parse_time(end).ok_or_else(invalid)?,
    );
    if start == end {
        return Err(HoursProblem::EmptyTimes {
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

    fn hours(text: &str) -> Hours {
        text.parse().unwrap()
    }

    fn ts(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn error(text: &str) -> String {
        text.parse::<Hours>().unwrap_err().to_string()
    }

    #[test]
    fn a_node_outside_its_hours_is_eligible_when_they_next_start() {
        let hours = MaintenanceHours::new(vec![hours("sat 02:00-03:00 UTC")]).unwrap();
        let ms = |text: &str| ts(text).as_millisecond();
        let cases = [
            ("2026-12-05T02:30:00Z", "2026-12-05T02:30:00Z"),
            ("2026-12-05T03:00:00Z", "2026-12-12T02:00:00Z"),
            ("2026-12-07T12:00:00Z", "2026-12-12T02:00:00Z"),
        ];
        for (at, eligible) in cases {
            assert_eq!(hours.eligible_at(ms(at)), ms(eligible), "{at}");
            assert_eq!(hours.contains_millis(ms(at)), at == eligible, "{at}");
        }
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
            let parsed = hours(given);
            assert_eq!(parsed.to_string(), canonical, "{given}");
            assert_eq!(hours(canonical), parsed, "{canonical} parses back");
        }
    }

    #[test]
    fn errors_name_the_value_and_what_is_allowed() {
        assert_eq!(
            error("mon-fry 22:00-04:00"),
            "invalid maintenance hours \"mon-fry 22:00-04:00\": unknown day \"fry\"; expected \
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
                    "invalid maintenance hours \"mon {bad}\": invalid times {bad:?}; expected \
                     HH:MM-HH:MM (or HH:MM:SS) with times from 00:00 to 23:59:59, like 22:00-04:00"
                )
            );
        }
        assert!(error("mon 22:00-22:00").contains("times \"22:00-22:00\" start and end"));
        assert_eq!(
            error("mon 22:00-04:00 Europe/Berln"),
            "invalid maintenance hours \"mon 22:00-04:00 Europe/Berln\": unknown time zone \
             \"Europe/Berln\"; expected an IANA name like Europe/Berlin, or UTC"
        );
        assert!(error("mon 22:00-04:00 UTC extra").contains("unexpected \"extra\""));
        assert!(error("").contains("missing times"));
        assert!(error("mon").contains("missing times"));
        assert_eq!(MaintenanceHours::parse([]).unwrap_err(), HoursError::Empty);
        assert!(matches!(
            MaintenanceHours::parse(["mon 01:00-02:00", "mon-fry 01:00-02:00"]),
            Err(HoursError::Invalid { hours, .. }) if hours == "mon-fry 01:00-02:00"
        ));
    }

    #[test]
    fn seconds_are_optional_and_count() {
        let h = hours("12:00:30-12:00:45");
        assert_eq!(h.to_string(), "* 12:00:30-12:00:45 UTC");
        assert_eq!(hours(&h.to_string()), h, "parses back");
        assert_eq!(hours("12:00:00-13:00").to_string(), "* 12:00-13:00 UTC");
        assert_eq!(hours("12:00:00-13:00"), hours("12:00-13:00"));
        assert!(!h.contains(ts("2026-11-27T12:00:29.999Z")));
        assert!(h.contains(ts("2026-11-27T12:00:30Z")));
        assert!(h.contains(ts("2026-11-27T12:00:44.999Z")));
        assert!(!h.contains(ts("2026-11-27T12:00:45Z")));
        assert_eq!(
            h.next_start(ts("2026-11-27T12:00:00Z")),
            Some(ts("2026-11-27T12:00:30Z"))
        );
        assert_eq!(
            h.ends_at(ts("2026-11-27T12:00:31Z")),
            Some(ts("2026-11-27T12:00:45Z"))
        );
        // Crossing midnight by a few seconds.
        let late = hours("23:59:50-00:00:10");
        assert!(late.contains(ts("2026-11-28T00:00:05Z")));
        assert!(!late.contains(ts("2026-11-28T00:00:10Z")));
    }

    #[test]
    fn hours_crossing_midnight_belong_to_their_start_day() {
        let h = hours("mon-fri 22:00-04:00");
        // 2026-11-27 is a Friday.
        assert!(!h.contains(ts("2026-11-27T21:59:59Z")));
        assert!(h.contains(ts("2026-11-27T22:00:00Z")));
        assert!(h.contains(ts("2026-11-28T03:59:59.999Z")));
        assert!(!h.contains(ts("2026-11-28T04:00:00Z")));
        // Saturday evening starts no hours, so Sunday morning is outside them too.
        assert!(!h.contains(ts("2026-11-28T23:00:00Z")));
        assert!(!h.contains(ts("2026-11-29T02:00:00Z")));
        // Monday morning is the tail of no hours: Sunday is not in mon-fri.
        assert!(!h.contains(ts("2026-11-30T02:00:00Z")));
        assert!(h.contains(ts("2026-11-30T22:30:00Z")));
    }

    #[test]
    fn next_start_and_ends_at() {
        let h = hours("mon-fri 22:00-04:00 Europe/Berlin");
        // Friday 2026-11-27 23:00 in Berlin (CET, +01:00) is within them until Saturday 04:00.
        let within = ts("2026-11-27T22:00:00Z");
        assert_eq!(h.next_start(within), Some(within));
        assert_eq!(h.ends_at(within), Some(ts("2026-11-28T03:00:00Z")));
        // From Saturday noon the hours next start on Monday 22:00 CET.
        let outside = ts("2026-11-28T12:00:00Z");
        assert_eq!(h.next_start(outside), Some(ts("2026-11-30T21:00:00Z")));
        assert_eq!(h.ends_at(outside), None);
        // The end is the first instant outside them.
        assert_eq!(
            h.ends_at(ts("2026-11-28T02:59:59Z")),
            Some(ts("2026-11-28T03:00:00Z"))
        );
        assert_eq!(
            h.next_start(ts("2026-11-28T03:00:00Z")),
            Some(ts("2026-11-30T21:00:00Z"))
        );
    }

    #[test]
    fn a_start_in_the_spring_gap_happens_when_the_gap_ends() {
        // Berlin skips 02:00-03:00 on Sunday 2026-03-29: 01:00Z is 03:00 CEST.
        let h = hours("sun 02:30-04:00 Europe/Berlin");
        let saturday = ts("2026-03-28T12:00:00Z");
        assert_eq!(h.next_start(saturday), Some(ts("2026-03-29T01:00:00Z")));
        assert!(!h.contains(ts("2026-03-29T00:59:59Z")));
        assert_eq!(
            h.ends_at(ts("2026-03-29T01:00:00Z")),
            Some(ts("2026-03-29T02:00:00Z"))
        );
    }

    #[test]
    fn hours_inside_the_spring_gap_skip_that_day() {
        let h = hours("sun 02:00-02:30 Europe/Berlin");
        assert_eq!(
            h.next_start(ts("2026-03-28T12:00:00Z")),
            Some(ts("2026-04-05T00:00:00Z")),
            "the next Sunday, 02:00 CEST"
        );
        assert!(!h.contains(ts("2026-03-29T01:00:00Z")));
    }

    #[test]
    fn an_end_in_the_spring_gap_happens_when_the_gap_ends() {
        let h = hours("sun 01:30-02:30 Europe/Berlin");
        let start = ts("2026-03-29T00:30:00Z");
        assert_eq!(h.next_start(ts("2026-03-28T12:00:00Z")), Some(start));
        assert_eq!(h.ends_at(start), Some(ts("2026-03-29T01:00:00Z")));
    }

    #[test]
    fn hours_over_the_spring_change_are_an_hour_shorter() {
        let h = hours("sat 22:00-04:00 Europe/Berlin");
        let start = ts("2026-03-28T21:00:00Z");
        assert_eq!(h.next_start(ts("2026-03-28T12:00:00Z")), Some(start));
        assert_eq!(h.ends_at(start), Some(ts("2026-03-29T02:00:00Z")));
    }

    #[test]
    fn times_in_the_autumn_fold_happen_at_their_first_occurrence() {
        // Berlin repeats 02:00-03:00 on Sunday 2026-10-25: 00:30Z is 02:30 CEST, 01:30Z is
        // 02:30 CET.
        let h = hours("sun 02:30-03:30 Europe/Berlin");
        assert_eq!(
            h.next_start(ts("2026-10-24T12:00:00Z")),
            Some(ts("2026-10-25T00:30:00Z"))
        );
        assert_eq!(
            h.ends_at(ts("2026-10-25T00:30:00Z")),
            Some(ts("2026-10-25T02:30:00Z")),
            "two hours by the clock's way from 02:30 CEST to 03:30 CET"
        );

        let h = hours("sun 01:00-02:30 Europe/Berlin");
        let start = ts("2026-10-24T23:00:00Z");
        assert_eq!(h.ends_at(start), Some(ts("2026-10-25T00:30:00Z")));
        assert!(
            !h.contains(ts("2026-10-25T01:10:00Z")),
            "02:10 CET, the second time round, does not start the hours again"
        );
    }

    #[test]
    fn any_hours_count_and_hours_that_touch_chain() {
        let set = MaintenanceHours::parse([
            "mon 20:00-23:00",
            "mon 22:00-02:00",
            "tue 02:00-03:00",
            "sat 10:00-11:00 Asia/Kolkata",
        ])
        .unwrap();
        // 2026-11-30 is a Monday.
        let monday = ts("2026-11-30T20:30:00Z");
        assert!(set.contains(monday));
        assert_eq!(set.ends_at(monday), Some(ts("2026-12-01T03:00:00Z")));
        assert!(!set.contains(ts("2026-12-01T03:00:00Z")));
        // Saturday 10:00 in Kolkata (+05:30) is 04:30Z, before Monday's hours.
        assert_eq!(
            set.next_start(ts("2026-12-01T03:00:00Z")),
            Some(ts("2026-12-05T04:30:00Z"))
        );
        assert_eq!(set.hours().len(), 4);
    }

    #[test]
    fn hours_covering_the_whole_week_report_an_end_past_the_horizon() {
        let set = MaintenanceHours::parse(["* 00:00-12:00", "* 11:00-01:00"]).unwrap();
        let at = ts("2026-11-30T05:00:00Z");
        let end = set.ends_at(at).unwrap();
        assert!(end >= at.checked_add(END_HORIZON).unwrap());
        assert!(set.contains(end), "a lower bound, not a real end");
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

    fn arb_hours() -> impl Strategy<Value = String> {
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

    /// With `near`, an instant up to three days before the first DST change of `h`'s zone
    /// after `at`, so that the properties meet the changes often; else `at` itself.
    fn maybe_near_change(h: &Hours, at: Timestamp, near: bool, back: i64) -> Timestamp {
        let change = h.zone.following(at).next().map(|t| t.timestamp());
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
        fn display_round_trips(text in arb_hours()) {
            let h = hours(&text);
            prop_assert_eq!(hours(&h.to_string()), h);
        }

        #[test]
        fn next_start_is_within_and_nothing_before_it_is(
            text in arb_hours(),
            at in arb_instant(),
            near in any::<bool>(),
            back in 0i64..4320,
        ) {
            let h = hours(&text);
            let at = maybe_near_change(&h, at, near, back);
            let next = h.next_start(at).unwrap();
            prop_assert!(next >= at);
            prop_assert!(h.contains(next), "{} does not contain {}", text, next);
            if next > at {
                prop_assert!(!h.contains(at));
                for t in minutes_between(at, next) {
                    prop_assert!(!h.contains(t), "{} contains {} before {}", text, t, next);
                }
            }
        }

        #[test]
        fn ends_at_is_the_end_of_the_stretch(
            text in arb_hours(),
            at in arb_instant(),
            near in any::<bool>(),
            back in 0i64..4320,
        ) {
            let h = hours(&text);
            let at = maybe_near_change(&h, at, near, back);
            let Some(start) = h.next_start(at) else {
                return Err(TestCaseError::fail("no next start"));
            };
            let end = h.ends_at(start).unwrap();
            prop_assert!(end > start);
            prop_assert!(!h.contains(end), "{} still contains {}", text, end);
            for t in minutes_between(start, end) {
                prop_assert!(h.contains(t), "{} does not contain {} before {}", text, t, end);
            }
        }

        #[test]
        fn in_utc_within_means_the_clock_is_inside(
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
            prop_assert_eq!(hours(&text).contains(at), expected, "{} at {}", text, at);
        }
    }
}

//! Time-axis ticks: at round intervals (1 ms … 1 year), aligned to UTC, as many as fit.

use jiff::Timestamp;

use crate::Millis;

pub const SECOND: Millis = 1000;
pub const MINUTE: Millis = 60 * SECOND;
pub const HOUR: Millis = 60 * MINUTE;
pub const DAY: Millis = 24 * HOUR;

/// The intervals ticks may be apart, smallest first: 1, 2 and 5 times a power of ten below a
/// minute, then the clock's own round intervals.
const INTERVALS: [Millis; 37] = [
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    SECOND,
    2 * SECOND,
    5 * SECOND,
    10 * SECOND,
    15 * SECOND,
    20 * SECOND,
    30 * SECOND,
    MINUTE,
    2 * MINUTE,
    5 * MINUTE,
    10 * MINUTE,
    15 * MINUTE,
    20 * MINUTE,
    30 * MINUTE,
    HOUR,
    2 * HOUR,
    3 * HOUR,
    6 * HOUR,
    12 * HOUR,
    DAY,
    2 * DAY,
    5 * DAY,
    7 * DAY,
    14 * DAY,
    30 * DAY,
    91 * DAY,
    182 * DAY,
    365 * DAY,
];

/// Room between two tick labels, in characters.
const GAP: usize = 3;

/// One labelled tick; `date` is set on the first tick and wherever the date changes, for a
/// second line under the label, when the label is a time of day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub at: Millis,
    pub label: String,
    pub date: Option<String>,
}

/// How many characters a tick label at `interval` takes.
fn label_chars(interval: Millis) -> usize {
    match interval {
        i if i % 100 == 0 && i < SECOND => 10, // 10:00:01.5
        i if i % 10 == 0 && i < SECOND => 11,  // 10:00:01.25
        i if i < SECOND => 12,                 // 10:00:01.125
        i if i < MINUTE => 8,                  // 10:00:05
        i if i < DAY => 5,                     // 10:05
        _ => 10,                               // 2026-11-29
    }
}

/// The smallest round interval whose ticks' labels fit side by side in `room` characters
/// between `start` and `end` (the largest one for longer spans).
pub fn interval(start: Millis, end: Millis, room: usize) -> Millis {
    let span = end.saturating_sub(start).max(0);
    INTERVALS
        .into_iter()
        .find(|&interval| {
            let count = usize::try_from((span / interval).saturating_add(1)).unwrap_or(usize::MAX);
            count.saturating_mul(label_chars(interval) + GAP) <= room
        })
        .unwrap_or(INTERVALS[INTERVALS.len() - 1])
}

/// Ticks at every multiple of [`interval`] from `start` to `end`, both included, labelled
/// with the time of day to the precision the interval needs (dates alone for a day or more).
pub fn ticks(start: Millis, end: Millis, room: usize) -> Vec<Tick> {
    let interval = interval(start, end, room);
    let mut at = start
        .div_euclid(interval)
        .saturating_add(1)
        .saturating_mul(interval);
    if start.rem_euclid(interval) == 0 {
        at = start;
    }
    let mut ticks = Vec::new();
    let mut previous_date = None;
    while at <= end {
        let Ok(time) = Timestamp::from_millisecond(at) else {
            break;
        };
        let date = time.strftime("%Y-%m-%d").to_string();
        let (label, date) = if interval >= DAY {
            (date, None)
        } else {
            let label = clock(time, at, interval);
            let new_date = (previous_date.as_ref() != Some(&date)).then(|| date.clone());
            previous_date = Some(date);
            (label, new_date)
        };
        ticks.push(Tick { at, label, date });
        at = at.saturating_add(interval);
    }
    ticks
}

/// The time of day at `at`, with seconds below a minute's interval and the fraction of a
/// second below a second's, to as many digits as the interval has.
fn clock(time: Timestamp, at: Millis, interval: Millis) -> String {
    if interval >= MINUTE {
        return time.strftime("%H:%M").to_string();
    }
    let seconds = time.strftime("%H:%M:%S").to_string();
    let millis = at.rem_euclid(SECOND);
    match interval {
        i if i >= SECOND => seconds,
        i if i % 100 == 0 => format!("{seconds}.{}", millis / 100),
        i if i % 10 == 0 => format!("{seconds}.{:02}", millis / 10),
        _ => format!("{seconds}.{millis:03}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-29T10:00:00Z.
    const T0: Millis = 1_795_946_400_000;

    fn labels(ticks: &[Tick]) -> Vec<&str> {
        ticks.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn picks_round_intervals_that_fit() {
        // 100 characters hold nine 8-character labels with their gaps, or twelve of 5.
        assert_eq!(interval(T0, T0, 100), 1);
        assert_eq!(interval(T0, T0 + 4 * SECOND, 100), SECOND);
        assert_eq!(interval(T0, T0 + 4 * SECOND, 128), 500);
        assert_eq!(interval(T0, T0 + 45 * SECOND, 100), 10 * SECOND);
        assert_eq!(interval(T0, T0 + 2 * HOUR, 100), 15 * MINUTE);
        assert_eq!(interval(T0, T0 + 3 * DAY, 100), 12 * HOUR);
        assert_eq!(interval(T0, T0 + 60 * DAY, 100), 14 * DAY);
        assert_eq!(interval(T0, T0 + 100 * 365 * DAY, 100), 365 * DAY);
        // Less room, fewer ticks.
        assert_eq!(interval(T0, T0 + 2 * HOUR, 40), 30 * MINUTE);
    }

    #[test]
    fn ticks_align_to_the_interval_and_date_the_first_and_midnight() {
        let ticks = ticks(T0 - 7 * MINUTE, T0 + 14 * HOUR, 70);
        assert_eq!(
            labels(&ticks),
            [
                "10:00", "12:00", "14:00", "16:00", "18:00", "20:00", "22:00", "00:00"
            ]
        );
        let dates: Vec<Option<&str>> = ticks.iter().map(|t| t.date.as_deref()).collect();
        assert_eq!(dates[0], Some("2026-11-29"));
        assert_eq!(dates[1..7], [None; 6]);
        assert_eq!(dates[7], Some("2026-11-30"));
    }

    #[test]
    fn sub_second_ticks_show_the_fraction_the_interval_needs() {
        let ticks = ticks(T0 + 300, T0 + 4200, 128);
        assert_eq!(
            labels(&ticks),
            [
                "10:00:00.5",
                "10:00:01.0",
                "10:00:01.5",
                "10:00:02.0",
                "10:00:02.5",
                "10:00:03.0",
                "10:00:03.5",
                "10:00:04.0"
            ]
        );
        assert_eq!(ticks[0].at, T0 + 500);
        assert_eq!(
            labels(&super::ticks(T0, T0 + 40, 200))[..3],
            ["10:00:00.000", "10:00:00.005", "10:00:00.010"]
        );
    }

    #[test]
    fn second_and_day_labels() {
        assert_eq!(
            labels(&ticks(T0, T0 + 20 * SECOND, 60)),
            ["10:00:00", "10:00:05", "10:00:10", "10:00:15", "10:00:20"]
        );
        let days = ticks(T0, T0 + 3 * DAY, 55);
        assert_eq!(labels(&days), ["2026-11-30", "2026-12-01", "2026-12-02"]);
        assert!(days.iter().all(|t| t.date.is_none()));
    }
}

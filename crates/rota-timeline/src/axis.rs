//! Time-axis ticks: at round intervals (1 s … 1 year), aligned to UTC, a handful per axis.

use jiff::Timestamp;

use crate::Millis;

const SECOND: Millis = 1000;
const MINUTE: Millis = 60 * SECOND;
const HOUR: Millis = 60 * MINUTE;
const DAY: Millis = 24 * HOUR;

/// The intervals ticks may be apart, smallest first.
const INTERVALS: [Millis; 24] = [
    SECOND,
    2 * SECOND,
    5 * SECOND,
    10 * SECOND,
    15 * SECOND,
    30 * SECOND,
    MINUTE,
    2 * MINUTE,
    5 * MINUTE,
    10 * MINUTE,
    15 * MINUTE,
    30 * MINUTE,
    HOUR,
    2 * HOUR,
    3 * HOUR,
    6 * HOUR,
    12 * HOUR,
    DAY,
    2 * DAY,
    7 * DAY,
    14 * DAY,
    30 * DAY,
    91 * DAY,
    365 * DAY,
];

/// One labelled tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub at: Millis,
    pub label: String,
}

/// The smallest round interval that puts at most `max_ticks` ticks between `start` and `end`
/// (the largest one for longer spans).
pub fn interval(start: Millis, end: Millis, max_ticks: u32) -> Millis {
    let span = end.saturating_sub(start).max(0);
    let max_ticks = Millis::from(max_ticks.max(1));
    INTERVALS
        .into_iter()
        .find(|&interval| span / interval < max_ticks)
        .unwrap_or(INTERVALS[INTERVALS.len() - 1])
}

/// Ticks at every multiple of [`interval`] from `start` to `end`, both included. Labels show
/// the time of day (with seconds when ticks are less than a minute apart), and the date on the
/// first tick and wherever the date changes; ticks a day or more apart show the date only.
pub fn ticks(start: Millis, end: Millis, max_ticks: u32) -> Vec<Tick> {
    let interval = interval(start, end, max_ticks);
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
        let label = if interval >= DAY {
            time.strftime("%Y-%m-%d").to_string()
        } else {
            let clock = if interval < MINUTE {
                "%H:%M:%S"
            } else {
                "%H:%M"
            };
            if previous_date.as_ref() == Some(&date) {
                time.strftime(clock).to_string()
            } else {
                time.strftime(&format!("%Y-%m-%d {clock}")).to_string()
            }
        };
        ticks.push(Tick { at, label });
        previous_date = Some(date);
        at = at.saturating_add(interval);
    }
    ticks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-29T10:00:00Z.
    const T0: Millis = 1_795_946_400_000;

    #[test]
    fn picks_round_intervals_for_the_span() {
        assert_eq!(interval(T0, T0, 10), SECOND);
        assert_eq!(interval(T0, T0 + 45 * SECOND, 10), 5 * SECOND);
        assert_eq!(interval(T0, T0 + 2 * HOUR, 10), 15 * MINUTE);
        assert_eq!(interval(T0, T0 + 90 * MINUTE, 10), 10 * MINUTE);
        assert_eq!(interval(T0, T0 + 3 * DAY, 10), 12 * HOUR);
        assert_eq!(interval(T0, T0 + 60 * DAY, 10), 7 * DAY);
        assert_eq!(interval(T0, T0 + 100 * 365 * DAY, 10), 365 * DAY);
    }

    #[test]
    fn ticks_align_to_the_interval_and_date_the_first_and_midnight() {
        let labels: Vec<String> = ticks(T0 - 7 * MINUTE, T0 + 14 * HOUR, 10)
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(
            labels,
            [
                "2026-11-29 10:00",
                "12:00",
                "14:00",
                "16:00",
                "18:00",
                "20:00",
                "22:00",
                "2026-11-30 00:00",
            ]
        );
        let ticks = ticks(T0 - 7 * MINUTE, T0 + 50 * MINUTE, 10);
        assert_eq!(ticks[0].at, T0);
        let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "2026-11-29 10:00",
                "10:10",
                "10:20",
                "10:30",
                "10:40",
                "10:50"
            ]
        );
    }

    #[test]
    fn second_and_day_labels() {
        let labels: Vec<String> = ticks(T0, T0 + 20 * SECOND, 5)
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(
            labels,
            [
                "2026-11-29 10:00:00",
                "10:00:05",
                "10:00:10",
                "10:00:15",
                "10:00:20"
            ]
        );
        let labels: Vec<String> = ticks(T0, T0 + 3 * DAY, 4)
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(labels, ["2026-11-30", "2026-12-01", "2026-12-02"]);
    }
}

//! Shared output helpers: times, durations, tables, JSON, and writing to stdout.

use std::io::{self, Write};

use comfy_table::{ContentArrangement, Table, presets};
use rota_store::Millis;
use serde::Serialize;
use time::OffsetDateTime;
use time::macros::format_description;

/// RFC 3339 in UTC with milliseconds (the stores' precision), e.g. `2024-05-01T10:00:00.000Z`.
pub fn rfc3339(at: Millis) -> String {
    let format =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    format_millis(at, format)
}

/// RFC 3339 in UTC to the second, for tables, e.g. `2024-05-01T10:00:00Z`.
pub fn rfc3339_seconds(at: Millis) -> String {
    let format = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    format_millis(at, format)
}

fn format_millis(
    at: Millis,
    format: &[time::format_description::BorrowedFormatItem<'_>],
) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000)
        .ok()
        .and_then(|t| t.format(format).ok())
        // A stored time outside the calendar's range is shown as it is, never a panic.
        .unwrap_or_else(|| format!("@{at}ms"))
}

/// A duration in its two largest units: `3m12s`, `2h5m`, `4d1h`, `45s`, `0s`.
pub fn compact_duration(millis: u64) -> String {
    let secs = millis / 1000;
    let units = [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (name, size) in units {
        let count = rest / size;
        rest %= size;
        if count > 0 || !parts.is_empty() {
            parts.push(format!("{count}{name}"));
        }
        if parts.len() == 2 {
            break;
        }
    }
    match parts.as_slice() {
        [] => "0s".to_owned(),
        [first, second] if second.starts_with('0') => first.clone(),
        _ => parts.concat(),
    }
}

/// How far `at` lies from `now`: `3m12s ago`, or `in 1m30s` for the future.
pub fn relative(at: Millis, now: Millis) -> String {
    let delta = i128::from(now) - i128::from(at);
    let magnitude = u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX);
    if delta >= 0 {
        format!("{} ago", compact_duration(magnitude))
    } else {
        format!("in {}", compact_duration(magnitude))
    }
}

/// A plain table (no borders, no colours, no wrapping) so output is stable for scripts and
/// snapshots; trailing spaces are trimmed from every line.
pub fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for row in rows {
        // A multi-line value (a script's output as a cause) must not break the table's lines.
        table.add_row(row.into_iter().map(|cell| one_line(&cell)));
    }
    // kubectl-like: flush left, two spaces between columns.
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    let mut text = String::new();
    for line in table.to_string().lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// `text` with every run of line breaks and the whitespace around them turned into one space.
pub fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `value` as pretty-printed JSON with a trailing newline.
pub fn json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}

/// An optional value for a table cell: `-` when absent.
pub fn cell<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Writes `text` to stdout. A closed pipe (`rota history | head`) is not an error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(rfc3339(1_714_557_600_123), "2024-05-01T10:00:00.123Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_seconds(1_714_557_600_999), "2024-05-01T10:00:00Z");
        assert_eq!(rfc3339(i64::MAX), format!("@{}ms", i64::MAX));
    }

    #[test]
    fn cells_stay_on_one_line() {
        let text = table(&["A", "B"], [vec!["x".into(), "line 1\n  line 2\n".into()]]);
        assert_eq!(text, "A  B\nx  line 1 line 2\n");
    }

    #[test]
    fn durations_are_compact() {
        assert_eq!(compact_duration(0), "0s");
        assert_eq!(compact_duration(999), "0s");
        assert_eq!(compact_duration(45_000), "45s");
        assert_eq!(compact_duration(192_000), "3m12s");
        assert_eq!(compact_duration(180_000), "3m");
        assert_eq!(compact_duration(7_500_000), "2h5m");
        assert_eq!(compact_duration(7_230_000), "2h");
        assert_eq!(compact_duration(90_061_000), "1d1h");
        assert_eq!(compact_duration(u64::MAX), "213503982334d14h");
        assert_eq!(relative(1_000, 193_000), "3m12s ago");
        assert_eq!(relative(91_000, 1_000), "in 1m30s");
        assert_eq!(relative(i64::MIN, i64::MAX), "213503982334d14h ago");
    }
}

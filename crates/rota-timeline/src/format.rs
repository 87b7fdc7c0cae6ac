//! Times, durations and text as the SVG and HTML show them.

use jiff::Timestamp;

use crate::Millis;

/// `2026-11-29 10:00:00` in UTC, with the milliseconds when there are any
/// (`2026-11-29 10:00:01.250`).
pub fn time(at: Millis) -> String {
    match Timestamp::from_millisecond(at) {
        Ok(t) if at.rem_euclid(1000) == 0 => t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Ok(t) => format!(
            "{}.{:03}",
            t.strftime("%Y-%m-%d %H:%M:%S"),
            at.rem_euclid(1000)
        ),
        Err(_) => format!("{at} ms"),
    }
}

/// `1d 1h`, `1h 5m`, `5m 30s`, `4.25s`, `250ms`: the two largest units, and the fraction of a
/// second under a minute.
pub fn duration(millis: Millis) -> String {
    let seconds = millis / 1000;
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) if s == 0 => format!("{millis}ms"),
        (0, 0, 0) => {
            let fraction = format!("{:03}", millis % 1000);
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                format!("{s}s")
            } else {
                format!("{s}.{fraction}s")
            }
        }
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// Text and attribute values with XML's (and HTML's) special characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_their_two_largest_units() {
        assert_eq!(duration(250), "250ms");
        assert_eq!(duration(4250), "4.25s");
        assert_eq!(duration(30_000), "30s");
        assert_eq!(duration(330_000), "5m 30s");
        assert_eq!(duration(3_900_000), "1h 5m");
        assert_eq!(duration(90_000_000), "1d 1h");
    }

    #[test]
    fn times_show_milliseconds_only_when_there_are_some() {
        // 2026-11-29T10:00:00Z.
        let t0 = 1_795_946_400_000;
        assert_eq!(time(t0), "2026-11-29 10:00:00");
        assert_eq!(time(t0 + 1250), "2026-11-29 10:00:01.250");
    }

    #[test]
    fn escapes_xml_specials() {
        assert_eq!(
            escape(r#"a<b>&"c" 'd'"#),
            "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;"
        );
    }
}

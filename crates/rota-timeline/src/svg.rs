//! The SVG renderer: a title, one lane per node, a time axis in UTC and a legend.

use std::fmt::{self, Write};

use jiff::Timestamp;

use crate::axis::ticks;
use crate::{MarkerKind, Millis, SegmentKind, Timeline};

/// Width of the time axis, in pixels.
const PLOT_WIDTH: f64 = 900.0;
const LANE_HEIGHT: f64 = 22.0;
const LANE_PITCH: f64 = 28.0;
const TOP: f64 = 36.0;
/// Room for half of a dated tick label at the axis's right end.
const RIGHT_MARGIN: f64 = 64.0;
/// Rough width of one character of a node name at the font size used.
const CHAR_WIDTH: f64 = 7.0;
const MAX_TICKS: u32 = 10;
/// The span drawn around a timeline whose events all happen at one instant.
const MIN_SPAN: Millis = 60_000;

/// Okabe–Ito colours, told apart by colour-blind readers too.
fn colour(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Window => "#56b4e9",
        SegmentKind::Wait => "#bbbbbb",
        SegmentKind::Drain => "#e69f00",
        SegmentKind::Maintenance => "#0072b2",
        SegmentKind::Reboot => "#cc79a7",
        SegmentKind::Verify => "#009e73",
    }
}

const FAILED_COLOUR: &str = "#d62728";
const CANCELED_COLOUR: &str = "#444444";
const POSTPONED_COLOUR: &str = "#e6a700";

/// The timeline as a standalone SVG document. Segments and markers carry a `<title>` with
/// their times (and a failure's cause), which viewers show on hover.
pub fn render_svg(timeline: &Timeline) -> String {
    let mut svg = String::new();
    // Writing to a String cannot fail.
    let _ = draw(&mut svg, timeline);
    svg
}

fn draw(svg: &mut String, timeline: &Timeline) -> fmt::Result {
    let Some((first, last)) = timeline.span() else {
        return draw_empty(svg);
    };
    // Saturating, so that absurd times from a damaged store draw oddly instead of panicking.
    let (start, end) = if last.saturating_sub(first) < MIN_SPAN {
        (
            first.saturating_sub(MIN_SPAN / 2),
            first.saturating_add(MIN_SPAN / 2),
        )
    } else {
        (first, last)
    };
    let nodes = timeline.nodes();
    let longest = nodes.iter().map(|n| n.as_str().len()).max().unwrap_or(0);
    let left = (longest as f64 * CHAR_WIDTH + 20.0).max(80.0);
    let x = |t: Millis| {
        left + t.saturating_sub(start) as f64 / end.saturating_sub(start) as f64 * PLOT_WIDTH
    };
    let lanes_bottom = TOP + nodes.len() as f64 * LANE_PITCH;
    let axis_y = lanes_bottom + 4.0;
    let legend_y = axis_y + 40.0;
    let width = left + PLOT_WIDTH + RIGHT_MARGIN;
    let height = legend_y + 24.0;

    writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    )?;
    writeln!(svg, "<title>rota rollout timeline</title>")?;
    writeln!(
        svg,
        r##"<rect class="background" x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    )?;
    writeln!(
        svg,
        r#"<text class="heading" x="{left:.1}" y="20" font-size="14" font-weight="bold">rota rollout, {} to {} UTC</text>"#,
        format_time(first),
        format_time(last)
    )?;

    let ticks = ticks(start, end, MAX_TICKS);
    writeln!(svg, r##"<g class="grid" stroke="#dddddd">"##)?;
    for tick in &ticks {
        let tx = x(tick.at);
        writeln!(
            svg,
            r#"<line x1="{tx:.1}" y1="{TOP:.1}" x2="{tx:.1}" y2="{axis_y:.1}"/>"#
        )?;
    }
    writeln!(svg, "</g>")?;

    for (i, node) in nodes.iter().enumerate() {
        let y = TOP + i as f64 * LANE_PITCH;
        let mid = y + LANE_HEIGHT / 2.0;
        let name = escape(node.as_str());
        writeln!(svg, r#"<g class="lane" data-node="{name}">"#)?;
        if i % 2 == 0 {
            writeln!(
                svg,
                r##"<rect class="lane-background" x="{left:.1}" y="{y:.1}" width="{PLOT_WIDTH:.1}" height="{LANE_HEIGHT:.1}" fill="#f4f4f4"/>"##
            )?;
        }
        writeln!(
            svg,
            r#"<text class="node" x="{:.1}" y="{:.1}" text-anchor="end">{name}</text>"#,
            left - 8.0,
            mid + 4.0
        )?;
        // Whole windows first, so that finer segments given for the same time lie on top.
        let mut segments: Vec<_> = timeline
            .segments()
            .iter()
            .filter(|s| &s.node == *node)
            .collect();
        segments.sort_by_key(|s| (s.kind != SegmentKind::Window, s.start));
        for s in segments {
            let sx = x(s.start);
            // Even an instant's segment stays visible.
            let sw = (x(s.end) - sx).max(1.0);
            writeln!(
                svg,
                r#"<rect class="segment {kind}" x="{sx:.1}" y="{:.1}" width="{sw:.1}" height="{:.1}" fill="{}"><title>{kind} {} to {} ({})</title></rect>"#,
                y + 2.0,
                LANE_HEIGHT - 4.0,
                colour(s.kind),
                format_time(s.start),
                format_time(s.end),
                format_duration(s.end.saturating_sub(s.start)),
                kind = s.kind.as_str(),
            )?;
        }
        for m in timeline.markers().iter().filter(|m| &m.node == *node) {
            let cause = m
                .cause
                .as_deref()
                .map(|c| format!(": {}", escape(c)))
                .unwrap_or_default();
            let title = format!("{} at {}{cause}", m.kind.as_str(), format_time(m.at));
            writeln!(svg, "{}", marker(m.kind, x(m.at), mid, &title))?;
        }
        writeln!(svg, "</g>")?;
    }

    writeln!(svg, r##"<g class="axis" stroke="#333333">"##)?;
    writeln!(
        svg,
        r#"<line x1="{left:.1}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}"/>"#,
        left + PLOT_WIDTH
    )?;
    for tick in &ticks {
        let tx = x(tick.at);
        writeln!(
            svg,
            r#"<line x1="{tx:.1}" y1="{axis_y:.1}" x2="{tx:.1}" y2="{:.1}"/>"#,
            axis_y + 5.0
        )?;
        writeln!(
            svg,
            r##"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" stroke="none" fill="#333333">{}</text>"##,
            axis_y + 18.0,
            escape(&tick.label)
        )?;
    }
    writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" stroke="none" fill="#333333">UTC</text>"##,
        left + PLOT_WIDTH,
        axis_y + 32.0
    )?;
    writeln!(svg, "</g>")?;

    legend(svg, timeline, left, legend_y)?;
    writeln!(svg, "</svg>")
}

/// One entry per segment and marker kind that the timeline uses.
fn legend(svg: &mut String, timeline: &Timeline, left: f64, y: f64) -> fmt::Result {
    writeln!(svg, r#"<g class="legend">"#)?;
    let mut lx = left;
    for kind in SegmentKind::ALL {
        if timeline.segments().iter().any(|s| s.kind == kind) {
            writeln!(
                svg,
                r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/>"#,
                y - 10.0,
                colour(kind)
            )?;
            writeln!(
                svg,
                r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
                lx + 16.0,
                legend_label(kind)
            )?;
            lx += legend_width(legend_label(kind));
        }
    }
    for kind in MarkerKind::ALL {
        if timeline.markers().iter().any(|m| m.kind == kind) {
            writeln!(svg, "{}", marker(kind, lx + 6.0, y - 4.0, kind.as_str()))?;
            writeln!(
                svg,
                r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
                lx + 16.0,
                kind.as_str()
            )?;
            lx += legend_width(kind.as_str());
        }
    }
    writeln!(svg, "</g>")
}

/// The room one legend entry takes: its symbol, its label and a gap.
fn legend_width(label: &str) -> f64 {
    16.0 + label.len() as f64 * CHAR_WIDTH + 24.0
}

fn legend_label(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Window => "window (slot held)",
        other => other.as_str(),
    }
}

/// A failure is a red diamond, a cancellation a dark circle, a postponement an amber triangle;
/// `title` must be escaped.
fn marker(kind: MarkerKind, x: f64, y: f64, title: &str) -> String {
    match kind {
        MarkerKind::Failed => format!(
            r##"<path class="marker failed" d="M {x:.1} {:.1} L {:.1} {y:.1} L {x:.1} {:.1} L {:.1} {y:.1} Z" fill="{FAILED_COLOUR}" stroke="#ffffff"><title>{title}</title></path>"##,
            y - 7.0,
            x + 7.0,
            y + 7.0,
            x - 7.0,
        ),
        MarkerKind::Canceled => format!(
            r##"<circle class="marker canceled" cx="{x:.1}" cy="{y:.1}" r="5" fill="{CANCELED_COLOUR}" stroke="#ffffff"><title>{title}</title></circle>"##
        ),
        MarkerKind::Postponed => format!(
            r##"<path class="marker postponed" d="M {x:.1} {:.1} L {:.1} {:.1} L {:.1} {:.1} Z" fill="{POSTPONED_COLOUR}" stroke="#ffffff"><title>{title}</title></path>"##,
            y - 6.0,
            x + 6.0,
            y + 5.0,
            x - 6.0,
            y + 5.0,
        ),
    }
}

fn draw_empty(svg: &mut String) -> fmt::Result {
    writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="400" height="40" viewBox="0 0 400 40" font-family="sans-serif" font-size="12">"#
    )?;
    writeln!(svg, "<title>rota rollout timeline</title>")?;
    writeln!(svg, r#"<text x="10" y="24">no history to draw</text>"#)?;
    writeln!(svg, "</svg>")
}

/// `2026-11-29 10:00:00`, in UTC.
fn format_time(at: Millis) -> String {
    match Timestamp::from_millisecond(at) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => format!("{at} ms"),
    }
}

/// `1h 5m`, `5m 30s`, `30s`, `250ms`: the two largest units.
fn format_duration(millis: Millis) -> String {
    let seconds = millis / 1000;
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) if s == 0 => format!("{millis}ms"),
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// Text and attribute values with XML's special characters escaped.
fn escape(text: &str) -> String {
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
        assert_eq!(format_duration(250), "250ms");
        assert_eq!(format_duration(30_000), "30s");
        assert_eq!(format_duration(330_000), "5m 30s");
        assert_eq!(format_duration(3_900_000), "1h 5m");
        assert_eq!(format_duration(90_000_000), "1d 1h");
    }

    #[test]
    fn escapes_xml_specials() {
        assert_eq!(
            escape(r#"a<b>&"c" 'd'"#),
            "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;"
        );
    }
}

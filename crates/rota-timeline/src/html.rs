//! A self-contained HTML page: the SVG timeline inline, then a table of every window and step
//! with its duration, and one of the failures, cancellations and postponements with their
//! causes. Inline CSS only, and a content security policy that forbids every fetch, so the
//! page shows the same offline, attached to a ticket or opened from a mail.

use std::fmt::{self, Write};

use crate::format::{duration, escape, time};
use crate::legend::colour;
use crate::{MarkerKind, SegmentKind, Timeline};

const STYLE: &str = "\
body { font-family: sans-serif; margin: 1.5em; color: #222222; background: #ffffff; }
h1 { font-size: 1.4em; }
h2 { font-size: 1.15em; margin-top: 1.5em; }
figure { margin: 0; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #dddddd; padding: 0.25em 0.75em; text-align: left; }
th { background: #f0f0f0; }
td.duration { text-align: right; font-variant-numeric: tabular-nums; }
tr.window td { background: #f7fbfe; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.4em;
  vertical-align: -0.1em; border: 1px solid #666666; }
.open { font-weight: bold; }
";

/// The page for `timeline`, titled `title` (escaped here).
pub fn render_html(timeline: &Timeline, title: &str) -> String {
    let mut html = String::new();
    // Writing to a String cannot fail.
    let _ = page(&mut html, timeline, title);
    html
}

fn page(html: &mut String, timeline: &Timeline, title: &str) -> fmt::Result {
    let title = escape(title);
    writeln!(html, "<!DOCTYPE html>")?;
    writeln!(html, r#"<html lang="en">"#)?;
    writeln!(html, "<head>")?;
    writeln!(html, r#"<meta charset="utf-8">"#)?;
    writeln!(
        html,
        r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">"#
    )?;
    writeln!(html, "<title>{title}</title>")?;
    writeln!(html, "<style>\n{STYLE}")?;
    for kind in SegmentKind::ALL {
        writeln!(
            html,
            ".kind-{} {{ background: {}; }}",
            kind.as_str(),
            colour(kind)
        )?;
    }
    writeln!(html, "</style>")?;
    writeln!(html, "</head>")?;
    writeln!(html, "<body>")?;
    writeln!(html, "<h1>{title}</h1>")?;
    summary(html, timeline)?;
    writeln!(
        html,
        r#"<figure class="timeline">{}</figure>"#,
        crate::render_svg(timeline)
    )?;
    segments(html, timeline)?;
    events(html, timeline)?;
    writeln!(html, "</body>")?;
    writeln!(html, "</html>")
}

fn summary(html: &mut String, timeline: &Timeline) -> fmt::Result {
    let Some((first, last)) = timeline.span() else {
        return writeln!(html, "<p>No history to draw.</p>");
    };
    let count = |kind: MarkerKind| timeline.markers().iter().filter(|m| m.kind == kind).count();
    let open = timeline.segments().iter().filter(|s| s.open).count();
    writeln!(
        html,
        r#"<p class="summary">{} nodes, {} to {} UTC ({}): {} failed, {} canceled, {} postponed, {} with no end recorded.</p>"#,
        timeline.nodes().len(),
        time(first),
        time(last),
        duration(last.saturating_sub(first)),
        count(MarkerKind::Failed),
        count(MarkerKind::Canceled),
        count(MarkerKind::Postponed),
        open
    )
}

/// Every window and step, by lane (in the timeline's order) and time, windows before the
/// steps inside them.
fn segments(html: &mut String, timeline: &Timeline) -> fmt::Result {
    if timeline.segments().is_empty() {
        return Ok(());
    }
    writeln!(html, "<h2>Windows and steps</h2>")?;
    writeln!(
        html,
        "<table class=\"segments\">\n<thead><tr><th>Node</th><th>What</th><th>From (UTC)</th><th>To (UTC)</th><th>Duration</th></tr></thead>\n<tbody>"
    )?;
    for node in timeline.nodes() {
        let mut lane: Vec<_> = timeline
            .segments()
            .iter()
            .filter(|s| &s.node == node)
            .collect();
        lane.sort_by_key(|s| (s.start, s.kind != SegmentKind::Window));
        for s in lane {
            let kind = s.kind.as_str();
            let to = if s.open {
                r#"<span class="open">no end recorded</span>"#.to_owned()
            } else {
                time(s.end)
            };
            let duration = if s.open {
                format!("{} so far", duration(s.end.saturating_sub(s.start)))
            } else {
                duration(s.end.saturating_sub(s.start))
            };
            writeln!(
                html,
                r#"<tr class="{kind}"><td>{}</td><td><span class="swatch kind-{kind}"></span>{kind}</td><td>{}</td><td>{to}</td><td class="duration">{duration}</td></tr>"#,
                escape(node.as_str()),
                time(s.start),
            )?;
        }
    }
    writeln!(html, "</tbody>\n</table>")
}

fn events(html: &mut String, timeline: &Timeline) -> fmt::Result {
    if timeline.markers().is_empty() {
        return Ok(());
    }
    writeln!(html, "<h2>Failures, cancellations and postponements</h2>")?;
    writeln!(
        html,
        "<table class=\"events\">\n<thead><tr><th>Node</th><th>Event</th><th>At (UTC)</th><th>Cause</th></tr></thead>\n<tbody>"
    )?;
    let mut markers: Vec<_> = timeline.markers().iter().collect();
    markers.sort_by_key(|m| m.at);
    for m in markers {
        writeln!(
            html,
            r#"<tr class="{kind}"><td>{}</td><td>{kind}</td><td>{}</td><td>{}</td></tr>"#,
            escape(m.node.as_str()),
            time(m.at),
            escape(m.cause.as_deref().unwrap_or("")),
            kind = m.kind.as_str(),
        )?;
    }
    writeln!(html, "</tbody>\n</table>")
}

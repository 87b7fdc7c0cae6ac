//! The SVG renderer: a heading, a strip of the slots in use, one lane per node, a time axis in
//! UTC fitted to the rollout, and a legend.

use std::fmt::{self, Write};

use crate::axis::ticks;
use crate::format::{duration, escape, time};
use crate::legend::{CHAR_WIDTH, defs, fill, height_share, legend, marker, open_end};
use crate::usage::slots_in_use;
use crate::{Millis, SegmentKind, Timeline};

/// Width of the time axis, in pixels.
const PLOT_WIDTH: f64 = 900.0;
const HEADING_HEIGHT: f64 = 34.0;
const STRIP_HEIGHT: f64 = 44.0;
/// Room for half of a tick label and an open end's chevron at the axis's right end.
const RIGHT_MARGIN: f64 = 64.0;
/// The span drawn around a timeline whose events all happen at one instant.
const MIN_SPAN: Millis = 1000;
/// The share of the span left empty at each end of the axis, so nothing sits on its edge.
const PAD: f64 = 0.02;

/// Where things go: the axis's time range, and the sizes that depend on the fleet's size.
struct Frame {
    start: Millis,
    end: Millis,
    left: f64,
    /// Distance between two lanes' tops, and a lane's bar height.
    pitch: f64,
    bar: f64,
    /// A node name on every `label_every`-th lane only, when lanes are too thin for all.
    label_every: usize,
    font: f64,
}

impl Frame {
    fn new(timeline: &Timeline) -> Option<Frame> {
        let (first, last) = timeline.span()?;
        // Saturating, so that absurd times from a damaged store draw oddly instead of
        // panicking.
        let span = last.saturating_sub(first);
        let (start, end) = if span == 0 {
            (
                first.saturating_sub(MIN_SPAN / 2),
                first.saturating_add(MIN_SPAN / 2),
            )
        } else {
            let pad = ((span as f64 * PAD) as Millis).max(1);
            (first.saturating_sub(pad), last.saturating_add(pad))
        };
        let lanes = timeline.nodes().len();
        // Large fleets get thinner lanes, so that a thousand nodes stay one page to scroll.
        let (pitch, font): (f64, f64) = match lanes {
            0..=40 => (28.0, 12.0),
            41..=150 => (14.0, 10.0),
            _ => (6.0, 9.0),
        };
        let label_every = ((font + 2.0) / pitch).ceil().max(1.0) as usize;
        let longest = timeline
            .nodes()
            .iter()
            .map(|n| n.as_str().len())
            .max()
            .unwrap_or(0);
        Some(Frame {
            start,
            end,
            left: (longest as f64 * CHAR_WIDTH * font / 12.0 + 20.0).max(100.0),
            pitch,
            bar: pitch * 0.8,
            label_every,
            font,
        })
    }

    /// The x of instant `t`.
    fn x(&self, t: Millis) -> f64 {
        let span = self.end.saturating_sub(self.start).max(1) as f64;
        self.left + t.saturating_sub(self.start) as f64 / span * PLOT_WIDTH
    }
}

/// The timeline as a standalone SVG document. Segments and markers carry a `<title>` with
/// their times (and a failure's cause), which viewers show on hover.
pub fn render_svg(timeline: &Timeline) -> String {
    let mut svg = String::new();
    // Writing to a String cannot fail.
    let _ = draw(&mut svg, timeline);
    svg
}

fn draw(svg: &mut String, timeline: &Timeline) -> fmt::Result {
    let Some(frame) = Frame::new(timeline) else {
        return draw_empty(svg);
    };
    let nodes = timeline.nodes();
    let usage = slots_in_use(timeline);
    let strip_top = HEADING_HEIGHT;
    let lanes_top = if usage.is_empty() {
        strip_top
    } else {
        strip_top + STRIP_HEIGHT + 14.0
    };
    let axis_y = lanes_top + nodes.len() as f64 * frame.pitch + 4.0;
    let legend_y = axis_y + 52.0;
    let width = frame.left + PLOT_WIDTH + RIGHT_MARGIN;
    // The legend's height is known once drawn: draw it aside first.
    let mut legend_svg = String::new();
    let legend_height = legend(&mut legend_svg, timeline, frame.left, legend_y, PLOT_WIDTH)?;
    let height = legend_y + legend_height + 4.0;

    writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    )?;
    writeln!(svg, "<title>rota rollout timeline</title>")?;
    defs(svg)?;
    writeln!(
        svg,
        r##"<rect class="background" x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    )?;
    let (first, last) = timeline.span().unwrap_or((frame.start, frame.end));
    writeln!(
        svg,
        r#"<text class="heading" x="{:.1}" y="20" font-size="14" font-weight="bold">rota {}, {} to {} UTC ({}, {} nodes)</text>"#,
        frame.left,
        if timeline.is_forecast() {
            "forecast"
        } else {
            "rollout"
        },
        time(first),
        time(last),
        duration(last.saturating_sub(first)),
        nodes.len()
    )?;

    let ticks = ticks(frame.start, frame.end, (PLOT_WIDTH / CHAR_WIDTH) as usize);
    writeln!(svg, r##"<g class="grid" stroke="#dddddd">"##)?;
    for tick in &ticks {
        let tx = frame.x(tick.at);
        writeln!(
            svg,
            r#"<line x1="{tx:.1}" y1="{strip_top:.1}" x2="{tx:.1}" y2="{axis_y:.1}"/>"#
        )?;
    }
    writeln!(svg, "</g>")?;

    if !usage.is_empty() {
        strip(svg, &frame, &usage, strip_top)?;
    }
    for (i, node) in nodes.iter().enumerate() {
        lane(svg, &frame, timeline, node, i, lanes_top)?;
    }
    axis(svg, &frame, &ticks, axis_y)?;
    svg.push_str(&legend_svg);
    writeln!(svg, "</svg>")
}

/// The summary strip: how many slots were in use over time, as a stepped area.
fn strip(svg: &mut String, frame: &Frame, usage: &[(Millis, u32)], top: f64) -> fmt::Result {
    let most = usage.iter().map(|&(_, n)| n).max().unwrap_or(0).max(1);
    let bottom = top + STRIP_HEIGHT;
    let y = |n: u32| bottom - f64::from(n) / f64::from(most) * (STRIP_HEIGHT - 4.0);
    writeln!(
        svg,
        r#"<g class="slots" data-most="{most}"><title>slots in use: at most {most} at once</title>"#
    )?;
    writeln!(
        svg,
        r##"<rect x="{:.1}" y="{top:.1}" width="{PLOT_WIDTH:.1}" height="{STRIP_HEIGHT:.1}" fill="#f7f7f7"/>"##,
        frame.left
    )?;
    for pair in usage.windows(2) {
        let [(from, n), (to, _)] = [pair[0], pair[1]];
        if n == 0 {
            continue;
        }
        let (x0, x1) = (frame.x(from), frame.x(to));
        writeln!(
            svg,
            r##"<rect class="in-use" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#999999"><title>{n} in use from {} to {}</title></rect>"##,
            y(n),
            (x1 - x0).max(0.5),
            bottom - y(n),
            time(from),
            time(to)
        )?;
    }
    if let Some(&(from, n)) = usage.last().filter(|&&(_, n)| n > 0) {
        // Still in use at the end: open segments.
        let x0 = frame.x(from);
        writeln!(
            svg,
            r##"<rect class="in-use" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#999999"/>"##,
            y(n),
            (frame.x(frame.end) - x0).max(0.5),
            bottom - y(n),
        )?;
    }
    let label_x = frame.left - 8.0;
    writeln!(
        svg,
        r#"<text x="{label_x:.1}" y="{:.1}" text-anchor="end">slots in use</text>"#,
        top + STRIP_HEIGHT / 2.0 + 4.0
    )?;
    writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#333333">{most}</text>"##,
        frame.left + PLOT_WIDTH + 4.0,
        y(most) + 8.0
    )?;
    writeln!(svg, "</g>")
}

fn lane(
    svg: &mut String,
    frame: &Frame,
    timeline: &Timeline,
    node: &rota_core::NodeName,
    i: usize,
    lanes_top: f64,
) -> fmt::Result {
    let y = lanes_top + i as f64 * frame.pitch;
    let mid = y + frame.bar / 2.0;
    let name = escape(node.as_str());
    writeln!(svg, r#"<g class="lane" data-node="{name}">"#)?;
    if i.is_multiple_of(2) {
        writeln!(
            svg,
            r##"<rect class="lane-background" x="{:.1}" y="{y:.1}" width="{PLOT_WIDTH:.1}" height="{:.1}" fill="#f4f4f4"/>"##,
            frame.left, frame.bar
        )?;
    }
    if i.is_multiple_of(frame.label_every) {
        writeln!(
            svg,
            r#"<text class="node" x="{:.1}" y="{:.1}" text-anchor="end" font-size="{}">{name}</text>"#,
            frame.left - 8.0,
            mid + frame.font / 3.0,
            frame.font
        )?;
    }
    // Whole windows first, so that finer segments given for the same time lie on top.
    let mut segments: Vec<_> = timeline
        .segments()
        .iter()
        .filter(|s| &s.node == node)
        .collect();
    segments.sort_by_key(|s| (s.kind != SegmentKind::Window, s.start));
    for s in &segments {
        let sx = frame.x(s.start);
        // Even an instant's segment stays visible.
        let sw = (frame.x(s.end) - sx).max(1.0);
        let h = frame.bar * height_share(s.kind);
        let end = if s.open {
            format!("{} (no end recorded)", time(s.end))
        } else {
            time(s.end)
        };
        writeln!(
            svg,
            r#"<rect class="segment {kind}{open}" x="{sx:.1}" y="{:.1}" width="{sw:.1}" height="{h:.1}" fill="{}"><title>{name}: {kind} {} to {end} ({})</title></rect>"#,
            mid - h / 2.0,
            fill(s.kind),
            time(s.start),
            duration(s.end.saturating_sub(s.start)),
            kind = s.kind.as_str(),
            open = if s.open { " open" } else { "" },
        )?;
    }
    for s in segments.iter().filter(|s| s.open) {
        let title = format!(
            "{name}: {} since {}, no end recorded",
            s.kind.as_str(),
            time(s.start)
        );
        writeln!(
            svg,
            "{}",
            open_end(frame.x(s.end), mid - frame.bar / 2.0, frame.bar, &title)
        )?;
    }
    let size = (frame.bar / 2.0 + 1.0).min(7.0);
    for m in timeline.markers().iter().filter(|m| &m.node == node) {
        let cause = m
            .cause
            .as_deref()
            .map(|c| format!(": {}", escape(c)))
            .unwrap_or_default();
        let title = format!("{name}: {} at {}{cause}", m.kind.as_str(), time(m.at));
        writeln!(svg, "{}", marker(m.kind, frame.x(m.at), mid, size, &title))?;
    }
    writeln!(svg, "</g>")
}

fn axis(svg: &mut String, frame: &Frame, ticks: &[crate::axis::Tick], axis_y: f64) -> fmt::Result {
    writeln!(svg, r##"<g class="axis" stroke="#333333">"##)?;
    writeln!(
        svg,
        r#"<line x1="{:.1}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}"/>"#,
        frame.left,
        frame.left + PLOT_WIDTH
    )?;
    for tick in ticks {
        let tx = frame.x(tick.at);
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
        if let Some(date) = &tick.date {
            writeln!(
                svg,
                r##"<text class="date" x="{tx:.1}" y="{:.1}" text-anchor="middle" stroke="none" fill="#666666" font-size="10">{}</text>"##,
                axis_y + 31.0,
                escape(date)
            )?;
        }
    }
    writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" stroke="none" fill="#333333">UTC</text>"##,
        frame.left - 8.0,
        axis_y + 18.0
    )?;
    writeln!(svg, "</g>")
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

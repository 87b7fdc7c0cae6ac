//! How each kind looks, and the legend that says so.
//!
//! Colours are from the Okabe–Ito palette, which colour-blind readers tell apart too; each
//! segment kind also has a pattern of its own (stripes, dots, a thinner bar for waiting) and
//! each marker kind a shape of its own, so that nothing rests on colour alone.

use std::fmt::{self, Write};

use crate::{MarkerKind, SegmentKind, Timeline};

/// Rough width of one character at the font size used.
pub const CHAR_WIDTH: f64 = 7.0;

pub fn colour(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Window => "#56b4e9",
        SegmentKind::Wait => "#c8c8c8",
        SegmentKind::Drain => "#e69f00",
        SegmentKind::Maintenance => "#0072b2",
        SegmentKind::Reboot => "#cc79a7",
        SegmentKind::Verify => "#009e73",
        SegmentKind::Failed => "#d55e00",
    }
}

const FAILED_COLOUR: &str = "#d55e00";
const CANCELED_COLOUR: &str = "#000000";
const POSTPONED_COLOUR: &str = "#f0e442";

/// The `fill` of a segment of `kind`: its pattern, defined in [`defs`].
pub fn fill(kind: SegmentKind) -> String {
    format!("url(#rota-{})", kind.as_str())
}

/// How much of a lane's height a segment of `kind` takes: waiting is a thinner bar, as the
/// node holds nothing yet.
pub fn height_share(kind: SegmentKind) -> f64 {
    if kind == SegmentKind::Wait { 0.5 } else { 1.0 }
}

/// The patterns [`fill`] names: each kind's colour, with white stripes or dots over some.
pub fn defs(svg: &mut String) -> fmt::Result {
    writeln!(svg, "<defs>")?;
    for kind in SegmentKind::ALL {
        let colour = colour(kind);
        let id = kind.as_str();
        let overlay = match kind {
            SegmentKind::Drain => {
                r##"<path d="M 0 6 L 6 0" stroke="#ffffff" stroke-width="1.5" stroke-opacity="0.7"/>"##
            }
            SegmentKind::Reboot => {
                r##"<path d="M 3 0 L 3 6" stroke="#ffffff" stroke-width="1.5" stroke-opacity="0.7"/>"##
            }
            SegmentKind::Verify => {
                r##"<circle cx="3" cy="3" r="1.2" fill="#ffffff" fill-opacity="0.8"/>"##
            }
            SegmentKind::Failed => {
                r##"<path d="M 0 0 L 6 6" stroke="#000000" stroke-width="1.2" stroke-opacity="0.5"/>"##
            }
            SegmentKind::Window | SegmentKind::Wait | SegmentKind::Maintenance => "",
        };
        writeln!(
            svg,
            r#"<pattern id="rota-{id}" patternUnits="userSpaceOnUse" width="6" height="6"><rect width="6" height="6" fill="{colour}"/>{overlay}</pattern>"#
        )?;
    }
    writeln!(svg, "</defs>")
}

/// A failure is a vermillion diamond, a cancellation a black circle, a postponement a yellow
/// triangle, each outlined so it shows on any bar; `title` must be escaped.
pub fn marker(kind: MarkerKind, x: f64, y: f64, size: f64, title: &str) -> String {
    let r = size;
    match kind {
        MarkerKind::Failed => format!(
            r##"<path class="marker failed" d="M {x:.1} {:.1} L {:.1} {y:.1} L {x:.1} {:.1} L {:.1} {y:.1} Z" fill="{FAILED_COLOUR}" stroke="#000000"><title>{title}</title></path>"##,
            y - r,
            x + r,
            y + r,
            x - r,
        ),
        MarkerKind::Canceled => format!(
            r##"<circle class="marker canceled" cx="{x:.1}" cy="{y:.1}" r="{:.1}" fill="{CANCELED_COLOUR}" stroke="#ffffff"><title>{title}</title></circle>"##,
            r * 0.7
        ),
        MarkerKind::Postponed => format!(
            r##"<path class="marker postponed" d="M {x:.1} {:.1} L {:.1} {:.1} L {:.1} {:.1} Z" fill="{POSTPONED_COLOUR}" stroke="#000000"><title>{title}</title></path>"##,
            y - r,
            x + r,
            y + r * 0.8,
            x - r,
            y + r * 0.8,
        ),
    }
}

/// The sign at the end of a segment with no recorded end: a dashed edge and a chevron past
/// it; `title` must be escaped.
pub fn open_end(x: f64, top: f64, height: f64, title: &str) -> String {
    let mid = top + height / 2.0;
    format!(
        r##"<g class="open-end"><line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000000" stroke-dasharray="2 2"/><path d="M {:.1} {:.1} L {:.1} {mid:.1} L {:.1} {:.1}" fill="none" stroke="#000000" stroke-width="1.5"/><title>{title}</title></g>"##,
        top + height,
        x + 2.0,
        mid - 4.0,
        x + 6.0,
        x + 2.0,
        mid + 4.0,
    )
}

fn segment_label(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Window => "window (steps unknown)",
        SegmentKind::Wait => "wait (queued)",
        SegmentKind::Failed => "failed (slot held)",
        other => other.as_str(),
    }
}

/// What a legend entry shows.
enum Symbol {
    Segment(SegmentKind),
    Marker(MarkerKind),
    Open,
}

impl Symbol {
    fn label(&self) -> &'static str {
        match self {
            Symbol::Segment(kind) => segment_label(*kind),
            Symbol::Marker(kind) => kind.as_str(),
            Symbol::Open => "no end recorded",
        }
    }

    /// The symbol in a 12-pixel square from `x`, `top`.
    fn draw(&self, x: f64, top: f64) -> String {
        match self {
            Symbol::Segment(kind) => {
                let h = 12.0 * height_share(*kind);
                format!(
                    r##"<rect x="{x:.1}" y="{:.1}" width="12" height="{h:.1}" fill="{}" stroke="#666666" stroke-width="0.5"/>"##,
                    top + (12.0 - h) / 2.0,
                    fill(*kind)
                )
            }
            Symbol::Marker(kind) => marker(*kind, x + 6.0, top + 6.0, 6.0, kind.as_str()),
            Symbol::Open => open_end(x + 2.0, top, 12.0, "no end recorded"),
        }
    }
}

/// One entry per segment and marker kind that the timeline uses, and one for open-ended
/// segments if any, in rows no wider than `width` from `left`, the first row's text on `y`;
/// returns the height used.
pub fn legend(
    svg: &mut String,
    timeline: &Timeline,
    left: f64,
    y: f64,
    width: f64,
) -> Result<f64, fmt::Error> {
    let segments = SegmentKind::ALL
        .into_iter()
        .filter(|&k| timeline.segments().iter().any(|s| s.kind == k))
        .map(Symbol::Segment);
    let markers = MarkerKind::ALL
        .into_iter()
        .filter(|&k| timeline.markers().iter().any(|m| m.kind == k))
        .map(Symbol::Marker);
    let open = timeline
        .segments()
        .iter()
        .any(|s| s.open)
        .then_some(Symbol::Open);

    writeln!(svg, r#"<g class="legend">"#)?;
    let (mut lx, mut ly) = (left, y);
    for symbol in segments.chain(markers).chain(open) {
        let label = match symbol {
            Symbol::Segment(SegmentKind::Window) if timeline.is_forecast() => "window (forecast)",
            _ => symbol.label(),
        };
        let room = 16.0 + label.len() as f64 * CHAR_WIDTH + 24.0;
        if lx > left && lx + room > left + width {
            lx = left;
            ly += 20.0;
        }
        writeln!(svg, "{}", symbol.draw(lx, ly - 10.0))?;
        writeln!(
            svg,
            r#"<text x="{:.1}" y="{ly:.1}">{label}</text>"#,
            lx + 16.0
        )?;
        lx += room;
    }
    writeln!(svg, "</g>")?;
    Ok(ly - y + 20.0)
}

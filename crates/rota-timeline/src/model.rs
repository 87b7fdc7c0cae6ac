//! What a timeline is made of.

use rota_core::NodeName;
pub use rota_store::Millis;

/// What a node was doing during a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SegmentKind {
    /// The node's whole maintenance window (slot taken to slot released), where the steps
    /// inside it are not known.
    Window,
    /// Waiting: for a slot, a window, a blocker.
    Wait,
    Drain,
    Maintenance,
    Reboot,
    Verify,
}

impl SegmentKind {
    /// Every kind, in legend order.
    pub const ALL: [SegmentKind; 6] = [
        SegmentKind::Window,
        SegmentKind::Wait,
        SegmentKind::Drain,
        SegmentKind::Maintenance,
        SegmentKind::Reboot,
        SegmentKind::Verify,
    ];

    /// The lowercase name used in the legend and in SVG classes.
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentKind::Window => "window",
            SegmentKind::Wait => "wait",
            SegmentKind::Drain => "drain",
            SegmentKind::Maintenance => "maintenance",
            SegmentKind::Reboot => "reboot",
            SegmentKind::Verify => "verify",
        }
    }
}

/// A stretch of time one node spent in one kind of step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub node: NodeName,
    pub kind: SegmentKind,
    pub start: Millis,
    pub end: Millis,
}

/// What a point marker stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MarkerKind {
    /// Work failed.
    Failed,
    /// Work was canceled by an operator or a withdrawn request.
    Canceled,
    /// The maintenance window closed before the work's next step: it waits for the next one.
    Postponed,
}

impl MarkerKind {
    /// Every kind, in legend order.
    pub const ALL: [MarkerKind; 3] = [
        MarkerKind::Failed,
        MarkerKind::Canceled,
        MarkerKind::Postponed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Failed => "failed",
            MarkerKind::Canceled => "canceled",
            MarkerKind::Postponed => "postponed",
        }
    }
}

/// An instant worth pointing at on a node's lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub node: NodeName,
    pub kind: MarkerKind,
    pub at: Millis,
    /// Shown when hovering over the marker.
    pub cause: Option<String>,
}

/// A segment that ends before it starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid {kind} segment of node {node}: it ends at {end} ms, before its start at {start} ms; expected end >= start"
)]
pub struct TimelineError {
    pub node: NodeName,
    pub kind: &'static str,
    pub start: Millis,
    pub end: Millis,
}

/// Segments and markers, checked, with one lane per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    segments: Vec<Segment>,
    markers: Vec<Marker>,
}

impl Timeline {
    /// A timeline of `segments` and `markers`; each segment must end no earlier than it
    /// starts.
    pub fn new(segments: Vec<Segment>, markers: Vec<Marker>) -> Result<Timeline, TimelineError> {
        if let Some(bad) = segments.iter().find(|s| s.end < s.start) {
            return Err(TimelineError {
                node: bad.node.clone(),
                kind: bad.kind.as_str(),
                start: bad.start,
                end: bad.end,
            });
        }
        Ok(Timeline { segments, markers })
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    pub fn markers(&self) -> &[Marker] {
        &self.markers
    }

    /// The lanes, in order of each node's first segment or marker (so a rollout reads as a
    /// staircase), ties by name.
    pub fn nodes(&self) -> Vec<&NodeName> {
        let mut first: Vec<(Millis, &NodeName)> = Vec::new();
        let times = self
            .segments
            .iter()
            .map(|s| (s.start, &s.node))
            .chain(self.markers.iter().map(|m| (m.at, &m.node)));
        for (at, node) in times {
            match first.iter_mut().find(|(_, n)| *n == node) {
                Some(entry) => entry.0 = entry.0.min(at),
                None => first.push((at, node)),
            }
        }
        first.sort();
        first.into_iter().map(|(_, node)| node).collect()
    }

    /// The earliest and latest instant of any segment or marker, or `None` when empty.
    pub fn span(&self) -> Option<(Millis, Millis)> {
        let starts = self
            .segments
            .iter()
            .map(|s| s.start)
            .chain(self.markers.iter().map(|m| m.at));
        let ends = self
            .segments
            .iter()
            .map(|s| s.end)
            .chain(self.markers.iter().map(|m| m.at));
        Some((starts.min()?, ends.max()?))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeName {
        NodeName::new(name).unwrap()
    }

    fn segment(name: &str, start: Millis, end: Millis) -> Segment {
        Segment {
            node: node(name),
            kind: SegmentKind::Drain,
            start,
            end,
        }
    }

    #[test]
    fn an_inverted_segment_is_refused_by_name() {
        let err = Timeline::new(vec![segment("node-1", 20, 10)], Vec::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid drain segment of node node-1: it ends at 10 ms, before its start at 20 \
             ms; expected end >= start"
        );
        assert!(Timeline::new(vec![segment("node-1", 10, 10)], Vec::new()).is_ok());
    }

    #[test]
    fn lanes_follow_first_activity_then_name() {
        let marker = Marker {
            node: node("c"),
            kind: MarkerKind::Failed,
            at: 5,
            cause: None,
        };
        let timeline = Timeline::new(
            vec![
                segment("b", 30, 40),
                segment("a", 10, 20),
                segment("b", 0, 1),
                segment("d", 10, 11),
            ],
            vec![marker],
        )
        .unwrap();
        let names: Vec<&str> = timeline.nodes().into_iter().map(NodeName::as_str).collect();
        assert_eq!(names, ["b", "c", "a", "d"]);
        assert_eq!(timeline.span(), Some((0, 40)));
        assert_eq!(Timeline::default().span(), None);
    }
}

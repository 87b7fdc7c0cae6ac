//! What a timeline is made of.

use std::collections::BTreeMap;

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
    /// Failed and holding its slot until an operator retries or unlocks (fail closed).
    Failed,
}

impl SegmentKind {
    /// Every kind, in legend order.
    pub const ALL: [SegmentKind; 7] = [
        SegmentKind::Window,
        SegmentKind::Wait,
        SegmentKind::Drain,
        SegmentKind::Maintenance,
        SegmentKind::Reboot,
        SegmentKind::Verify,
        SegmentKind::Failed,
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
            SegmentKind::Failed => "failed",
        }
    }

    /// Whether the node holds a slot during a segment of this kind.
    pub fn holds_slot(self) -> bool {
        self != SegmentKind::Wait
    }
}

/// A stretch of time one node spent in one kind of step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub node: NodeName,
    pub kind: SegmentKind,
    pub start: Millis,
    pub end: Millis,
    /// No end was recorded (the window is still open, or its agent was killed): `end` is only
    /// where the known part stops, and the segment is drawn open-ended.
    pub open: bool,
}

impl Segment {
    /// A closed segment.
    pub fn new(node: NodeName, kind: SegmentKind, start: Millis, end: Millis) -> Segment {
        Segment {
            node,
            kind,
            start,
            end,
            open: false,
        }
    }

    /// A segment with no recorded end, known up to `until`.
    pub fn open(node: NodeName, kind: SegmentKind, start: Millis, until: Millis) -> Segment {
        Segment {
            open: true,
            ..Segment::new(node, kind, start, until.max(start))
        }
    }
}

/// What a point marker stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MarkerKind {
    /// Work failed.
    Failed,
    /// Work was canceled by an operator or a withdrawn request.
    Canceled,
    /// The maintenance hours ended before the node could drain, run its next procedure or
    /// reboot: the work waits for the next window.
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
    /// What is to come (`rota plan`), not what happened.
    forecast: bool,
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
        Ok(Timeline {
            segments,
            markers,
            forecast: false,
        })
    }

    /// This timeline as a forecast: drawn under its own heading, its windows as forecast.
    pub fn forecast(self) -> Timeline {
        Timeline {
            forecast: true,
            ..self
        }
    }

    pub fn is_forecast(&self) -> bool {
        self.forecast
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    pub fn markers(&self) -> &[Marker] {
        &self.markers
    }

    /// This timeline with `other`'s segments and markers added: a node's steps (see
    /// [`crate::steps`]) drawn over the windows that history gives.
    /// A window in which one of `other`'s slot-holding steps starts is drawn as its steps
    /// alone: "steps unknown" is left for the windows whose steps are no longer kept.
    pub fn merged(mut self, other: Timeline) -> Timeline {
        let mut starts: BTreeMap<&NodeName, Vec<Millis>> = BTreeMap::new();
        for step in other.segments.iter().filter(|s| s.kind.holds_slot()) {
            starts.entry(&step.node).or_default().push(step.start);
        }
        for node_starts in starts.values_mut() {
            node_starts.sort_unstable();
        }
        let known = |w: &Segment| {
            starts.get(&w.node).is_some_and(|s| {
                let from = s.partition_point(|&at| at < w.start);
                s.get(from).is_some_and(|&at| at <= w.end)
            })
        };
        let windows: Vec<bool> = self
            .segments
            .iter()
            .map(|w| w.kind == SegmentKind::Window && known(w))
            .collect();
        let mut drop = windows.into_iter();
        self.segments.retain(|_| !drop.next().unwrap_or(false));
        self.segments.extend(other.segments);
        self.markers.extend(other.markers);
        self
    }

    /// The lanes, in order of the moment each node first held a slot (so a rollout reads as a
    /// staircase, however long its nodes waited in the queue), then the nodes that never did
    /// (still waiting, or only a marker) in order of their first segment or marker; ties by
    /// name.
    pub fn nodes(&self) -> Vec<&NodeName> {
        let mut first: Vec<((bool, Millis), &NodeName)> = Vec::new();
        let times = self
            .segments
            .iter()
            .map(|s| ((!s.kind.holds_slot(), s.start), &s.node))
            .chain(self.markers.iter().map(|m| ((true, m.at), &m.node)));
        for (key, node) in times {
            match first.iter_mut().find(|(_, n)| *n == node) {
                Some(entry) => entry.0 = entry.0.min(key),
                None => first.push((key, node)),
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
        Segment::new(node(name), SegmentKind::Drain, start, end)
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
                Segment::new(node("e"), SegmentKind::Wait, 0, 50),
                Segment::new(node("e"), SegmentKind::Drain, 50, 60),
                Segment::new(node("f"), SegmentKind::Wait, 1, 70),
            ],
            vec![marker],
        )
        .unwrap();
        let names: Vec<&str> = timeline.nodes().into_iter().map(NodeName::as_str).collect();
        assert_eq!(
            names,
            ["b", "a", "d", "e", "f", "c"],
            "by the slot taken, however long the wait; then those that never took one"
        );
        assert_eq!(timeline.span(), Some((0, 70)));
        assert_eq!(Timeline::default().span(), None);
    }
}

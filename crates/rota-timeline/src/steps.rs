//! Segments from a node's steps: the lifecycle states it entered, and when.
//!
//! Each step lasts until the next one; `idle` ends the previous step and draws nothing. A last
//! step other than `idle` has no recorded end (the work goes on, or its agent was killed), so
//! it is drawn open-ended up to `until`. Drawn over the windows of [`crate::from_history`]
//! (see [`crate::Timeline::merged`]), the steps show where each window's time went.

use std::collections::BTreeMap;

use rota_core::{NodeName, NodeState};

use crate::{Millis, Segment, SegmentKind, Timeline};

/// The kind of segment a state is drawn as; `None` for idle, which is not drawn.
pub fn kind(state: NodeState) -> Option<SegmentKind> {
    match state {
        NodeState::Idle => None,
        NodeState::Queued => Some(SegmentKind::Wait),
        NodeState::Draining => Some(SegmentKind::Drain),
        NodeState::Maintaining => Some(SegmentKind::Maintenance),
        NodeState::Rebooting => Some(SegmentKind::Reboot),
        NodeState::Verifying => Some(SegmentKind::Verify),
        NodeState::Failed => Some(SegmentKind::Failed),
    }
}

/// One node's segments from its `steps`, in the order they were taken. Steps out of time
/// order (clocks that stepped back) are taken by time, ties in the given order; a repeated
/// state continues the segment it is in.
pub fn lane(node: &NodeName, steps: &[(NodeState, Millis)], until: Millis) -> Vec<Segment> {
    let mut steps = steps.to_vec();
    steps.sort_by_key(|&(_, at)| at);
    steps.dedup_by_key(|&mut (state, _)| state);
    let mut segments = Vec::new();
    for (i, &(state, start)) in steps.iter().enumerate() {
        let Some(kind) = kind(state) else {
            continue;
        };
        segments.push(match steps.get(i + 1) {
            Some(&(_, end)) => Segment::new(node.clone(), kind, start, end),
            None => Segment::open(node.clone(), kind, start, until),
        });
    }
    segments
}

/// The timeline of every node's steps, given as `(node, state, at)` in any order of nodes and
/// each node's in the order they were taken.
pub fn from_steps<'a>(
    steps: impl IntoIterator<Item = (&'a NodeName, NodeState, Millis)>,
    until: Millis,
) -> Timeline {
    let mut by_node: BTreeMap<&NodeName, Vec<(NodeState, Millis)>> = BTreeMap::new();
    for (node, state, at) in steps {
        by_node.entry(node).or_default().push((state, at));
    }
    let segments = by_node
        .into_iter()
        .flat_map(|(node, steps)| lane(node, &steps, until))
        .collect();
    // Every segment ends at or after its start: steps are sorted, and an open one ends no
    // earlier than it began.
    Timeline::new(segments, Vec::new()).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use NodeState::{Draining, Failed, Idle, Maintaining, Queued, Rebooting, Verifying};

    fn node(name: &str) -> NodeName {
        NodeName::new(name).unwrap()
    }

    fn drawn(segments: &[Segment]) -> Vec<(SegmentKind, Millis, Millis, bool)> {
        segments
            .iter()
            .map(|s| (s.kind, s.start, s.end, s.open))
            .collect()
    }

    #[test]
    fn each_step_lasts_until_the_next_and_idle_draws_nothing() {
        let steps = [
            (Queued, 0),
            (Draining, 10),
            (Maintaining, 30),
            (Rebooting, 60),
            (Verifying, 90),
            (Idle, 100),
        ];
        use SegmentKind::{Drain, Maintenance, Reboot, Verify, Wait};
        assert_eq!(
            drawn(&lane(&node("a"), &steps, 1000)),
            [
                (Wait, 0, 10, false),
                (Drain, 10, 30, false),
                (Maintenance, 30, 60, false),
                (Reboot, 60, 90, false),
                (Verify, 90, 100, false),
            ]
        );
    }

    #[test]
    fn a_last_step_without_an_end_is_open_up_to_until() {
        // The agent was killed while rebooting: no later step.
        let steps = [(Queued, 0), (Draining, 10), (Rebooting, 40)];
        let segments = lane(&node("a"), &steps, 500);
        assert_eq!(
            drawn(&segments)[2],
            (SegmentKind::Reboot, 40, 500, true),
            "{segments:?}"
        );
        // `until` before the step: an empty open segment, not an inverted one.
        assert_eq!(
            drawn(&lane(&node("a"), &[(Failed, 600)], 500)),
            [(SegmentKind::Failed, 600, 600, true)]
        );
    }

    #[test]
    fn repeats_merge_and_disorder_is_sorted_by_time() {
        let steps = [(Draining, 10), (Queued, 0), (Draining, 20), (Idle, 30)];
        assert_eq!(
            drawn(&lane(&node("a"), &steps, 100)),
            [
                (SegmentKind::Wait, 0, 10, false),
                (SegmentKind::Drain, 10, 30, false)
            ]
        );
        assert!(lane(&node("a"), &[], 100).is_empty());
        assert!(lane(&node("a"), &[(Idle, 5)], 100).is_empty());
    }

    #[test]
    fn every_node_gets_its_own_lane() {
        let (a, b) = (node("a"), node("b"));
        let timeline = from_steps(
            [
                (&b, Queued, 0),
                (&a, Draining, 5),
                (&b, Draining, 20),
                (&a, Idle, 20),
                (&b, Idle, 30),
            ],
            100,
        );
        let lanes: Vec<&str> = timeline.nodes().into_iter().map(NodeName::as_str).collect();
        assert_eq!(
            lanes,
            ["a", "b"],
            "a took its slot first, though b queued first"
        );
        assert_eq!(timeline.segments().len(), 3);
        assert!(timeline.segments().iter().all(|s| !s.open));
    }
}

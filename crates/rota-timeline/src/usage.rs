//! Slots in use over time: how many nodes held a slot at each moment, for the summary strip
//! over the lanes.

use std::collections::BTreeMap;

use rota_core::NodeName;

use crate::{Millis, Timeline};

/// The number of slots in use from each instant on, as `(at, count)` at every change, oldest
/// first; the last is 0 unless a segment is still open. A node holds at most one slot, so its
/// overlapping slot-holding segments (a window and the steps drawn over it) count once.
pub fn slots_in_use(timeline: &Timeline) -> Vec<(Millis, u32)> {
    let mut per_node: BTreeMap<&NodeName, Vec<(Millis, Millis)>> = BTreeMap::new();
    for s in timeline.segments() {
        if s.kind.holds_slot() && s.end > s.start {
            per_node.entry(&s.node).or_default().push((s.start, s.end));
        }
    }
    let mut changes: BTreeMap<Millis, i64> = BTreeMap::new();
    for spans in per_node.values_mut() {
        for (start, end) in merge(spans) {
            *changes.entry(start).or_default() += 1;
            *changes.entry(end).or_default() -= 1;
        }
    }
    let mut count = 0_i64;
    let mut counts: Vec<(Millis, u32)> = Vec::new();
    for (at, change) in changes {
        count += change;
        if change != 0 {
            counts.push((at, u32::try_from(count).unwrap_or(0)));
        }
    }
    counts
}

/// `spans` sorted and with overlapping or touching ones joined.
fn merge(spans: &mut [(Millis, Millis)]) -> Vec<(Millis, Millis)> {
    spans.sort_unstable();
    let mut merged: Vec<(Millis, Millis)> = Vec::new();
    for &(start, end) in spans.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use crate::{Segment, SegmentKind};

    fn segment(name: &str, kind: SegmentKind, start: Millis, end: Millis) -> Segment {
        Segment::new(NodeName::new(name).unwrap(), kind, start, end)
    }

    #[test]
    fn counts_nodes_holding_a_slot_once_each() {
        use SegmentKind::{Drain, Reboot, Wait, Window};
        let timeline = Timeline::new(
            vec![
                segment("a", Window, 0, 100),
                // Steps over the same window do not count twice.
                segment("a", Drain, 0, 40),
                segment("a", Reboot, 40, 100),
                // Waiting holds no slot.
                segment("b", Wait, 0, 100),
                segment("b", Window, 100, 150),
                segment("c", Window, 50, 120),
            ],
            Vec::new(),
        )
        .unwrap();
        assert_eq!(
            slots_in_use(&timeline),
            [(0, 1), (50, 2), (120, 1), (150, 0)]
        );
        assert!(slots_in_use(&Timeline::default()).is_empty());
    }
}

//! Where a rollout's time went: for each kind of step (wait, drain, maintenance, reboot,
//! verify), how long it took across the nodes, as p50 and p99, and the nodes where it took
//! longest. Only steps whose end was recorded count: an open one says nothing of its length.

use crate::{Millis, Segment, SegmentKind};

/// One kind of step across the rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseSummary {
    pub kind: SegmentKind,
    /// How many such steps ended.
    pub count: usize,
    pub p50_ms: Millis,
    pub p99_ms: Millis,
    pub max_ms: Millis,
    /// The longest ones, longest first: the node and the step's length.
    pub slowest: Vec<Slow>,
}

/// A step that took long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slow {
    pub node: String,
    pub start: Millis,
    pub ms: Millis,
}

/// The kinds summarised, in lifecycle order: a window's own span and a failure's wait for an
/// operator say nothing of where a step's time went.
const KINDS: [SegmentKind; 5] = [
    SegmentKind::Wait,
    SegmentKind::Drain,
    SegmentKind::Maintenance,
    SegmentKind::Reboot,
    SegmentKind::Verify,
];

/// The summary of `segments` for each kind that has an ended step, with its `slowest` longest
/// ones.
pub fn summarize(segments: &[Segment], slowest: usize) -> Vec<PhaseSummary> {
    KINDS
        .iter()
        .filter_map(|&kind| {
            let mut ended: Vec<&Segment> = segments
                .iter()
                .filter(|s| s.kind == kind && !s.open)
                .collect();
            if ended.is_empty() {
                return None;
            }
            ended.sort_by_key(|s| std::cmp::Reverse(s.end - s.start));
            let mut lengths: Vec<Millis> = ended.iter().map(|s| s.end - s.start).collect();
            lengths.sort_unstable();
            Some(PhaseSummary {
                kind,
                count: lengths.len(),
                p50_ms: nearest_rank(&lengths, 50),
                p99_ms: nearest_rank(&lengths, 99),
                max_ms: lengths.last().copied().unwrap_or(0),
                slowest: ended
                    .iter()
                    .take(slowest)
                    .map(|s| Slow {
                        node: s.node.to_string(),
                        start: s.start,
                        ms: s.end - s.start,
                    })
                    .collect(),
            })
        })
        .collect()
}

/// The `pct` percentile of sorted `lengths` by nearest rank: a length that was measured.
fn nearest_rank(lengths: &[Millis], pct: usize) -> Millis {
    let rank = (lengths.len() * pct).div_ceil(100).max(1);
    lengths.get(rank - 1).copied().unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use rota_core::NodeName;

    use super::*;

    fn segment(node: &str, kind: SegmentKind, start: Millis, end: Millis) -> Segment {
        Segment::new(NodeName::new(node).unwrap(), kind, start, end)
    }

    #[test]
    fn each_kind_gets_its_percentiles_and_slowest_nodes() {
        let mut segments: Vec<Segment> = (1..=100)
            .map(|i| segment(&format!("n{i}"), SegmentKind::Drain, 0, i * 1000))
            .collect();
        segments.push(segment("r", SegmentKind::Reboot, 0, 30_000));
        segments.push(Segment::open(
            NodeName::new("killed").unwrap(),
            SegmentKind::Reboot,
            0,
            900_000,
        ));
        let summary = summarize(&segments, 3);
        assert_eq!(summary.len(), 2, "only kinds with an ended step");
        let drain = &summary[0];
        assert_eq!(drain.kind, SegmentKind::Drain);
        assert_eq!(
            (drain.count, drain.p50_ms, drain.p99_ms, drain.max_ms),
            (100, 50_000, 99_000, 100_000)
        );
        let slowest: Vec<&str> = drain.slowest.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(slowest, ["n100", "n99", "n98"]);
        let reboot = &summary[1];
        assert_eq!(
            (reboot.count, reboot.max_ms),
            (1, 30_000),
            "an open step says nothing of its length"
        );
    }

    #[test]
    fn one_step_is_its_own_percentiles() {
        let summary = summarize(&[segment("a", SegmentKind::Verify, 10, 25)], 5);
        assert_eq!((summary[0].p50_ms, summary[0].p99_ms), (15, 15));
    }
}

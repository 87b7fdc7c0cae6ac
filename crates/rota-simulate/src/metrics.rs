//! The numbers of a rollout, computed from the store's records alone (not from the agents'
//! own counters), so that they check the agents rather than repeat them.

use std::collections::{BTreeMap, BTreeSet};

use rota_core::{HistoryEvent, NodeName};
use rota_store::{HistoryEntry, Millis};

/// The most nodes that were inside a maintenance window at once: a window opens at a node's
/// first `started` entry and closes at the entry that released its slot.
pub fn max_concurrent(history: &[HistoryEntry]) -> usize {
    let mut open = BTreeSet::new();
    let mut max = 0;
    for entry in history {
        if entry.event == HistoryEvent::Started {
            open.insert(entry.node.clone());
        }
        max = max.max(open.len());
        if entry.released {
            open.remove(&entry.node);
        }
    }
    max
}

/// The most windows open at once in each group (`group_of` a node's group; a node in none is
/// left out), and the most groups with a window open at once; windows as [`max_concurrent`]
/// counts them.
pub fn max_concurrent_by_group(
    history: &[HistoryEntry],
    group_of: &BTreeMap<NodeName, String>,
) -> (BTreeMap<String, usize>, usize) {
    let mut open: BTreeMap<&str, BTreeSet<&NodeName>> = BTreeMap::new();
    let mut peaks: BTreeMap<String, usize> = BTreeMap::new();
    let mut groups_at_once = 0;
    for entry in history {
        let Some(group) = group_of.get(&entry.node) else {
            continue;
        };
        let members = open.entry(group).or_default();
        if entry.event == HistoryEvent::Started {
            members.insert(&entry.node);
        }
        let peak = peaks.entry(group.clone()).or_insert(0);
        *peak = (*peak).max(members.len());
        groups_at_once = groups_at_once.max(open.values().filter(|m| !m.is_empty()).count());
        if entry.released
            && let Some(members) = open.get_mut(group.as_str())
        {
            members.remove(&entry.node);
        }
    }
    (peaks, groups_at_once)
}

/// Window openings, in time order (a node's first `started` while it has no window open).
pub fn window_opens(history: &[HistoryEntry]) -> Vec<Millis> {
    let mut open = BTreeSet::new();
    let mut opens = Vec::new();
    for entry in history {
        if entry.event == HistoryEvent::Started && open.insert(entry.node.clone()) {
            opens.push(entry.at);
        }
        if entry.released {
            open.remove(&entry.node);
        }
    }
    opens
}

/// How long each window was open: from its opening to the entry that released its slot, the
/// maintenance itself included. A window still open at the end is left out.
pub fn window_lengths(history: &[HistoryEntry]) -> Vec<Millis> {
    let mut open = BTreeMap::new();
    let mut lengths = Vec::new();
    for entry in history {
        if entry.event == HistoryEvent::Started {
            open.entry(&entry.node).or_insert(entry.at);
        }
        if entry.released
            && let Some(opened) = open.remove(&entry.node)
        {
            lengths.push(entry.at - opened);
        }
    }
    lengths
}

/// Slot handoffs: the i-th release lets the (k+i)-th window open, since only k can be open.
pub fn handoffs(history: &[HistoryEntry], concurrency: usize) -> Vec<Millis> {
    let opens = window_opens(history);
    let releases: Vec<Millis> = history
        .iter()
        .filter(|e| e.released)
        .map(|e| e.at)
        .collect();
    releases
        .iter()
        .zip(opens.iter().skip(concurrency))
        .map(|(released, opened)| opened - released)
        .collect()
}

/// The nearest-rank percentile `p` (0..=100) of `values`; 0 for no values.
pub fn percentile(values: &[Millis], p: u32) -> Millis {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (usize::try_from(p).unwrap_or(100) * sorted.len()).div_ceil(100);
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rota_core::{NodeName, Process};

    fn entry(id: i64, node: &str, event: HistoryEvent, at: Millis, released: bool) -> HistoryEntry {
        HistoryEntry {
            id,
            node: NodeName::new(node).expect("name"),
            process: Process::Reboot,
            event,
            at,
            cause: None,
            slot: Some(0),
            released,
        }
    }

    #[test]
    fn each_groups_windows_are_counted_apart_and_the_groups_out_together() {
        use HistoryEvent::{Finished, Started};
        let group_of: BTreeMap<NodeName, String> = [("a", "z0"), ("b", "z0"), ("c", "z1")]
            .into_iter()
            .map(|(n, g)| (NodeName::new(n).expect("name"), g.to_owned()))
            .collect();
        let history = vec![
            entry(1, "a", Started, 0, false),
            entry(2, "c", Started, 1, false),
            entry(3, "a", Finished, 2, true),
            entry(4, "b", Started, 3, false),
            entry(5, "c", Finished, 4, true),
            entry(6, "b", Finished, 5, true),
            // A node in no group is left out.
            entry(7, "x", Started, 6, false),
        ];
        let (peaks, together) = max_concurrent_by_group(&history, &group_of);
        assert_eq!(
            peaks,
            BTreeMap::from([("z0".to_owned(), 1), ("z1".to_owned(), 1)])
        );
        assert_eq!(together, 2);
        let overlapping = vec![
            entry(1, "a", Started, 0, false),
            entry(2, "b", Started, 1, false),
            entry(3, "a", Finished, 2, true),
        ];
        let (peaks, together) = max_concurrent_by_group(&overlapping, &group_of);
        assert_eq!(peaks.get("z0"), Some(&2));
        assert_eq!(together, 1);
    }

    #[test]
    fn overlapping_windows_are_counted_from_history() {
        use HistoryEvent::{Failed, Finished, Started};
        let history = vec![
            entry(1, "a", Started, 0, false),
            entry(2, "b", Started, 5, false),
            entry(3, "a", Finished, 10, true),
            entry(4, "c", Started, 12, false),
            // A failed maintenance keeps its slot: c is still out.
            entry(5, "c", Failed, 20, false),
            entry(6, "d", Started, 21, false),
            entry(7, "b", Finished, 30, true),
        ];
        assert_eq!(max_concurrent(&history), 3);
        assert_eq!(window_opens(&history), vec![0, 5, 12, 21]);
        assert_eq!(
            window_lengths(&history),
            vec![10, 25],
            "a's and b's windows; c's and d's are still open"
        );
        assert_eq!(
            handoffs(&history, 3),
            vec![11],
            "the first release lets the fourth window open"
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<Millis> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50);
        assert_eq!(percentile(&values, 99), 99);
        assert_eq!(percentile(&values, 100), 100);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}

//! A node's history beyond its RotaNode, pure: when the entries leave the RotaNode for the
//! node's next `RotaWindow` (see [`crate::window`]), what a writer does with a ring place
//! someone else wrote, and how readers merge the two.
//!
//! Every write of a RotaNode rewrites the whole object, and each one is sent to every watcher:
//! what the object holds is what every write of every window costs (KEP-589: small objects for
//! frequent writes). So a RotaNode holds only the entries of the window under way, with short
//! texts, and a write that ends a window (an entry that releases the slot), records a long
//! cause, or finds more than [`INLINE_ENTRIES`] entries first writes them all to ring place
//! `written % 50` and then, in the same compare-and-swap, removes them and counts the chunk in
//! `status.historyRing`. One more request per window; the RotaNode is written as often as before.
//!
//! The two writes are not one transaction, so the count in the RotaNode is the commit: readers
//! take a RotaWindow only if its `sequence` is below `historyRing.written`. A writer that dies
//! between the two, or loses its compare-and-swap, leaves a chunk nobody reads, which the next
//! chunk of that sequence overwrites. A writer that meets a chunk of its own sequence written
//! by someone else overwrites it only when that one was cut from an older generation of the
//! RotaNode than its own: its writer read a RotaNode that has changed since, so its
//! compare-and-swap can no longer succeed. Of the same generation, it cannot know which of the
//! two will commit, so it leaves the entries in the RotaNode for a later write to move.

use std::collections::BTreeMap;

use rota_core::NodeName;
use rota_store::{HistoryEntry, Millis, StepRecord};

use crate::crd::{HistoryRingStatus, HistoryStatus, RotaNodeStatus, STEP_LIMIT, StepStatus};
use crate::ids::{self, Stamp};
use crate::status;
use crate::window::{RING_SIZE, RotaWindowSpec};

/// More entries than this in a RotaNode move to the ring even before the window ends (a
/// window that many procedures join, each with its `started` and its outcome).
pub const INLINE_ENTRIES: usize = 4;
/// The longest text (a cause, a reason, a result) a RotaNode holds; a longer one is cut there,
/// and a history entry with a longer cause moves to the ring whole at once.
pub const INLINE_TEXT: usize = 160;

/// `text`, cut to [`INLINE_TEXT`] characters (the cut marked with `…`).
pub fn bounded(text: &str) -> String {
    if text.chars().count() <= INLINE_TEXT {
        return text.to_owned();
    }
    let end = text
        .char_indices()
        .nth(INLINE_TEXT - 1)
        .map_or(text.len(), |(i, _)| i);
    format!("{}…", &text[..end])
}

/// The chunk a write of `status` moves to the ring first, with its sequence: every entry, when
/// one releases the slot or has a long cause, or when there are too many.
pub fn due(status: &RotaNodeStatus) -> Option<(u64, &[HistoryStatus])> {
    let history = &status.history;
    let long = |h: &HistoryStatus| {
        h.cause
            .as_ref()
            .is_some_and(|c| c.chars().count() > INLINE_TEXT)
    };
    let due = history.len() > INLINE_ENTRIES || history.iter().any(|h| h.released || long(h));
    due.then(|| (status.history_ring.map_or(0, |r| r.written), &history[..]))
}

/// The chunk written: its entries leave the RotaNode, which counts it.
pub fn commit(status: &mut RotaNodeStatus) {
    let Some(last) = status.history.last() else {
        return;
    };
    let ring = status
        .history_ring
        .get_or_insert_with(HistoryRingStatus::default);
    ring.written += 1;
    ring.last_id = last.id;
    status.history.clear();
    status.steps.clear();
}

/// The stamp of the node's newest entry, in the RotaNode or moved to the ring: the next one's
/// id follows it.
pub fn last_stamp(status: &RotaNodeStatus) -> Option<Stamp> {
    match (status.history.last(), status.history_ring) {
        (Some(h), _) => Some(ids::stamp_of(h.id, h.at.0)),
        (None, Some(ring)) if ring.written > 0 => {
            Some(ids::stamp_of(ring.last_id, ids::at_of(ring.last_id)))
        }
        _ => None,
    }
}

/// When the node's newest entry happened, wherever it is.
pub fn last_entry_at(status: &RotaNodeStatus) -> Option<Millis> {
    last_stamp(status).map(|s| s.at)
}

/// Whether a writer whose chunk `sequence` was cut from generation `generation` of the RotaNode
/// with uid `owner` may overwrite `found`, a RotaWindow already at that ring place (see the
/// module docs).
pub fn may_overwrite(
    found: &RotaWindowSpec,
    found_owner: Option<&str>,
    owner: &str,
    sequence: u64,
    generation: i64,
) -> bool {
    found_owner != Some(owner)
        || found.sequence < sequence
        || (found.sequence == sequence && found.cut_at_generation < generation)
}

/// Where the ring of a RotaNode without `historyRing` stands, by its RotaWindows: a rota
/// from before the ring, which does not know the field, drops it when it writes the RotaNode
/// (an operator's older `rota unlock`, an agent during a rolling upgrade). Every chunk counts as
/// committed then; the next chunk follows the newest. But a node's first chunk whose writer
/// died (or lost its write of the RotaNode) before the RotaNode counted it also leaves a
/// RotaNode without the field: that chunk's entries are still in the RotaNode (`inline`), so a
/// newest chunk that shares an entry with it is not committed, and its place is the next.
/// `None` without any chunk.
pub fn recovered<'a>(
    windows: impl IntoIterator<Item = &'a RotaWindowSpec>,
    inline: &[HistoryStatus],
) -> Option<HistoryRingStatus> {
    let mut windows: Vec<&RotaWindowSpec> = windows.into_iter().collect();
    windows.sort_by_key(|w| w.sequence);
    let newest = windows.pop()?;
    let last_id = |w: &RotaWindowSpec| w.entries.iter().map(|h| h.id).max().unwrap_or(0);
    let uncommitted = newest
        .entries
        .iter()
        .any(|h| inline.iter().any(|i| i.id == h.id));
    Some(if uncommitted {
        HistoryRingStatus {
            written: newest.sequence,
            last_id: windows.last().map_or(0, |w| last_id(w)),
        }
    } else {
        HistoryRingStatus {
            written: newest.sequence + 1,
            last_id: last_id(newest),
        }
    })
}

/// Whether a RotaWindow of the node belongs to the history its RotaNode committed: below
/// `written`, within the last lap.
pub fn committed(spec: &RotaWindowSpec, ring: Option<HistoryRingStatus>) -> bool {
    let written = ring.map_or(0, |r| r.written);
    spec.sequence < written && spec.sequence + RING_SIZE >= written
}

/// The node's history: the committed RotaWindows' entries and the RotaNode's own, each once
/// (a chunk may still be in both), by id.
pub fn merged<'a>(
    node: &NodeName,
    status: &'a RotaNodeStatus,
    windows: impl IntoIterator<Item = &'a RotaWindowSpec> + Clone,
) -> Vec<HistoryEntry> {
    let mut entries = BTreeMap::new();
    let ring = status
        .history_ring
        .or_else(|| recovered(windows.clone(), &status.history));
    let chunks = windows.into_iter().filter(|w| committed(w, ring));
    for h in chunks.flat_map(|w| &w.entries).chain(&status.history) {
        entries
            .entry(h.id)
            .or_insert_with(|| status::history_entry(node, h));
    }
    entries.into_values().collect()
}

/// The node's steps: the committed RotaWindows' in the order of the ring, then the
/// RotaNode's own, each once (a chunk may still be in both).
pub fn merged_steps<'a>(
    node: &NodeName,
    status: &'a RotaNodeStatus,
    windows: impl IntoIterator<Item = &'a RotaWindowSpec> + Clone,
) -> Vec<StepRecord> {
    let ring = status
        .history_ring
        .or_else(|| recovered(windows.clone(), &status.history));
    let mut chunks: Vec<&RotaWindowSpec> =
        windows.into_iter().filter(|w| committed(w, ring)).collect();
    chunks.sort_by_key(|w| w.sequence);
    let mut steps: Vec<&StepStatus> = Vec::new();
    for step in chunks.iter().flat_map(|w| &w.steps).chain(&status.steps) {
        if !steps.iter().rev().take(STEP_LIMIT).any(|s| *s == step) {
            steps.push(step);
        }
    }
    steps
        .into_iter()
        .map(|s| StepRecord {
            node: node.clone(),
            state: s.state,
            at: s.at.0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rota_core::{HistoryEvent, Process};

    use super::*;
    use crate::crd::Timestamp;

    const T: Millis = 1_800_000_000_000;

    fn entry(seq: u32, released: bool, cause: Option<&str>) -> HistoryStatus {
        HistoryStatus {
            id: Stamp { at: T, seq }.id(5),
            process: Process::Reboot,
            event: HistoryEvent::Started,
            at: Timestamp(T),
            cause: cause.map(str::to_owned),
            slot: Some(0),
            released,
        }
    }

    fn window(sequence: u64, entries: Vec<HistoryStatus>) -> RotaWindowSpec {
        RotaWindowSpec {
            node: "a".into(),
            sequence,
            cut_at_generation: 1,
            entries,
            procedure_requests: Vec::new(),
            steps: Vec::new(),
        }
    }

    #[test]
    fn a_text_is_cut_at_the_limit_and_marked() {
        assert_eq!(bounded("short"), "short");
        let exact = "é".repeat(INLINE_TEXT);
        assert_eq!(bounded(&exact), exact);
        let long = "é".repeat(INLINE_TEXT + 1);
        let cut = bounded(&long);
        assert_eq!(cut.chars().count(), INLINE_TEXT);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn entries_move_when_the_window_ends_or_a_cause_is_long_or_they_are_many() {
        let mut status = RotaNodeStatus::default();
        status.history.push(entry(0, false, Some("short")));
        assert!(due(&status).is_none(), "a window under way stays");
        status.history.push(entry(1, true, None));
        assert_eq!(due(&status).map(|(s, e)| (s, e.len())), Some((0, 2)));
        status.history = vec![entry(0, false, Some(&"x".repeat(INLINE_TEXT + 1)))];
        assert!(due(&status).is_some(), "a long cause goes whole");
        status.history = (0..=INLINE_ENTRIES as u32)
            .map(|i| entry(i, false, None))
            .collect();
        assert!(due(&status).is_some(), "too many");
    }

    #[test]
    fn a_commit_empties_the_history_and_the_next_id_follows_the_last() {
        let mut status = RotaNodeStatus {
            history: vec![entry(0, false, None), entry(7, true, None)],
            ..RotaNodeStatus::default()
        };
        let last = status.history[1].id;
        commit(&mut status);
        assert!(status.history.is_empty());
        assert_eq!(
            status.history_ring,
            Some(HistoryRingStatus {
                written: 1,
                last_id: last
            })
        );
        assert_eq!(last_stamp(&status), Some(Stamp { at: T, seq: 7 }));
        assert_eq!(due(&status), None);
    }

    #[test]
    fn readers_take_committed_chunks_once_and_leave_uncommitted_ones_out() {
        let node = NodeName::new("a").expect("a name");
        // Chunk 0 was committed, but one of its entries is still in the RotaNode too; chunk 1
        // was written by a writer that never committed it.
        let status = RotaNodeStatus {
            history_ring: Some(HistoryRingStatus {
                written: 1,
                last_id: 0,
            }),
            history: vec![entry(1, true, None), entry(2, false, None)],
            ..RotaNodeStatus::default()
        };
        let chunks = [
            window(0, vec![entry(0, false, None), entry(1, true, None)]),
            window(1, vec![entry(2, false, None), entry(3, true, None)]),
        ];
        let ids: Vec<i64> = merged(&node, &status, &chunks)
            .iter()
            .map(|e| e.id)
            .collect();
        let expected: Vec<i64> = (0..3).map(|s| entry(s, false, None).id).collect();
        assert_eq!(ids, expected);
    }

    #[test]
    fn a_ring_count_dropped_by_an_older_rota_is_recovered_from_the_chunks() {
        let node = NodeName::new("a").expect("a name");
        let chunks = [
            window(7, vec![entry(3, false, None), entry(4, true, None)]),
            window(6, vec![entry(1, false, None), entry(2, true, None)]),
        ];
        assert_eq!(
            recovered(&chunks, &[]),
            Some(HistoryRingStatus {
                written: 8,
                last_id: entry(4, true, None).id
            })
        );
        let status = RotaNodeStatus {
            history: vec![entry(5, true, None)],
            ..RotaNodeStatus::default()
        };
        assert_eq!(merged(&node, &status, &chunks).len(), 5);
        assert_eq!(recovered(&[], &[]), None);
    }

    /// The soak on Kubernetes found this: a node's first chunk written, then the agent killed
    /// (or its RotaNode write lost) before the RotaNode counted it; the retry's entries went to
    /// a second chunk, both read as committed, and the node had two finished reboots.
    #[test]
    fn a_first_chunk_the_rota_node_never_counted_is_not_read_and_its_place_is_reused() {
        let node = NodeName::new("a").expect("a name");
        let started = entry(1, false, None);
        let lost = HistoryStatus {
            event: HistoryEvent::Finished,
            ..entry(2, true, None)
        };
        let retried = HistoryStatus {
            event: HistoryEvent::Finished,
            ..entry(3, true, None)
        };
        let chunks = [window(0, vec![started.clone(), lost])];
        let status = RotaNodeStatus {
            history: vec![started.clone(), retried.clone()],
            ..RotaNodeStatus::default()
        };
        assert_eq!(
            recovered(&chunks, &status.history),
            Some(HistoryRingStatus {
                written: 0,
                last_id: 0
            })
        );
        let ids: Vec<i64> = merged(&node, &status, &chunks)
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, vec![started.id, retried.id]);
    }

    #[test]
    fn a_ring_place_is_overwritten_only_when_its_writer_cannot_commit() {
        let found = RotaWindowSpec {
            cut_at_generation: 7,
            ..window(60, Vec::new())
        };
        let mine = Some("uid");
        assert!(may_overwrite(&found, mine, "uid", 110, 3), "the lap before");
        assert!(
            may_overwrite(&found, mine, "uid", 60, 8),
            "cut from an older RotaNode"
        );
        assert!(
            !may_overwrite(&found, mine, "uid", 60, 7),
            "either may commit"
        );
        assert!(
            !may_overwrite(&found, mine, "uid", 10, 9),
            "this writer is behind"
        );
        assert!(
            may_overwrite(&found, Some("gone"), "uid", 10, 1),
            "a deleted RotaNode's"
        );
    }
}

//! A timeline from the store's history.
//!
//! History records, per request, when work started and how it ended, and whether that event
//! gave the slot back. That gives each node's maintenance windows (slot taken to slot
//! released) but not the drain, maintenance, reboot and verify steps inside them, so each
//! window becomes one [`SegmentKind::Window`] segment; failures, cancellations and windows
//! postponed because the maintenance hours ended become markers. A window with no release yet
//! is open-ended. A failure that kept the slot (fail closed) is not drawn as a stretch of its
//! own: an operator's retry leaves no history entry, so its end is not known.

use std::collections::BTreeMap;

use rota_core::{HistoryEvent, NodeName};
use rota_store::HistoryEntry;

use crate::{Marker, MarkerKind, Millis, Segment, SegmentKind, Timeline};

/// What is known of one node while walking its history.
#[derive(Default)]
struct Lane {
    /// When its current window opened.
    open: Option<Millis>,
    /// Whether a window of it has been seen opening or closing.
    seen_window: bool,
}

/// The timeline of `entries`, in any order. A window still open at the last entry is drawn up
/// to `until` (usually now). A window whose start lies before the first entry (a history cut
/// by a time filter) is drawn from the first entry's time; a second release of the same
/// window (several requests finishing together) adds nothing.
pub fn from_history(entries: &[HistoryEntry], until: Millis) -> Timeline {
    let mut sorted: Vec<&HistoryEntry> = entries.iter().collect();
    sorted.sort_by_key(|e| (e.at, e.id));
    let Some(earliest) = sorted.first().map(|e| e.at) else {
        return Timeline::default();
    };

    let mut lanes: BTreeMap<&NodeName, Lane> = BTreeMap::new();
    let mut segments = Vec::new();
    let mut markers = Vec::new();
    for entry in sorted {
        let lane = lanes.entry(&entry.node).or_default();
        if entry.event == HistoryEvent::Started && lane.open.is_none() {
            lane.open = Some(entry.at);
            lane.seen_window = true;
        }
        let marker = match entry.event {
            HistoryEvent::Failed => Some(MarkerKind::Failed),
            HistoryEvent::Canceled => Some(MarkerKind::Canceled),
            HistoryEvent::Postponed => Some(MarkerKind::Postponed),
            HistoryEvent::Started | HistoryEvent::Finished | HistoryEvent::Released => None,
        };
        if let Some(kind) = marker {
            markers.push(Marker {
                node: entry.node.clone(),
                kind,
                at: entry.at,
                cause: entry.cause.clone(),
            });
        }
        if entry.released {
            let start = match lane.open.take() {
                Some(start) => Some(start),
                None if !lane.seen_window => Some(earliest),
                None => None,
            };
            if let Some(start) = start {
                segments.push(Segment::new(
                    entry.node.clone(),
                    SegmentKind::Window,
                    start,
                    entry.at,
                ));
            }
            lane.seen_window = true;
        }
    }
    for (node, lane) in lanes {
        if let Some(start) = lane.open {
            segments.push(Segment::open(
                node.clone(),
                SegmentKind::Window,
                start,
                until,
            ));
        }
    }
    // Every window here ends at or after its start (entries are sorted, and an open one ends
    // no earlier than it began), so the check cannot fail.
    Timeline::new(segments, markers).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use rota_core::Process;

    fn entry(id: i64, node: &str, event: HistoryEvent, at: Millis, released: bool) -> HistoryEntry {
        HistoryEntry {
            id,
            node: NodeName::new(node).unwrap(),
            process: Process::Reboot,
            event,
            at,
            cause: (event == HistoryEvent::Failed).then(|| format!("cause {id}")),
            slot: Some(0),
            released,
        }
    }

    fn spans(timeline: &Timeline) -> Vec<(&str, Millis, Millis)> {
        timeline
            .segments()
            .iter()
            .map(|s| {
                assert_eq!(s.kind, SegmentKind::Window);
                (s.node.as_str(), s.start, s.end)
            })
            .collect()
    }

    fn open(timeline: &Timeline) -> Vec<(&str, SegmentKind)> {
        timeline
            .segments()
            .iter()
            .filter(|s| s.open)
            .map(|s| (s.node.as_str(), s.kind))
            .collect()
    }

    fn marks(timeline: &Timeline) -> Vec<(&str, MarkerKind, Millis, Option<&str>)> {
        timeline
            .markers()
            .iter()
            .map(|m| (m.node.as_str(), m.kind, m.at, m.cause.as_deref()))
            .collect()
    }

    use HistoryEvent::{Canceled, Failed, Finished, Started};

    #[test]
    fn each_window_runs_from_start_to_release() {
        let entries = [
            entry(4, "b", Finished, 400, true),
            entry(1, "a", Started, 100, false),
            entry(2, "a", Finished, 200, true),
            entry(3, "b", Started, 200, false),
            entry(5, "a", Started, 500, false),
            // A request that joins the open window does not split it.
            entry(6, "a", Started, 550, false),
            entry(7, "a", Finished, 600, true),
            entry(8, "a", Finished, 600, true),
        ];
        let timeline = from_history(&entries, 1000);
        assert_eq!(
            spans(&timeline),
            [("a", 100, 200), ("b", 200, 400), ("a", 500, 600)]
        );
        assert!(timeline.markers().is_empty());
    }

    #[test]
    fn failures_are_markers_and_a_kept_slot_keeps_the_window_open() {
        let entries = [
            entry(1, "a", Started, 100, false),
            // A drain failure gives the slot back.
            entry(2, "a", Failed, 150, true),
            entry(3, "a", Started, 300, false),
            // A maintenance failure keeps it (fail closed) until an operator cancels.
            entry(4, "a", Failed, 350, false),
            entry(5, "a", Canceled, 900, true),
            entry(6, "b", Started, 800, false),
        ];
        let timeline = from_history(&entries, 1000);
        assert_eq!(
            spans(&timeline),
            [("a", 100, 150), ("a", 300, 900), ("b", 800, 1000)]
        );
        assert_eq!(open(&timeline), [("b", SegmentKind::Window)]);
        assert_eq!(
            marks(&timeline),
            [
                ("a", MarkerKind::Failed, 150, Some("cause 2")),
                ("a", MarkerKind::Failed, 350, Some("cause 4")),
                ("a", MarkerKind::Canceled, 900, None),
            ]
        );
    }

    #[test]
    fn a_postponed_window_ends_at_its_release_with_a_marker() {
        let mut postponed = entry(2, "a", HistoryEvent::Postponed, 150, true);
        postponed.cause = Some("the maintenance hours ended".into());
        let entries = [
            entry(1, "a", Started, 100, false),
            postponed,
            entry(3, "a", Started, 300, false),
            entry(4, "a", Finished, 400, true),
        ];
        let timeline = from_history(&entries, 1000);
        assert_eq!(spans(&timeline), [("a", 100, 150), ("a", 300, 400)]);
        assert_eq!(
            marks(&timeline),
            [(
                "a",
                MarkerKind::Postponed,
                150,
                Some("the maintenance hours ended")
            )]
        );
    }

    #[test]
    fn a_history_cut_by_a_filter_starts_its_first_windows_at_its_first_entry() {
        let entries = [
            entry(1, "a", Started, 100, false),
            entry(2, "b", Failed, 120, false),
            entry(3, "b", Finished, 130, true),
            entry(4, "a", Finished, 200, true),
            // Released twice: the second adds nothing.
            entry(5, "a", Canceled, 200, true),
        ];
        let timeline = from_history(&entries, 1000);
        assert_eq!(spans(&timeline), [("b", 100, 130), ("a", 100, 200)]);
    }

    #[test]
    fn an_open_window_ends_no_earlier_than_it_starts() {
        let timeline = from_history(&[entry(1, "a", Started, 500, false)], 100);
        assert_eq!(spans(&timeline), [("a", 500, 500)]);
        assert_eq!(open(&timeline), [("a", SegmentKind::Window)]);
        assert_eq!(from_history(&[], 100), Timeline::default());
    }
}

//! The rendered SVG: a snapshot of a whole rollout, and checks that it is well-formed XML with
//! one lane per node.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use rota_core::{HistoryEvent, NodeName, Process};
use rota_store::HistoryEntry;
use rota_timeline::{
    Marker, MarkerKind, Millis, Segment, SegmentKind, Timeline, from_history, render_svg,
};

/// 2026-11-29T10:00:00Z.
const T0: Millis = 1_795_946_400_000;
const MIN: Millis = 60_000;

fn node(name: &str) -> NodeName {
    NodeName::new(name).unwrap()
}

fn segment(name: &str, kind: SegmentKind, start: Millis, end: Millis) -> Segment {
    Segment {
        node: node(name),
        kind,
        start: T0 + start * MIN,
        end: T0 + end * MIN,
    }
}

/// Three nodes rolling through one slot: the first succeeds, the second fails verification and
/// is canceled by an operator, the third waits for the slot and then succeeds.
fn rollout() -> Timeline {
    use SegmentKind::{Drain, Maintenance, Reboot, Verify, Wait};
    Timeline::new(
        vec![
            segment("worker-1", Drain, 0, 4),
            segment("worker-1", Maintenance, 4, 10),
            segment("worker-1", Reboot, 10, 14),
            segment("worker-1", Verify, 14, 16),
            segment("worker-2", Wait, 0, 16),
            segment("worker-2", Drain, 16, 19),
            segment("worker-2", Reboot, 19, 24),
            segment("worker-2", Verify, 24, 34),
            segment("worker-3", Wait, 1, 50),
            segment("worker-3", Drain, 50, 52),
            segment("worker-3", Maintenance, 52, 60),
            segment("worker-3", Verify, 60, 61),
        ],
        vec![
            Marker {
                node: node("worker-2"),
                kind: MarkerKind::Failed,
                at: T0 + 34 * MIN,
                cause: Some("node not Ready after 10m <kubelet down> & \"unreachable\"".to_owned()),
            },
            Marker {
                node: node("worker-2"),
                kind: MarkerKind::Canceled,
                at: T0 + 48 * MIN,
                cause: Some("operator unlocked".to_owned()),
            },
        ],
    )
    .unwrap()
}

fn history_entry(
    id: i64,
    name: &str,
    event: HistoryEvent,
    minute: Millis,
    released: bool,
) -> HistoryEntry {
    HistoryEntry {
        id,
        node: node(name),
        process: Process::Reboot,
        event,
        at: T0 + minute * MIN,
        cause: (event == HistoryEvent::Failed).then(|| "drain timed out".to_owned()),
        slot: Some(0),
        released,
    }
}

fn from_store_history() -> Timeline {
    use HistoryEvent::{Failed, Finished, Started};
    from_history(
        &[
            history_entry(1, "node-a", Started, 0, false),
            history_entry(2, "node-a", Finished, 95, true),
            history_entry(3, "node-b", Started, 95, false),
            history_entry(4, "node-b", Failed, 130, true),
            history_entry(5, "node-c", Started, 130, false),
            history_entry(6, "node-c", Finished, 250, true),
            history_entry(7, "node-b", Started, 250, false),
        ],
        T0 + 300 * MIN,
    )
}

/// Parses `svg` as XML and returns each lane's node name, in order.
fn lanes(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    root.descendants()
        .filter(|n| n.attribute("class") == Some("lane"))
        .map(|n| n.attribute("data-node").unwrap().to_owned())
        .collect()
}

#[test]
fn a_rollout_snapshot() {
    insta::assert_snapshot!(render_svg(&rollout()));
}

#[test]
fn a_history_snapshot() {
    insta::assert_snapshot!(render_svg(&from_store_history()));
}

#[test]
fn output_is_xml_with_one_lane_per_node() {
    assert_eq!(
        lanes(&render_svg(&rollout())),
        ["worker-1", "worker-2", "worker-3"]
    );
    assert_eq!(
        lanes(&render_svg(&from_store_history())),
        ["node-a", "node-b", "node-c"]
    );
    assert!(lanes(&render_svg(&Timeline::default())).is_empty());
}

#[test]
fn each_lane_holds_its_own_segments_and_markers() {
    let svg = render_svg(&rollout());
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let lane = doc
        .descendants()
        .find(|n| n.attribute("data-node") == Some("worker-2"))
        .unwrap();
    let classes: Vec<&str> = lane
        .children()
        .filter_map(|n| n.attribute("class"))
        .filter(|c| c.starts_with("segment") || c.starts_with("marker"))
        .collect();
    assert_eq!(
        classes,
        [
            "segment wait",
            "segment drain",
            "segment reboot",
            "segment verify",
            "marker failed",
            "marker canceled"
        ]
    );
    let failed = lane
        .descendants()
        .find(|n| n.attribute("class") == Some("marker failed"))
        .unwrap();
    let title = failed.first_element_child().unwrap().text().unwrap();
    assert_eq!(
        title,
        "failed at 2026-11-29 10:34:00: node not Ready after 10m <kubelet down> & \"unreachable\""
    );
}

#[test]
fn segments_keep_their_order_in_time_along_the_axis() {
    let svg = render_svg(&rollout());
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let x = |class: &str, lane: &str| -> f64 {
        doc.descendants()
            .find(|n| n.attribute("data-node") == Some(lane))
            .unwrap()
            .children()
            .find(|n| n.attribute("class") == Some(class))
            .unwrap()
            .attribute("x")
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(x("segment drain", "worker-1") < x("segment drain", "worker-2"));
    assert!(x("segment drain", "worker-2") < x("segment drain", "worker-3"));
    assert!(x("segment maintenance", "worker-1") < x("segment reboot", "worker-1"));
}

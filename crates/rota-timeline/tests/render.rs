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
    Segment::new(node(name), kind, T0 + start * MIN, T0 + end * MIN)
}

/// Four nodes rolling through two slots: the first succeeds; the second fails verification,
/// holds its slot and is canceled by an operator; the third waits for a slot and then
/// succeeds; the fourth is postponed when the maintenance hours end, and its agent is killed
/// while rebooting in its next window.
fn rollout() -> Timeline {
    use SegmentKind::{Drain, Failed, Maintenance, Reboot, Verify, Wait};
    Timeline::new(
        vec![
            segment("worker-2", Failed, 34, 48),
            segment("worker-4", Wait, 2, 20),
            segment("worker-4", Drain, 20, 22),
            segment("worker-4", Wait, 22, 40),
            segment("worker-4", Drain, 40, 41),
            Segment::open(node("worker-4"), Reboot, T0 + 41 * MIN, T0 + 61 * MIN),
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
            Marker {
                node: node("worker-4"),
                kind: MarkerKind::Postponed,
                at: T0 + 22 * MIN,
                cause: Some("the maintenance hours ended before the reboot".to_owned()),
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
        ["worker-1", "worker-2", "worker-4", "worker-3"],
        "in order of the slot taken: worker-3 queued first, worker-4 drained first"
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
            "segment failed",
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
        "worker-2: failed at 2026-11-29 10:34:00: node not Ready after 10m <kubelet down> & \"unreachable\""
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

fn history_at(
    id: i64,
    name: &str,
    event: HistoryEvent,
    at: Millis,
    released: bool,
) -> HistoryEntry {
    HistoryEntry {
        at: T0 + at,
        ..history_entry(id, name, event, 0, released)
    }
}

/// The x and width of each segment of `class` in `lane`.
fn bars(svg: &str, lane: &str, class: &str) -> Vec<(f64, f64)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let number = |n: roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    doc.descendants()
        .find(|n| n.attribute("data-node") == Some(lane))
        .unwrap()
        .children()
        .filter(|n| n.attribute("class") == Some(class))
        .map(|n| (number(n, "x"), number(n, "width")))
        .collect()
}

/// The axis's tick labels.
fn tick_labels(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .find(|n| n.attribute("class") == Some("axis"))
        .unwrap()
        .children()
        .filter(|n| n.has_tag_name("text") && n.attribute("class").is_none())
        .filter_map(|n| n.text().map(str::to_owned))
        .filter(|t| t != "UTC")
        .collect()
}

#[test]
fn a_four_second_rollout_fills_the_axis() {
    use HistoryEvent::{Finished, Started};
    // Eight nodes, two slots, half-second windows: about two seconds in all.
    let mut entries = Vec::new();
    for i in 0..8_i64 {
        let start = i / 2 * 520;
        let name = format!("sim-{i}");
        entries.push(history_at(2 * i, &name, Started, start, false));
        entries.push(history_at(2 * i + 1, &name, Finished, start + 500, true));
    }
    let svg = render_svg(&from_history(&entries, T0 + 60 * MIN));
    // Each half-second window is a bar of about a quarter of the 900-pixel axis.
    let (_, width) = bars(&svg, "sim-0", "segment window")[0];
    assert!(width > 180.0, "a 500 ms window is {width} px wide");
    let labels = tick_labels(&svg);
    assert!(
        labels.len() >= 4 && labels.iter().all(|l| l.starts_with("10:00:0")),
        "ticks of a fraction of a second: {labels:?}"
    );
    assert!(labels.iter().any(|l| l.contains('.')), "{labels:?}");
    // The strip shows both slots in use.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let strip = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("slots"))
        .unwrap();
    assert_eq!(strip.attribute("data-most"), Some("2"));
}

#[test]
fn an_agent_killed_mid_window_draws_what_is_known_and_marks_the_gap() {
    use HistoryEvent::{Finished, Started};
    let entries = [
        history_entry(1, "node-a", Started, 0, false),
        history_entry(2, "node-a", Finished, 10, true),
        // Killed: started, and nothing after.
        history_entry(3, "node-b", Started, 10, false),
    ];
    let svg = render_svg(&from_history(&entries, T0 + 30 * MIN));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let lane = |name: &str| {
        doc.descendants()
            .find(|n| n.attribute("data-node") == Some(name))
            .unwrap()
    };
    let open_end = |name: &str| {
        lane(name)
            .children()
            .filter(|n| n.attribute("class") == Some("open-end"))
            .count()
    };
    assert_eq!(open_end("node-a"), 0);
    assert_eq!(open_end("node-b"), 1);
    let open = bars(&svg, "node-b", "segment window open");
    assert_eq!(open.len(), 1, "{svg}");
    // Open up to the end of what is drawn (30 minutes of a 30-minute axis, less its margin).
    let closed = bars(&svg, "node-a", "segment window")[0];
    assert!(
        (open[0].1 - 2.0 * closed.1).abs() < 1.0,
        "{open:?} {closed:?}"
    );
}

#[test]
fn a_large_fleet_gets_thin_lanes_in_order_of_their_start() {
    use HistoryEvent::{Finished, Started};
    let mut entries = Vec::new();
    for i in 0..500_i64 {
        // Started in the reverse order of their names.
        let name = format!("node-{:03}", 499 - i);
        entries.push(history_at(2 * i, &name, Started, i * 1000, false));
        entries.push(history_at(
            2 * i + 1,
            &name,
            Finished,
            i * 1000 + 5000,
            true,
        ));
    }
    let svg = render_svg(&from_history(&entries, T0));
    let order = lanes(&svg);
    assert_eq!(order.len(), 500);
    assert_eq!(order[0], "node-499");
    assert_eq!(order[499], "node-000");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let height: f64 = doc
        .root_element()
        .attribute("height")
        .unwrap()
        .parse()
        .unwrap();
    assert!(height < 500.0 * 8.0 + 300.0, "{height} px tall");
    // Names on every other lane only, so they do not overlap.
    let names = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("node"))
        .count();
    assert_eq!(names, 250);
}

#[test]
fn steps_are_drawn_over_the_window_history_gives() {
    use HistoryEvent::{Finished, Started};
    use rota_core::NodeState::{Draining, Idle, Queued, Rebooting, Verifying};
    let a = node("node-a");
    let windows = from_history(
        &[
            history_entry(1, "node-a", Started, 1, false),
            history_entry(2, "node-a", Finished, 10, true),
            // A later window whose steps are not known (no longer kept, say).
            history_entry(3, "node-a", Started, 12, false),
            history_entry(4, "node-a", Finished, 15, true),
        ],
        T0 + 20 * MIN,
    );
    let steps = rota_timeline::from_steps(
        [
            (&a, Queued, T0),
            (&a, Draining, T0 + MIN),
            (&a, Rebooting, T0 + 3 * MIN),
            (&a, Verifying, T0 + 8 * MIN),
            (&a, Idle, T0 + 10 * MIN),
        ],
        T0 + 20 * MIN,
    );
    let svg = render_svg(&windows.merged(steps));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let classes: Vec<&str> = doc
        .descendants()
        .find(|n| n.attribute("data-node") == Some("node-a"))
        .unwrap()
        .children()
        .filter_map(|n| n.attribute("class"))
        .filter(|c| c.starts_with("segment"))
        .collect();
    assert_eq!(
        classes,
        [
            "segment window",
            "segment wait",
            "segment drain",
            "segment reboot",
            "segment verify"
        ],
        "the window with steps is drawn as its steps; the other stays one bar"
    );
}

#[test]
fn the_html_page_holds_everything_it_shows() {
    let html = rota_timeline::render_html(&rollout(), "rota <rollout>");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>rota &lt;rollout&gt;</title>"));
    // Nothing is fetched: no scripts, stylesheets, images or fonts from elsewhere, and a
    // policy that would refuse them.
    for fetch in ["<script", "<link", "<img", "src=", "@import", "url(http"] {
        assert!(!html.contains(fetch), "the page has {fetch}");
    }
    let addresses: Vec<&str> = html
        .match_indices("http")
        .map(|(i, _)| &html[i..i + 30])
        .collect();
    assert!(
        addresses
            .iter()
            .all(|a| a.starts_with("http://www.w3.org/2000/svg") || a.starts_with("http-equiv")),
        "{addresses:?}"
    );
    assert!(html.contains("default-src 'none'"));
    // The timeline inline, a row per segment and one per event with its cause.
    assert_eq!(html.matches("<svg").count(), 1);
    assert_eq!(html.matches(r#"<tr class="drain">"#).count(), 5);
    assert!(
        html.contains(
            "node not Ready after 10m &lt;kubelet down&gt; &amp; &quot;unreachable&quot;"
        )
    );
    assert!(
        html.contains(r#"<td class="duration">49m 0s</td>"#),
        "worker-3's wait"
    );
}

#[test]
fn absurd_times_from_a_damaged_store_draw_without_a_panic() {
    use HistoryEvent::{Finished, Started};
    for (a, b) in [
        (Millis::MIN, Millis::MAX),
        (0, Millis::MAX),
        (-5, -5),
        (T0, T0),
    ] {
        let entries = [
            HistoryEntry {
                at: a,
                ..history_entry(1, "node-a", Started, 0, false)
            },
            HistoryEntry {
                at: b,
                ..history_entry(2, "node-a", Finished, 0, true)
            },
            HistoryEntry {
                at: b,
                ..history_entry(3, "node-b", Started, 0, false)
            },
        ];
        let timeline = from_history(&entries, b);
        assert_eq!(lanes(&render_svg(&timeline)), ["node-a", "node-b"]);
        assert!(rota_timeline::render_html(&timeline, "t").contains("node-b"));
    }
}

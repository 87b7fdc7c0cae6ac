//! The simulator end to end: real agents, real SQLite, real inotify; only reboots are simulated.

mod common;

use common::options;
use rota_simulate::{Options, StoreChoice, Zones, run};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reboots_once_and_never_more_than_k_at_once() {
    let summary = run(
        options(StoreChoice::Temporary, 7, 2),
        &CancellationToken::new(),
        |_, _| {},
    )
    .await
    .expect("simulation runs");
    assert_eq!(summary.completed, 7, "{summary:?}");
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert_eq!(summary.reboots, 7, "one reboot per node: {summary:?}");
    assert!(summary.max_concurrent <= 2, "{summary:?}");
    assert_eq!(
        summary.max_concurrent, 2,
        "slots are used in parallel: {summary:?}"
    );
    assert!(
        summary.ideal_s > 0.0 && summary.makespan_s >= summary.ideal_s,
        "{summary:?}"
    );
    // Every window holds a whole simulated reboot, and the first opens within the rollout.
    assert!(
        summary.window_p50_ms >= 300 && summary.window_p99_ms >= summary.window_p50_ms,
        "{summary:?}"
    );
    assert!(
        (summary.first_window_ms as f64) < summary.makespan_s * 1000.0,
        "{summary:?}"
    );
}

#[tokio::test]
async fn zero_nodes_or_zero_concurrency_is_refused() {
    for (nodes, concurrency) in [(0, 1), (3, 0)] {
        let err = run(
            options(StoreChoice::Temporary, nodes, concurrency),
            &CancellationToken::new(),
            |_, _| {},
        )
        .await
        .expect_err("refused");
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}

fn zoned(nodes: usize, concurrency: u32, zones: u32, rules: &str) -> Options {
    Options {
        zones: Some(Zones {
            count: zones,
            rules: rules.parse().expect("rules"),
        }),
        ..options(StoreChoice::Temporary, nodes, concurrency)
    }
}

/// Each zone's limit and the fleet's concurrency hold at every instant of the store's
/// history, and both are used: zones of three nodes, one out per zone, three zones beside each
/// other under a concurrency of four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_zone_keeps_its_limit_and_the_fleet_its_concurrency() {
    let summary = run(zoned(9, 4, 3, "*=1"), &CancellationToken::new(), |_, _| {})
        .await
        .expect("simulation runs");
    assert_eq!((summary.completed, summary.failed), (9, 0), "{summary:?}");
    let zones = summary.zones.as_ref().expect("the zones' summary");
    assert_eq!(zones.rules, "*=1");
    assert_eq!(
        zones.max_concurrent.values().copied().collect::<Vec<_>>(),
        [1, 1, 1],
        "one node out per zone, in each zone: {summary:?}"
    );
    assert_eq!(summary.max_concurrent, 3, "{summary:?}");
    assert_eq!(zones.max_zones_at_once, 3, "{summary:?}");
    // Three rounds, each zone's three nodes one after another.
    assert!((summary.ideal_s - 0.9).abs() < 1e-9, "{summary:?}");
}

/// Zones in turn: never two zones out at once, and each zone as wide as the concurrency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_in_turn_never_overlap() {
    let summary = run(
        zoned(6, 2, 3, "in-turn"),
        &CancellationToken::new(),
        |_, _| {},
    )
    .await
    .expect("simulation runs");
    assert_eq!((summary.completed, summary.failed), (6, 0), "{summary:?}");
    let zones = summary.zones.as_ref().expect("the zones' summary");
    assert_eq!(zones.max_zones_at_once, 1, "{summary:?}");
    assert_eq!(summary.max_concurrent, 2, "{summary:?}");
}

#[tokio::test]
async fn zones_that_cannot_be_kept_are_refused_naming_the_flag() {
    let cases = [
        (
            zoned(6, 2, 3, "*=3"),
            "--group-limit *=3 is above the concurrency of 2",
        ),
        (zoned(2, 2, 3, ""), "--zones 3: more zones than the 2 nodes"),
        (zoned(6, 2, 3, "zone-1=0"), "holds a zone back for ever"),
    ];
    for (options, refusal) in cases {
        let err = run(options, &CancellationToken::new(), |_, _| {})
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(refusal), "{err}");
    }
}

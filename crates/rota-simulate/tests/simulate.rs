//! The simulator end to end: real agents, real SQLite, real inotify; only reboots are simulated.

use std::time::Duration;

use rota_simulate::{Options, StoreChoice, run};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reboots_once_and_never_more_than_k_at_once() {
    let summary = run(
        Options {
            nodes: 7,
            concurrency: 2,
            maintenance_time: Duration::from_millis(300),
            store: StoreChoice::Temporary,
            session_ttl: None,
            handle_per_agent: false,
            idle: Duration::ZERO,
            etcd_metrics: None,
            plan: false,
            batches: None,
        },
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
            Options {
                nodes,
                concurrency,
                maintenance_time: Duration::from_millis(10),
                store: StoreChoice::Temporary,
                session_ttl: None,
                handle_per_agent: false,
                idle: Duration::ZERO,
                etcd_metrics: None,
                plan: false,
                batches: None,
            },
            &CancellationToken::new(),
            |_, _| {},
        )
        .await
        .expect_err("refused");
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}

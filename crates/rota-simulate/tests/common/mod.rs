//! What the simulator's tests of disrupted rollouts check afterwards, and the options of a run.
#![allow(dead_code, reason = "each test binary uses a part")]

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use rota_simulate::{Options, StoreChoice, Summary, run};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Runs the rollout of `options` with `disrupt` fed its progress (the count of finished
/// nodes, at every look of the harness); returns the summary and what `disrupt` returned.
pub async fn disrupted_rollout<T, Fut>(
    options: Options,
    disrupt: impl FnOnce(mpsc::UnboundedReceiver<usize>) -> Fut,
) -> (Summary, T)
where
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (done_tx, done) = mpsc::unbounded_channel();
    let disruptions = tokio::spawn(disrupt(done));
    let summary = run(options, &CancellationToken::new(), move |completed, _| {
        let _ = done_tx.send(completed);
    })
    .await
    .expect("the rollout completes");
    (summary, disruptions.await.expect("the disruptions"))
}

/// Every node rebooted exactly once and none failed, never more than `concurrency` at once.
pub fn assert_clean_rollout(summary: &Summary, nodes: usize, concurrency: usize) {
    assert_eq!(
        (summary.completed, summary.failed),
        (nodes, 0),
        "{summary:?}"
    );
    assert_eq!(
        usize::try_from(summary.reboots).ok(),
        Some(nodes),
        "one reboot per node: {summary:?}"
    );
    assert!(summary.max_concurrent <= concurrency, "{summary:?}");
}

/// Both disruptions happened while nodes were still to go, and each hit something (connections
/// ended or refused).
pub fn assert_mid_rollout<T: Debug + Default + PartialOrd>(done: &[(usize, T)], nodes: usize) {
    assert_eq!(done.len(), 2, "both disruptions happened: {done:?}");
    assert!(
        done.iter()
            .all(|(completed, hit)| *completed < nodes && *hit > T::default()),
        "each came mid-rollout and hit connections: {done:?}"
    );
}

/// A run of `nodes` agents on `store`, `concurrency` of them at once, with reboots of 300 ms and
/// the rest as `rota simulate` leaves it: a test sets what it is about beside it.
pub fn options(store: StoreChoice, nodes: usize, concurrency: u32) -> Options {
    Options {
        nodes,
        concurrency,
        maintenance_time: Duration::from_millis(300),
        store,
        session_ttl: None,
        handle_per_agent: false,
        idle: Duration::ZERO,
        etcd_metrics: None,
        plan: false,
        batches: None,
        zones: None,
    }
}

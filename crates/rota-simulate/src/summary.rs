//! The end of a run: how far the rollout got, read from the store, and the summary of its
//! numbers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rota_core::{HistoryEvent, NodeName, NodeState};
use rota_store::{HistoryFilter, Millis, NodeRecord, Store, StoreExt};

use crate::counters::Counted;
use crate::{Fleet, Options, Result, Summary, TrafficSummary, ZonesSummary, metrics};

/// How the rollout ended, as the harness saw it.
pub(crate) struct Ended {
    pub(crate) completed: usize,
    pub(crate) failed: usize,
    pub(crate) reboots: u32,
    pub(crate) traffic: Option<TrafficSummary>,
    pub(crate) counted: Counted,
    /// `rota plan`'s forecast and when it was made (`--plan`).
    pub(crate) forecast: Option<(Millis, rota_store::forecast::Forecast)>,
}

/// Nodes whose reboot finished, and nodes that failed (since the sentinels were written at
/// `started`). Each read of the store is counted in `reads`: on PostgreSQL each is one
/// statement, which the server's counts of the agents' statements leave out.
pub(crate) async fn outcome(
    store: &dyn Store,
    started: Millis,
    reads: &AtomicU64,
) -> Result<(usize, usize)> {
    reads.fetch_add(1, Ordering::Relaxed);
    let nodes = store.nodes().await?;
    // The history is read only once every node is back at rest: in the Kubernetes store it is
    // a second list of every RotaNode, and this harness's reads would slow the agents it
    // measures. Until then the nodes at rest since the start are the progress.
    let at_rest = |n: &&NodeRecord| {
        n.state == NodeState::Failed || (n.state == NodeState::Idle && n.since >= started)
    };
    let resting = nodes.iter().filter(at_rest).count();
    if resting < nodes.len() {
        let failed = nodes
            .iter()
            .filter(|n| n.state == NodeState::Failed)
            .count();
        return Ok((resting - failed, failed));
    }
    reads.fetch_add(1, Ordering::Relaxed);
    let finished = store
        .history(&HistoryFilter {
            event: Some(HistoryEvent::Finished),
            ..HistoryFilter::default()
        })
        .await?;
    let completed = nodes
        .iter()
        .filter(|n| finished.iter().any(|e| e.node == n.node))
        .count();
    let failed = nodes
        .iter()
        .filter(|n| n.state == NodeState::Failed)
        .count();
    Ok((completed, failed))
}

pub(crate) async fn summarize(
    fleet: &Fleet,
    options: &Options,
    started: Millis,
    written: &BTreeMap<NodeName, Millis>,
    ended: &Ended,
    ideal: Duration,
) -> Result<Summary> {
    let store = &*fleet.store;
    let history = store.history(&HistoryFilter::default()).await?;
    let last = history.iter().map(|e| e.at).max().unwrap_or(started);
    let makespan_s = (last - started) as f64 / 1000.0;
    let mut detection = Vec::new();
    for request in store.all_requests().await? {
        if let Some(at) = written.get(&request.node)
            && !detection.iter().any(|(n, _)| n == &request.node)
        {
            detection.push((request.node.clone(), request.created_at - at));
        }
    }
    let detection: Vec<Millis> = detection.into_iter().map(|(_, d)| d).collect();
    let handoffs = metrics::handoffs(&history, options.concurrency as usize);
    let windows = metrics::window_lengths(&history);
    let first_window_ms = metrics::window_opens(&history)
        .first()
        .map_or(0, |opened| opened - started);
    let ideal_s = ideal.as_secs_f64();
    Ok(Summary {
        store: fleet.label,
        nodes: options.nodes,
        concurrency: options.concurrency,
        completed: ended.completed,
        failed: ended.failed,
        reboots: ended.reboots,
        max_concurrent: metrics::max_concurrent(&history),
        makespan_s,
        ideal_s,
        efficiency: if makespan_s > 0.0 {
            ideal_s / makespan_s
        } else {
            0.0
        },
        detection_p50_ms: metrics::percentile(&detection, 50),
        detection_p99_ms: metrics::percentile(&detection, 99),
        handoff_p50_ms: metrics::percentile(&handoffs, 50),
        handoff_p99_ms: metrics::percentile(&handoffs, 99),
        first_window_ms,
        window_p50_ms: metrics::percentile(&windows, 50),
        window_p99_ms: metrics::percentile(&windows, 99),
        traffic: ended.traffic.clone(),
        etcd: ended.counted.etcd.clone(),
        postgres: ended.counted.postgres.clone(),
        plan: ended
            .forecast
            .as_ref()
            .map(|(made, forecast)| crate::plan_check::check(started, *made, forecast, &history)),
        zones: options.zones.as_ref().map(|zones| {
            let zone_of: BTreeMap<NodeName, String> = fleet
                .names
                .iter()
                .enumerate()
                .map(|(i, name)| (name.clone(), zones.of(i)))
                .collect();
            let (max_concurrent, max_zones_at_once) =
                metrics::max_concurrent_by_group(&history, &zone_of);
            ZonesSummary {
                count: zones.count,
                rules: zones.rules.to_string(),
                max_concurrent,
                max_zones_at_once,
            }
        }),
    })
}

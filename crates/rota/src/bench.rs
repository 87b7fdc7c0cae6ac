//! `rota bench`: measures a store's throughput with many concurrent sessions, and counts
//! afterwards, from the store itself, that no slot was granted twice and no history row was
//! lost. Speed is measured here, never asserted in tests. The fleetlock workload (`fleetlock`)
//! measures a FleetLock server instead: the answers to many hosts' `pre-reboot`s.

mod counted;
mod fleetlock;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rota_core::{BackoffPolicy, HistoryEvent, NodeName, NodeState, Process};
use rota_store::{
    Acquire, HistoryEntry, HistoryFilter, NodeFields, Session, Store, StoreExt, StoreUrl,
    Transition, WindowChange, now_millis,
};
use tokio::task::JoinSet;

use crate::cli::{BenchArgs, Workload};
use crate::output;

const TTL: Duration = Duration::from_secs(60);

/// Node names of one run: unique per run, so that the counts see only this run's rows.
fn node_name(run: i64, workload: &str, i: usize) -> Result<NodeName> {
    NodeName::new(format!("bench-{run}-{workload}-{i:03}")).context("naming a bench node")
}

pub async fn run(args: BenchArgs) -> Result<()> {
    // Without --store: a new SQLite file, removed with its directory at the end.
    let mut _temporary = None;
    let url = match &args.store {
        Some(url) => url.clone(),
        None => {
            let dir = tempfile::tempdir().context("creating a temporary directory")?;
            let url = StoreUrl::Sqlite(dir.path().join("bench.db"));
            _temporary = Some(dir);
            url
        }
    };
    let mut stores = Vec::new();
    for _ in 0..args.handles {
        stores.push(url.open_shared().await?);
    }
    let store = stores[0].clone();
    // The bench sets the concurrency and writes history: never on a fleet's live store.
    let foreign: Vec<String> = store
        .nodes()
        .await?
        .into_iter()
        .map(|n| n.node.to_string())
        .filter(|n| !n.starts_with("bench-"))
        .collect();
    if !foreign.is_empty() {
        bail!(
            "store {url} holds a fleet's nodes ({}): rota bench needs a store of its own",
            foreign.join(", ")
        );
    }
    if args.workload == Workload::Fleetlock {
        return fleetlock::run(store, &url, &args).await;
    }
    output::emit(&format!(
        "store {url} ({}), {} sessions over {} handle(s), {} s per workload\n",
        url.kind(),
        args.sessions,
        args.handles,
        args.seconds
    ))?;
    let run = now_millis();
    let mut clean = true;
    if matches!(args.workload, Workload::All | Workload::Slots) {
        clean &= slots(&stores, &args, run).await?;
    }
    if matches!(args.workload, Workload::All | Workload::History) {
        clean &= history(&stores, &args, run).await?;
    }
    if !clean {
        bail!("the counts afterwards found double grants or lost history rows");
    }
    Ok(())
}

fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
}

/// The history rows of this run's nodes of one workload.
async fn rows_of(store: &dyn Store, prefix: &str) -> Result<Vec<HistoryEntry>> {
    let all = store.history(&HistoryFilter::default()).await?;
    Ok(all
        .into_iter()
        .filter(|e| e.node.as_str().starts_with(prefix))
        .collect())
}

/// Slot cycles: each session requests a reboot and queues (one write, as an agent that finds a
/// sentinel does), waits for a slot, opens its window and finishes it (releasing the slot),
/// over and over.
async fn slots(stores: &[Arc<dyn Store>], args: &BenchArgs, run: i64) -> Result<bool> {
    let store = stores[0].clone();
    store.set_concurrency(args.concurrency).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let holding = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..args.sessions {
        let store = stores[i % stores.len()].clone();
        let node = node_name(run, "slots", i)?;
        let (stop, holding, peak) = (stop.clone(), holding.clone(), peak.clone());
        tasks.spawn(async move {
            let s = store.open_session(&node, TTL).await?;
            let mut cycles = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if !slot_cycle(&*store, &s, &stop, &holding, &peak).await? {
                    break;
                }
                cycles += 1;
            }
            store.close_session(&s).await?;
            anyhow::Ok(cycles)
        });
    }
    let probe = tokio::spawn(probe_holders(store.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut cycles = 0;
    while let Some(done) = tasks.join_next().await {
        cycles += done.context("a bench session panicked")??;
    }
    let elapsed = started.elapsed();
    let (samples, most_holders, holder_faults) = probe.await.context("the holder probe")??;

    let rows = rows_of(&*store, &format!("bench-{run}-slots-")).await?;
    let replay = replay(&rows);
    let expected = 2 * cycles;
    let lost = expected.abs_diff(rows.len());
    let double_grants = replay.slot_held_twice
        + replay.most_open.saturating_sub(args.concurrency as usize)
        + holder_faults;
    output::emit(&format!(
        "slots: {cycles} acquire+release cycles in {:.2} s = {:.0} cycles/s (concurrency {})\n",
        elapsed.as_secs_f64(),
        rate(cycles, elapsed),
        args.concurrency
    ))?;
    output::emit(&format!(
        "  double grants: {double_grants} (history replay: at most {} windows open, {} grants \
         of a slot still held; holder probe: at most {most_holders} holders in {samples} \
         samples, {holder_faults} faulty; in-process: at most {} holders)\n",
        replay.most_open,
        replay.slot_held_twice,
        peak.load(Ordering::SeqCst)
    ))?;
    output::emit(&format!(
        "  lost history rows: {lost} (expected {expected}: a started and a finished per cycle; \
         counted {}: {} started, {} finished)\n",
        rows.len(),
        replay.started,
        replay.finished
    ))?;
    Ok(double_grants == 0 && lost == 0 && replay.started == cycles && replay.finished == cycles)
}

/// One cycle; `false` when the bench stopped while this session was still queued.
async fn slot_cycle(
    store: &dyn Store,
    s: &Session,
    stop: &AtomicBool,
    holding: &AtomicUsize,
    peak: &AtomicUsize,
) -> Result<bool> {
    store
        .transition(
            s,
            Transition::new(NodeState::Idle, NodeState::Queued)
                .window(WindowChange::Queue {
                    queued_at: Some(now_millis()),
                })
                .request(Process::Reboot, "bench"),
        )
        .await?;
    let mut changes = store.changes();
    loop {
        let seen = *changes.borrow_and_update();
        match store.try_acquire_slot(s).await? {
            Acquire::Granted(_) => break,
            Acquire::Wait { .. } if stop.load(Ordering::Relaxed) => {
                store
                    .transition(s, Transition::new(NodeState::Queued, NodeState::Idle))
                    .await?;
                store.cancel_request(s, &Process::Reboot).await?;
                return Ok(false);
            }
            Acquire::Wait { changes: needed } => {
                let target = seen.saturating_add(needed);
                // The timeout only lets a waiter notice the end of the bench.
                let _ = tokio::time::timeout(
                    Duration::from_millis(200),
                    changes.wait_for(|now| *now >= target),
                )
                .await;
            }
        }
    }
    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
    peak.fetch_max(now, Ordering::SeqCst);
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open)
                .fields(NodeFields {
                    cordoned_by_rota: Some(true),
                    ..NodeFields::default()
                }),
        )
        .await?;
    // Counted out before the release commits, so that the next holder is never counted early.
    holding.fetch_sub(1, Ordering::SeqCst);
    store
        .transition(
            s,
            Transition::new(NodeState::Draining, NodeState::Idle).window(WindowChange::Finish),
        )
        .await?;
    Ok(true)
}

/// Samples the slot holders while the bench runs: the most seen at once, and how many samples
/// showed a node holding two slots or a slot beyond the concurrency.
async fn probe_holders(
    store: Arc<dyn Store>,
    stop: Arc<AtomicBool>,
) -> Result<(usize, usize, usize)> {
    let concurrency = store.settings().await?.slots();
    let (mut samples, mut most, mut faults) = (0, 0, 0);
    while !stop.load(Ordering::Relaxed) {
        let holders = store.slot_holders().await?;
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for h in &holders {
            *per_node.entry(h.node.as_str()).or_default() += 1;
        }
        if holders.iter().any(|h| h.slot >= concurrency) || per_node.values().any(|&n| n > 1) {
            faults += 1;
        }
        samples += 1;
        most = most.max(holders.len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((samples, most, faults))
}

#[derive(Default)]
struct Replay {
    started: usize,
    finished: usize,
    most_open: usize,
    /// Windows that started on a slot another node had not released yet.
    slot_held_twice: usize,
}

/// Replays history in order: who held which slot at every instant.
fn replay(rows: &[HistoryEntry]) -> Replay {
    let mut replay = Replay::default();
    let mut held: BTreeMap<u32, &str> = BTreeMap::new();
    for e in rows {
        match e.event {
            HistoryEvent::Started => {
                replay.started += 1;
                if let Some(slot) = e.slot
                    && held.insert(slot, e.node.as_str()).is_some()
                {
                    replay.slot_held_twice += 1;
                }
            }
            HistoryEvent::Finished => replay.finished += 1,
            _ => {}
        }
        if e.released
            && let Some(slot) = e.slot
        {
            held.remove(&slot);
        }
        replay.most_open = replay.most_open.max(held.len());
    }
    replay
}

/// History appends: each session's node holds a slot in a window that fails closed and is
/// retried, over and over; every failure appends one `failed` row (and its backoff).
async fn history(stores: &[Arc<dyn Store>], args: &BenchArgs, run: i64) -> Result<bool> {
    let store = stores[0].clone();
    let sessions = u32::try_from(args.sessions).unwrap_or(u32::MAX).min(1000);
    store.set_concurrency(sessions).await?;
    let policy = BackoffPolicy {
        initial: Duration::from_secs(1),
        maximum: Duration::from_secs(60),
        exponent: 2.0,
    };
    let mut ready = Vec::new();
    for i in 0..args.sessions {
        let store = stores[i % stores.len()].clone();
        let s = enter_window(&*store, node_name(run, "history", i)?).await?;
        ready.push((store, s));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (store, s) in ready {
        let stop = stop.clone();
        tasks.spawn(async move {
            let mut appends = 0usize;
            while !stop.load(Ordering::Relaxed) {
                store
                    .transition(
                        &s,
                        Transition::new(NodeState::Maintaining, NodeState::Failed).window(
                            WindowChange::Fail {
                                cause: "bench".into(),
                                policy,
                                keep_slot: true,
                            },
                        ),
                    )
                    .await?;
                appends += 1;
                store.retry(&s.node).await?;
            }
            // The window ends and gives its slot back: a later bench on this store finds every
            // slot free (a failed node would keep its slot).
            store
                .transition(
                    &s,
                    Transition::new(NodeState::Maintaining, NodeState::Idle)
                        .window(WindowChange::Finish),
                )
                .await?;
            store.close_session(&s).await?;
            anyhow::Ok(appends)
        });
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut appends = 0;
    while let Some(done) = tasks.join_next().await {
        appends += done.context("a bench session panicked")??;
    }
    let elapsed = started.elapsed();
    let rows = rows_of(&*store, &format!("bench-{run}-history-")).await?;
    let counted = rows
        .iter()
        .filter(|e| e.event == HistoryEvent::Failed)
        .count();
    let lost = appends.abs_diff(counted);
    output::emit(&format!(
        "history: {appends} appends in {:.2} s = {:.0} appends/s (each a fail-closed \
         transition, then an operator retry)\n",
        elapsed.as_secs_f64(),
        rate(appends, elapsed)
    ))?;
    output::emit(&format!(
        "  lost history rows: {lost} (expected {appends}, counted {counted})\n"
    ))?;
    Ok(lost == 0)
}

/// Opens a session and a window on `node`, up to `maintaining`.
async fn enter_window(store: &dyn Store, node: NodeName) -> Result<Session> {
    let s = store.open_session(&node, TTL).await?;
    store.add_request(&s, &Process::Reboot, "bench").await?;
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await?;
    let mut changes = store.changes();
    while store.try_acquire_slot(&s).await?.slot().is_none() {
        let _ = tokio::time::timeout(Duration::from_millis(200), changes.changed()).await;
    }
    store
        .transition(
            &s,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open),
        )
        .await?;
    store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await?;
    Ok(s)
}

//! Many sessions racing for few slots: no double grant, no lost history.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rota_core::HistoryEvent;

use super::{enqueue, finish_window, node, open_window};
use crate::model::{HistoryFilter, now_millis};
use crate::store::{Store, StoreExt};

const STRESS_TTL: Duration = Duration::from_secs(3600);

/// Many sessions race for few slots; afterwards the counts must add up exactly.
pub async fn concurrent_stress_never_double_grants_or_loses_history(store: Arc<dyn Store>) {
    concurrent_stress_across(vec![store]).await;
}

/// The bar: 64 sessions working on the same rows at once.
pub async fn sixty_four_sessions_never_double_grant_or_lose_history(store: Arc<dyn Store>) {
    stress(vec![store], Stress::SIXTY_FOUR).await;
}

/// How many sessions race, how often each takes a turn, and for how many slots.
#[derive(Clone, Copy, Debug)]
pub struct Stress {
    pub nodes: usize,
    pub rounds: usize,
    pub concurrency: u32,
}

impl Stress {
    pub const DEFAULT: Stress = Stress {
        nodes: 24,
        rounds: 4,
        concurrency: 3,
    };
    pub const SIXTY_FOUR: Stress = Stress {
        nodes: 64,
        rounds: 3,
        concurrency: 4,
    };
}

/// The stress case with the nodes spread over several handles on one store (separate
/// connections, as separate agent processes would have).
pub async fn concurrent_stress_across(stores: Vec<Arc<dyn Store>>) {
    stress(stores, Stress::DEFAULT).await;
}

/// Many sessions, spread over `stores` (handles on one store), race for few slots; afterwards
/// the counts must add up exactly: no double grant, no lost history row.
pub async fn stress(stores: Vec<Arc<dyn Store>>, shape: Stress) {
    let Stress {
        nodes,
        rounds,
        concurrency,
    } = shape;
    let store = stores[0].clone();
    store
        .set_concurrency(concurrency)
        .await
        .expect("set concurrency");
    let holding = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..nodes {
        let store = stores[i % stores.len()].clone();
        let holding = holding.clone();
        let peak = peak.clone();
        tasks.push(tokio::spawn(async move {
            // Sessions that outlive the whole run: this case is about exclusion, and it sends
            // no heartbeats, so a slow substrate under load must not expire them midway.
            let s = store
                .open_session(&node(&format!("stress-{i:02}")), STRESS_TTL)
                .await
                .expect("open session");
            for _ in 0..rounds {
                enqueue(&*store, &s, now_millis()).await;
                let mut changes = store.changes();
                loop {
                    if store
                        .try_acquire_slot(&s)
                        .await
                        .expect("acquire")
                        .slot()
                        .is_some()
                    {
                        break;
                    }
                    let _ =
                        tokio::time::timeout(Duration::from_millis(50), changes.changed()).await;
                }
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                open_window(&*store, &s).await;
                tokio::task::yield_now().await;
                holding.fetch_sub(1, Ordering::SeqCst);
                finish_window(&*store, &s).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert!(peak.load(Ordering::SeqCst) <= concurrency as usize);
    assert!(store.slot_holders().await.expect("holders").is_empty());

    let history = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    let mut per_node: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in &history {
        let entry = per_node.entry(e.node.to_string()).or_default();
        match e.event {
            HistoryEvent::Started => entry.0 += 1,
            HistoryEvent::Finished => entry.1 += 1,
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(per_node.len(), nodes);
    assert!(
        per_node.values().all(|&(s, f)| s == rounds && f == rounds),
        "every round left exactly one started and one finished entry: {per_node:?}"
    );

    // Replaying history independently: at no instant did more than k windows overlap.
    let mut open = 0usize;
    let mut max_open = 0usize;
    for e in &history {
        match e.event {
            HistoryEvent::Started => open += 1,
            _ if e.released => open -= 1,
            _ => {}
        }
        max_open = max_open.max(open);
    }
    assert!(max_open <= concurrency as usize, "history shows {max_open}");
}

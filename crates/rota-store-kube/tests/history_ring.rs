//! A RotaNode stays small whatever its history's length: each window's entries move to a
//! `RotaWindow` of the node's ring (at most 50) as it ends, and `history()` reads them back,
//! each once, leaving out a chunk whose writer never committed it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use rota_core::{BackoffPolicy, HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::testenv::Scope;
use rota_store::{
    HistoryEntry, HistoryFilter, Session, StepRecord, Store, StoreExt, Transition, WindowChange,
    now_millis,
};
use rota_store_kube::crd::{HistoryStatus, Timestamp};
use rota_store_kube::window::{NODE_TAG_LABEL, RING_SIZE, ring_name};
use rota_store_kube::{KubeStore, NAMESPACE_LABEL, RotaNode, RotaWindow, RotaWindowSpec};

const TTL: Duration = Duration::from_secs(120);

fn policy() -> BackoffPolicy {
    BackoffPolicy {
        initial: Duration::from_secs(1),
        maximum: Duration::from_secs(5),
        exponent: 2.0,
    }
}

/// A cause as long as a procedure's failure with the tails of its output.
fn long_cause(window: usize) -> String {
    format!("window {window}: script exited 3: {}", "x".repeat(2000))
}

/// One window through the store API: a request, the queue, the slot, and an end that releases
/// it: a failure with a long cause for every third window, else a finish.
async fn window(store: &KubeStore, s: &Session, n: usize) {
    open_window(store, s).await;
    end_window(store, s, n).await;
}

/// The end of window `n`: a failure with a long cause for every third window, else a finish.
async fn end_window(store: &KubeStore, s: &Session, n: usize) {
    if n.is_multiple_of(3) {
        store
            .transition(
                s,
                Transition::new(NodeState::Draining, NodeState::Idle).window(WindowChange::Fail {
                    cause: long_cause(n),
                    policy: policy(),
                    keep_slot: false,
                }),
            )
            .await
            .expect("fail");
        store
            .cancel_request(s, &Process::Reboot)
            .await
            .expect("cancel the requeued request");
        return;
    }
    for (from, to) in [
        (NodeState::Draining, NodeState::Maintaining),
        (NodeState::Maintaining, NodeState::Verifying),
    ] {
        store
            .transition(s, Transition::new(from, to))
            .await
            .expect("transition");
    }
    store
        .transition(
            s,
            Transition::new(NodeState::Verifying, NodeState::Idle).window(WindowChange::Finish),
        )
        .await
        .expect("finish");
}

/// The writes a client sent, each as `METHOD resource`.
#[derive(Clone, Default)]
struct Writes(Arc<Mutex<Vec<String>>>);

impl Writes {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("the log"))
    }

    fn count(writes: &[String], what: &str) -> usize {
        writes.iter().filter(|w| *w == what).count()
    }
}

/// A store in a scope of its own on a client that logs its writes.
async fn logged_store(name: &str) -> Option<(Scope, KubeStore, Writes)> {
    let env = common::env()?;
    let scope = env.scope(name).await.expect("a test scope");
    common::install_crd(scope.client()).await;
    let writes = Writes::default();
    let log = writes.clone();
    let layer =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            if request.method() != http::Method::GET {
                let resource = request
                    .uri()
                    .path()
                    .split('/')
                    .find(|part| ["rotanodes", "rotawindows"].contains(part))
                    .unwrap_or("other");
                let line = format!("{} {resource}", request.method());
                log.0.lock().expect("the log").push(line);
            }
            request
        });
    let config = env.config().await.expect("the test kubeconfig");
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("a client")
        .with_layer(&layer)
        .build();
    let store = KubeStore::connect(client, common::store_config(&scope))
        .await
        .expect("connect the store");
    store.set_concurrency(1).await.expect("concurrency");
    Some((scope, store, writes))
}

/// The node's RotaNode as the API server serves it: its JSON, managedFields included.
async fn served(store: &KubeStore, client: &kube::Client, node: &NodeName) -> String {
    let path = format!(
        "/apis/rota.dev/v1alpha1/rotanodes/{}",
        store.object_name(node)
    );
    let request = http::Request::get(path)
        .body(Vec::new())
        .expect("a request");
    client
        .request_text(request)
        .await
        .expect("read the RotaNode")
}

async fn node_history(store: &KubeStore, node: &NodeName) -> Vec<HistoryEntry> {
    store
        .history(&HistoryFilter {
            node: Some(node.clone()),
            ..HistoryFilter::default()
        })
        .await
        .expect("history")
}

async fn rota_node(scope: &Scope, store: &KubeStore, node: &NodeName) -> RotaNode {
    Api::<RotaNode>::all(scope.client())
        .get(&store.object_name(node))
        .await
        .expect("the RotaNode")
}

/// 120 windows, every third failing with a cause of 2,000 characters: the RotaNode, as served,
/// stays within 4 KiB at every step of a window, the ring wraps and keeps the last 50 windows,
/// whole and in order, and each window costs one RotaWindow write.
#[tokio::test]
async fn a_rota_node_stays_small_through_many_windows_and_the_ring_keeps_the_last_fifty() {
    let Some((scope, store, writes)) = logged_store("ring-size").await else {
        return;
    };
    let node = NodeName::new("many").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    let mut sizes = Vec::new();
    for n in 0..120 {
        writes.take();
        open_window(&store, &s).await;
        let json = served(&store, &scope.client(), &node).await;
        assert!(
            json.len() <= 4096,
            "in window {n}: {} bytes: {json}",
            json.len()
        );
        end_window(&store, &s, n).await;
        let sent = writes.take();
        assert_eq!(
            Writes::count(&sent, "POST rotawindows") + Writes::count(&sent, "PATCH rotawindows"),
            1,
            "window {n} wrote its ring place once: {sent:?}"
        );
        let json = served(&store, &scope.client(), &node).await;
        sizes.push(json.len());
        assert!(
            json.len() <= 4096,
            "after window {n}: {} bytes: {json}",
            json.len()
        );
    }
    eprintln!(
        "RotaNode served bytes: after 1 window {}, after 100 windows {}, largest {}",
        sizes[0],
        sizes[99],
        sizes.iter().max().expect("sizes")
    );

    let history = node_history(&store, &node).await;
    assert_eq!(
        history.len(),
        2 * RING_SIZE as usize,
        "two entries for each of 50 windows"
    );
    assert!(
        history
            .windows(2)
            .all(|w| w[0].id < w[1].id && w[0].at <= w[1].at)
    );
    for (i, pair) in history.chunks(2).enumerate() {
        let n = 120 - RING_SIZE as usize + i;
        assert_eq!(pair[0].event, HistoryEvent::Started, "window {n}");
        assert!(!pair[0].released && pair[1].released, "window {n}");
        if n.is_multiple_of(3) {
            assert_eq!(pair[1].event, HistoryEvent::Failed, "window {n}");
            assert_eq!(pair[1].cause.as_deref(), Some(long_cause(n).as_str()));
        } else {
            assert_eq!(pair[1].event, HistoryEvent::Finished, "window {n}");
        }
    }
    let steps = store
        .steps(&HistoryFilter {
            node: Some(node.clone()),
            ..HistoryFilter::default()
        })
        .await
        .expect("steps");
    let first_kept = history.first().map_or(0, |e| e.at);
    let kept: Vec<&StepRecord> = steps.iter().filter(|s| s.at >= first_kept).collect();
    assert_eq!(
        kept.iter()
            .filter(|s| s.state == NodeState::Draining)
            .count(),
        RING_SIZE as usize,
        "each window kept in the ring keeps its steps: {steps:?}"
    );
    assert!(steps.windows(2).all(|w| w[0].at <= w[1].at));
    let windows = Api::<RotaWindow>::all(scope.client())
        .list(&ListParams::default().labels(&format!("{NAMESPACE_LABEL}={}", scope.namespace())))
        .await
        .expect("list the RotaWindows");
    assert_eq!(
        windows.items.len(),
        RING_SIZE as usize,
        "one per ring place"
    );
    scope.cleanup().await.expect("clean up");
}

/// A writer that died between its RotaWindow and its RotaNode write left a chunk that was
/// never committed: `history()` leaves it out, and reads an entry that is both in a committed
/// chunk and still in the RotaNode once. The next write overwrites the dead writer's chunk (a
/// create met it on the first lap), and deleting the RotaNode lets the garbage collector delete
/// its ring.
#[tokio::test]
async fn a_chunk_never_committed_is_not_read_and_an_entry_in_both_places_is_read_once() {
    dead_writer("ring-crash", 2).await;
}

/// The same on a later lap, where the dead writer's chunk replaced the oldest one: the next
/// write's patch, which applies only over the lap before, meets it and overwrites it.
#[tokio::test]
async fn a_chunk_never_committed_on_a_later_lap_is_overwritten_by_the_next_write() {
    dead_writer("ring-crash-lap", RING_SIZE as usize + 1).await;
}

/// `windows` windows, then a writer that dies after writing chunk `windows`, with an entry
/// that never happened and a copy of the last one, which is also put back in the RotaNode.
async fn dead_writer(scope_name: &str, windows: usize) {
    let Some((scope, store, _)) = logged_store(scope_name).await else {
        return;
    };
    let node = NodeName::new("crash").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    for n in 1..=windows {
        window(&store, &s, n).await;
    }
    let before = node_history(&store, &node).await;
    let ring_size = RING_SIZE as usize;
    assert_eq!(before.len(), 2 * windows.min(ring_size));

    let rota_nodes = Api::<RotaNode>::all(scope.client());
    let mut object = rota_node(&scope, &store, &node).await;
    let status = object.status.clone().expect("a status");
    let written = status.history_ring.expect("chunks were written").written;
    assert_eq!(written, windows as u64);
    let last = before.last().expect("entries");
    let phantom = HistoryStatus {
        id: last.id + 1,
        process: Process::Reboot,
        event: HistoryEvent::Canceled,
        at: Timestamp(last.at),
        cause: Some("never committed".into()),
        slot: Some(0),
        released: true,
    };
    let copy = status_entry(last);
    let place = ring_name(&object.name_any(), written);
    let mut dead = RotaWindow::new(
        &place,
        RotaWindowSpec {
            node: node.to_string(),
            sequence: written,
            cut_at_generation: object.meta().generation.expect("a generation"),
            entries: vec![copy.clone(), phantom],
            procedure_requests: Vec::new(),
            steps: Vec::new(),
        },
    );
    dead.metadata.labels = Some(
        [
            (NAMESPACE_LABEL.to_string(), scope.namespace().to_string()),
            (NODE_TAG_LABEL.to_string(), status.tag.to_string()),
        ]
        .into(),
    );
    dead.metadata.owner_references = object.owner_ref(&()).map(|o| vec![o]);
    let ring = Api::<RotaWindow>::all(scope.client());
    let lapped = match ring.get_opt(&place).await.expect("read the place") {
        Some(oldest) => {
            dead.metadata.resource_version = oldest.resource_version();
            ring.replace(&place, &PostParams::default(), &dead)
                .await
                .expect("the dead writer's chunk over the oldest");
            true
        }
        None => {
            ring.create(&PostParams::default(), &dead)
                .await
                .expect("the dead writer's chunk");
            false
        }
    };
    // A committed entry still in the RotaNode, as if its removal had not been written.
    let mut inline = status.clone();
    inline.history.push(copy);
    object.status = Some(inline);
    rota_nodes
        .replace(&object.name_any(), &PostParams::default(), &object)
        .await
        .expect("put the entry back by hand");

    let after = node_history(&store, &node).await;
    // The oldest chunk, which the dead writer's replaced, is gone one window early.
    let kept = &before[if lapped { 2 } else { 0 }..];
    assert_eq!(
        ids(&after),
        ids(kept),
        "the uncommitted chunk is left out, the entry in both places read once"
    );

    window(&store, &s, windows + 1).await;
    let chunk = ring.get(&place).await.expect("the dead writer's place");
    assert!(
        chunk
            .spec
            .entries
            .iter()
            .all(|e| e.cause.as_deref() != Some("never committed")),
        "the next write overwrote the dead writer's chunk: {:?}",
        chunk.spec.entries
    );
    // The entry put back moved again with the next write (to the dead writer's place, where it
    // is read once), and the window to the place after it, the oldest chunk's on a later lap.
    let last = node_history(&store, &node).await;
    let dropped = if windows + 2 > ring_size { 2 } else { 0 };
    assert_eq!(ids(&last[..last.len() - 2]), ids(&kept[dropped..]));
    assert!(last.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(
        rota_node(&scope, &store, &node)
            .await
            .status
            .expect("status")
            .history,
        []
    );

    let selector = format!(
        "{NODE_TAG_LABEL}={},{NAMESPACE_LABEL}={}",
        status.tag,
        scope.namespace()
    );
    let places = ring
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("list");
    assert_eq!(places.items.len(), (windows + 2).min(ring_size));
    rota_nodes
        .delete(&object.name_any(), &DeleteParams::default())
        .await
        .expect("delete the RotaNode");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = ring
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list");
        if left.items.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the garbage collector left {} RotaWindows of a deleted RotaNode",
            left.items.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    scope.cleanup().await.expect("clean up");
}

fn ids(entries: &[HistoryEntry]) -> Vec<i64> {
    entries.iter().map(|e| e.id).collect()
}

/// A rota from before the ring, which does not know `historyRing`, drops it when it writes a
/// RotaNode (an operator's older `rota unlock`, an agent during a rolling upgrade): the history
/// is read from the ring all the same, and the next chunk goes after the newest.
#[tokio::test]
async fn a_ring_count_an_older_rota_dropped_is_found_again() {
    let Some((scope, store, _)) = logged_store("ring-older").await else {
        return;
    };
    let node = NodeName::new("older").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    for n in 1..=3 {
        window(&store, &s, n).await;
    }
    let before = node_history(&store, &node).await;
    assert_eq!(before.len(), 6);
    let mut object = rota_node(&scope, &store, &node).await;
    if let Some(status) = object.status.as_mut() {
        status.history_ring = None;
    }
    Api::<RotaNode>::all(scope.client())
        .replace(&object.name_any(), &PostParams::default(), &object)
        .await
        .expect("write it as an older rota would");
    assert_eq!(ids(&node_history(&store, &node).await), ids(&before));

    window(&store, &s, 4).await;
    let status = rota_node(&scope, &store, &node)
        .await
        .status
        .expect("status");
    assert_eq!(status.history_ring.map(|r| r.written), Some(4));
    let after = node_history(&store, &node).await;
    assert_eq!(ids(&after[..6]), ids(&before));
    assert_eq!(after.len(), 8);
    scope.cleanup().await.expect("clean up");
}

/// A chunk of the same sequence, cut from the same generation of the RotaNode by another
/// writer that may still commit it, is left alone: the entries stay in the RotaNode (and are
/// read from there), and the next write, from a newer generation, moves them.
#[tokio::test]
async fn a_chunk_another_writer_may_still_commit_is_left_and_the_entries_wait() {
    let Some((scope, store, _)) = logged_store("ring-race").await else {
        return;
    };
    let node = NodeName::new("race").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    window(&store, &s, 1).await;
    open_window(&store, &s).await;
    let object = rota_node(&scope, &store, &node).await;
    let tag = object.status.as_ref().expect("status").tag;
    let mut rival = RotaWindow::new(
        &ring_name(&object.name_any(), 1),
        RotaWindowSpec {
            node: node.to_string(),
            sequence: 1,
            cut_at_generation: object.meta().generation.expect("a generation"),
            entries: Vec::new(),
            procedure_requests: Vec::new(),
            steps: Vec::new(),
        },
    );
    rival.metadata.labels = Some(
        [
            (NAMESPACE_LABEL.to_string(), scope.namespace().to_string()),
            (NODE_TAG_LABEL.to_string(), tag.to_string()),
        ]
        .into(),
    );
    rival.metadata.owner_references = object.owner_ref(&()).map(|o| vec![o]);
    Api::<RotaWindow>::all(scope.client())
        .create(&PostParams::default(), &rival)
        .await
        .expect("the rival's chunk");

    store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Idle).window(WindowChange::Finish),
        )
        .await
        .expect("finish");
    let status = rota_node(&scope, &store, &node)
        .await
        .status
        .expect("status");
    assert_eq!(status.history.len(), 2, "the entries wait in the RotaNode");
    assert_eq!(status.history_ring.expect("a ring").written, 1);
    assert_eq!(
        node_history(&store, &node).await.len(),
        4,
        "and are read from there"
    );

    store
        .add_request(&s, &Process::Reboot, "history-ring")
        .await
        .expect("the next write");
    let status = rota_node(&scope, &store, &node)
        .await
        .status
        .expect("status");
    assert_eq!(status.history, [], "the next write moved them");
    assert_eq!(status.history_ring.expect("a ring").written, 2);
    let history = node_history(&store, &node).await;
    assert_eq!(history.len(), 4);
    assert!(history.windows(2).all(|w| w[0].id < w[1].id));
    scope.cleanup().await.expect("clean up");
}

/// A request, the queue, the slot, and the window opened.
async fn open_window(store: &KubeStore, s: &Session) {
    store
        .add_request(s, &Process::Reboot, "history-ring")
        .await
        .expect("request");
    store
        .transition(
            s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
    let slot = store.try_acquire_slot(s).await.expect("acquire");
    assert!(slot.slot().is_some(), "the only node gets a slot");
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open),
        )
        .await
        .expect("open");
}

fn status_entry(e: &HistoryEntry) -> HistoryStatus {
    HistoryStatus {
        id: e.id,
        process: e.process.clone(),
        event: e.event,
        at: Timestamp(e.at),
        cause: e.cause.clone(),
        slot: e.slot,
        released: e.released,
    }
}

//! A procedure runs at most once per node, ever, and the RotaNode stays small however many
//! the node ran: past a few, the closed procedure requests move to the node's procedure
//! ledger (the RotaWindow `<rotanode>-procedures`), where every reader finds them again.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource};
use rota_core::{NodeName, Process};
use rota_e2e::testenv::Scope;
use rota_store::{RequestRecord, Session, Store, StoreExt};
use rota_store_kube::crd::{ArchivedRequest, RequestStateName};
use rota_store_kube::window::ledger_name;
use rota_store_kube::{KubeStore, NAMESPACE_LABEL, RotaNode, RotaWindow, RotaWindowSpec};

const TTL: Duration = Duration::from_secs(120);

fn procedure(i: usize) -> Process {
    Process::Mop(format!("p{i}"))
}

/// Requests procedure `i` for the session's node and cancels it: a closed request, which the
/// node keeps for good.
async fn run_and_close(store: &KubeStore, s: &Session, i: usize) -> RequestRecord {
    let (request, created) = store
        .add_request(s, &procedure(i), "procedure")
        .await
        .expect("request");
    assert!(created, "procedure {i} is new to the node");
    assert!(
        store
            .cancel_request(s, &procedure(i))
            .await
            .expect("cancel")
    );
    request
}

async fn rota_node(scope: &Scope, store: &KubeStore, node: &NodeName) -> RotaNode {
    Api::<RotaNode>::all(scope.client())
        .get(&store.object_name(node))
        .await
        .expect("the RotaNode")
}

/// A handle that has never seen the node: it knows nothing of its ledger.
async fn fresh_handle(scope: &Scope) -> KubeStore {
    KubeStore::connect(scope.client(), common::store_config(scope))
        .await
        .expect("connect the store")
}

/// 30 procedures closed on one node: the RotaNode keeps at most 4 of their requests and stays
/// as small as a node's that ran 4, each procedure's request is found again (by the agent's
/// handle, and by an operator's that never read the ledger), and every request is listed once.
#[tokio::test]
async fn a_node_that_ran_many_procedures_stays_small_and_runs_none_twice() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "ledger-many").await;
    let node = NodeName::new("many").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    let mut first = Vec::new();
    for i in 0..30 {
        first.push(run_and_close(&store, &s, i).await);
    }
    let object = rota_node(&scope, &store, &node).await;
    let status = object.status.clone().expect("a status");
    assert!(
        status.procedure_requests.len() <= 4,
        "{:?}",
        status.procedure_requests
    );
    assert!(status.procedure_ledger > 0, "the requests moved");
    let bytes = serde_json::to_vec(&object).expect("json").len();
    eprintln!(
        "RotaNode after 30 procedures: {bytes} bytes, {} archived inline, {} moves",
        status.procedure_requests.len(),
        status.procedure_ledger
    );

    for (i, request) in first.iter().enumerate() {
        let (again, created) = store
            .add_request(&s, &procedure(i), "procedure")
            .await
            .expect("request again");
        assert!(!created, "procedure {i} is never requested twice");
        assert_eq!(again.id, request.id, "procedure {i}");
    }
    let operator = fresh_handle(&scope).await;
    for (i, request) in first.iter().enumerate() {
        let (again, created) = operator
            .request(&node, &procedure(i), "operator")
            .await
            .expect("an operator's request");
        assert!(!created, "procedure {i}: an operator's handle finds it too");
        assert_eq!(again.id, request.id, "procedure {i}");
    }
    let all = fresh_handle(&scope)
        .await
        .all_requests()
        .await
        .expect("all");
    let mut ids: Vec<i64> = all.iter().map(|r| r.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "each request once");
    assert_eq!(all.len(), 30, "{all:?}");

    let (_, created) = store
        .add_request(&s, &procedure(30), "procedure")
        .await
        .expect("a new procedure");
    assert!(created, "a procedure the node never had is requested");
    scope.cleanup().await.expect("clean up");
}

/// A writer that died after its ledger write and before its RotaNode write: the ledger holds
/// requests the RotaNode still holds too. The next move adds none of them twice, and every
/// reader lists each once.
#[tokio::test]
async fn a_move_whose_rota_node_write_was_lost_is_made_again_without_doubles() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "ledger-crash").await;
    let node = NodeName::new("crashed").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    for i in 0..6 {
        run_and_close(&store, &s, i).await;
    }
    let object = rota_node(&scope, &store, &node).await;
    let status = object.status.clone().expect("a status");
    assert_eq!(status.procedure_ledger, 0, "4 archived stay inline");
    let inline = status.procedure_requests.clone();
    assert_eq!(inline.len(), 4);
    // The dead writer's ledger: what it moved, the RotaNode never counted.
    let mut dead = RotaWindow::new(
        &ledger_name(&store.object_name(&node)),
        RotaWindowSpec {
            node: node.to_string(),
            sequence: 1,
            cut_at_generation: object.meta().generation.unwrap_or(0),
            entries: Vec::new(),
            procedure_requests: inline.clone(),
            steps: Vec::new(),
        },
    );
    dead.metadata.labels = Some(BTreeMap::from([
        (NAMESPACE_LABEL.to_owned(), scope.namespace().to_owned()),
        (
            "rota.dev/procedure-ledger-of".to_owned(),
            status.tag.to_string(),
        ),
    ]));
    dead.metadata.owner_references = object.controller_owner_ref(&()).map(|o| vec![o]);
    Api::<RotaWindow>::all(scope.client())
        .create(&PostParams::default(), &dead)
        .await
        .expect("the dead writer's ledger");

    run_and_close(&store, &s, 6).await;
    let status = rota_node(&scope, &store, &node)
        .await
        .status
        .expect("a status");
    assert_eq!(status.procedure_ledger, 2, "counts on from the dead move");
    assert!(status.procedure_requests.is_empty());
    let ledger = Api::<RotaWindow>::all(scope.client())
        .get(&ledger_name(&store.object_name(&node)))
        .await
        .expect("the ledger");
    let names: Vec<&Process> = ledger
        .spec
        .procedure_requests
        .iter()
        .map(|r: &ArchivedRequest| &r.process)
        .collect();
    assert_eq!(names.len(), 5, "each of the 5 moved once: {names:?}");
    assert!(
        ledger
            .spec
            .procedure_requests
            .iter()
            .all(|r| r.state == RequestStateName::Canceled)
    );
    let all = fresh_handle(&scope)
        .await
        .all_requests()
        .await
        .expect("all");
    assert_eq!(all.len(), 7, "{all:?}");
    scope.cleanup().await.expect("clean up");
}

/// A ledger deleted by hand: the node's handle cannot know which procedures ran, so it
/// requests none, and says what to do.
#[tokio::test]
async fn a_deleted_ledger_fails_closed_and_says_how_to_recover() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "ledger-gone").await;
    let node = NodeName::new("lost").expect("a name");
    let s = store.open_session(&node, TTL).await.expect("open");
    for i in 0..8 {
        run_and_close(&store, &s, i).await;
    }
    Api::<RotaWindow>::all(scope.client())
        .delete(
            &ledger_name(&store.object_name(&node)),
            &DeleteParams::default(),
        )
        .await
        .expect("delete the ledger");
    let operator = fresh_handle(&scope).await;
    for process in [procedure(0), procedure(99)] {
        let error = operator
            .request(&node, &process, "operator")
            .await
            .expect_err("no procedure is requested while the ledger is lost");
        let text = error.to_string();
        assert!(text.contains("status.procedureLedger"), "{text}");
        assert!(text.contains("kubectl edit rotanode"), "{text}");
    }
    scope.cleanup().await.expect("clean up");
}

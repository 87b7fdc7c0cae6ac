//! Procedures: stored once and immutable, requested once per node ever, and their requests
//! completed one by one inside a window.

use std::sync::Arc;
use std::time::Duration;

use rota_core::{HistoryEvent, NodeState, ProcedureSpec, Process};

use super::{finish_window, node, open_window, policy, session};
use crate::error::Error;
use crate::model::{
    HistoryFilter, Outcome, RequestState, Session, Transition, WindowChange, now_millis,
};
use crate::store::{Store, StoreExt};

/// A procedure for node `a` only: stores on a shared cluster see each other's procedures, and
/// one for every node would be run by other tests' agents.
fn only_on_a(mut spec: ProcedureSpec) -> ProcedureSpec {
    spec.nodes = vec![node("a")];
    spec
}

pub async fn procedures_are_stored_once_and_immutable(store: Arc<dyn Store>) {
    let mut first = only_on_a(ProcedureSpec::new(
        "kernel",
        "apt-get install -y linux-image",
    ));
    first.priority = "10".parse().expect("priority");
    let (record, created) = store.submit_procedure(&first).await.expect("submit");
    assert!(created);
    assert_eq!(record.spec, first);
    let (again, created) = store.submit_procedure(&first).await.expect("submit again");
    assert!(!created, "the same spec again changes nothing");
    assert_eq!(again.submitted_at, record.submitted_at);
    let mut changed = first.clone();
    changed.script = Some("rm -rf /".into());
    let refused = store.submit_procedure(&changed).await;
    assert!(
        matches!(&refused, Err(Error::ProcedureConflict { name }) if name == "kernel"),
        "{refused:?}"
    );
    let invalid = ProcedureSpec::new("Not_A_Label", "true");
    let refused = store.submit_procedure(&invalid).await;
    assert!(matches!(refused, Err(Error::Procedure(_))), "{refused:?}");
    store
        .submit_procedure(&only_on_a(ProcedureSpec::new("firmware", "true")))
        .await
        .expect("submit another");
    let names: Vec<String> = store
        .procedures()
        .await
        .expect("procedures")
        .into_iter()
        .map(|p| p.spec.name)
        .collect();
    assert_eq!(names, ["kernel", "firmware"], "in submission order");
    assert_eq!(
        store.procedures().await.expect("procedures")[0].spec,
        first,
        "read back exactly as submitted"
    );
}

/// A procedure's request is unique per node in every state: once done (or canceled), adding
/// it again returns the old request and creates nothing, so a restart never runs it again.
pub async fn a_procedure_is_requested_once_per_node_ever(store: Arc<dyn Store>) {
    store.set_concurrency(1).await.expect("set concurrency");
    let mop = Process::mop("kernel").expect("process");
    let s = session(&*store, "a").await;
    let (request, created) = store.add_request(&s, &mop, "procedure").await.expect("add");
    assert!(created);
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
    store.try_acquire_slot(&s).await.expect("acquire");
    open_window(&*store, &s).await;
    finish_window(&*store, &s).await;
    let s = session(&*store, "a").await;
    let (again, created) = store
        .add_request(&s, &mop, "procedure")
        .await
        .expect("again");
    assert!(!created, "a finished procedure is not requested again");
    assert_eq!(again.id, request.id);
    assert_eq!(again.state, RequestState::Done);
    assert!(
        store
            .open_requests(&node("a"))
            .await
            .expect("open")
            .is_empty()
    );
    let other = session(&*store, "b").await;
    let (_, created) = store
        .add_request(&other, &mop, "procedure")
        .await
        .expect("b");
    assert!(created, "another node gets its own request");
    let (_, created) = store
        .add_request(&s, &Process::Reboot, "sentinel")
        .await
        .expect("reboot");
    assert!(created);
    store
        .cancel_request(&s, &Process::Reboot)
        .await
        .expect("cancel");
    let (_, created) = store
        .add_request(&s, &Process::Reboot, "sentinel")
        .await
        .expect("reboot again");
    assert!(
        created,
        "other processes may be requested again once closed"
    );
}

/// Opens a window whose work is two procedures; returns the session.
async fn window_with_two_procedures(store: &dyn Store) -> (Session, Process, Process) {
    store.set_concurrency(1).await.expect("set concurrency");
    let s = session(store, "a").await;
    let first = Process::mop("first").expect("process");
    let second = Process::mop("second").expect("process");
    for process in [&first, &second] {
        store
            .add_request(&s, process, "procedure")
            .await
            .expect("add");
    }
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
    store.try_acquire_slot(&s).await.expect("acquire");
    open_window(store, &s).await;
    store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    (s, first, second)
}

pub async fn completing_a_request_keeps_the_window_open(store: Arc<dyn Store>) {
    let (s, first, second) = window_with_two_procedures(&*store).await;
    let changes = *store.changes().borrow();
    let done = store
        .complete_request(
            &s,
            &first,
            &Outcome::Succeeded {
                detail: Some("stdout: ok".into()),
            },
        )
        .await
        .expect("complete");
    assert_eq!(done.state, RequestState::Done);
    assert_eq!(done.process, first);
    let open = store.open_requests(&node("a")).await.expect("open");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].process, second);
    let record = store.node(&node("a")).await.expect("read").expect("node");
    assert_eq!(record.state, NodeState::Maintaining);
    assert_eq!(record.slot, Some(0), "the window keeps its slot");
    assert_eq!(*store.changes().borrow(), changes, "nobody is woken");
    let history = store
        .history(&HistoryFilter {
            process: Some(first.clone()),
            event: Some(HistoryEvent::Finished),
            ..HistoryFilter::default()
        })
        .await
        .expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].cause.as_deref(), Some("stdout: ok"));
    assert_eq!(history[0].slot, Some(0));
    assert!(!history[0].released);
    let again = store
        .complete_request(&s, &first, &Outcome::Succeeded { detail: None })
        .await;
    assert!(
        matches!(
            again,
            Err(Error::Refused(rota_core::RecordError::NotActive { .. }))
        ),
        "{again:?}"
    );
    let stale = session(&*store, "a").await;
    let fenced = store
        .complete_request(&s, &second, &Outcome::Succeeded { detail: None })
        .await;
    assert!(matches!(fenced, Err(Error::Fenced { .. })), "{fenced:?}");
    store
        .complete_request(&stale, &second, &Outcome::Succeeded { detail: None })
        .await
        .expect("the current session completes");
    for (from, to, window) in [
        (
            NodeState::Maintaining,
            NodeState::Verifying,
            WindowChange::None,
        ),
        (NodeState::Verifying, NodeState::Idle, WindowChange::Finish),
    ] {
        store
            .transition(&stale, Transition::new(from, to).window(window))
            .await
            .expect("close the window");
    }
    let history = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    let last = history.last().expect("entries");
    assert_eq!(
        last.event,
        HistoryEvent::Released,
        "a window with no request left records the release on its own: {history:?}"
    );
    assert!(last.released);
    let finished = history
        .iter()
        .filter(|h| h.event == HistoryEvent::Finished)
        .count();
    assert_eq!(
        finished, 2,
        "one `finished` per procedure, none for the window"
    );
}

pub async fn a_failed_request_stays_active_and_backs_off(store: Arc<dyn Store>) {
    let (s, first, second) = window_with_two_procedures(&*store).await;
    for expected in [1, 2] {
        let failed = store
            .complete_request(
                &s,
                &second,
                &Outcome::Failed {
                    cause: "exit 3".into(),
                    policy: policy(),
                },
            )
            .await
            .expect("fail");
        assert_eq!(failed.state, RequestState::Active, "it stays for a retry");
        let record = store.node(&node("a")).await.expect("read").expect("node");
        assert_eq!(record.state, NodeState::Failed, "the node fails closed");
        assert_eq!(record.slot, Some(0), "and keeps its slot");
        let refused = store
            .complete_request(
                &s,
                &second,
                &Outcome::Failed {
                    cause: "again".into(),
                    policy: policy(),
                },
            )
            .await;
        assert!(
            matches!(
                refused,
                Err(Error::Refused(rota_core::RecordError::Conflict { .. }))
            ),
            "{refused:?}"
        );
        store.retry(&node("a")).await.expect("operator retries");
        let backoffs = store.backoffs(&node("a")).await.expect("backoffs");
        let backoff = backoffs
            .iter()
            .find(|b| b.process == second)
            .expect("a backoff for the failed procedure");
        assert_eq!(backoff.last_interval, Duration::from_secs(expected));
        assert!(backoffs.iter().all(|b| b.process != first));
    }
    let record = store.node(&node("a")).await.expect("read").expect("node");
    assert_eq!(record.last_result.as_deref(), Some("failed: exit 3"));
    assert_eq!(record.state, NodeState::Maintaining, "retried");
    let failures = store
        .history(&HistoryFilter {
            event: Some(HistoryEvent::Failed),
            ..HistoryFilter::default()
        })
        .await
        .expect("history");
    assert_eq!(failures.len(), 2);
    assert!(failures.iter().all(|h| h.process == second));
    store
        .complete_request(&s, &second, &Outcome::Succeeded { detail: None })
        .await
        .expect("succeeds on retry");
    assert!(
        store
            .backoffs(&node("a"))
            .await
            .expect("backoffs")
            .is_empty(),
        "success clears the backoff"
    );
}

//! Kubernetes mode end to end, what wakes an idle agent: one real `rota agent` process on a kwok
//! node of the real control plane of `testenv/`, with simulated reboots (see `rota_e2e::fleet`).
//! An operator's request and a submitted procedure reach it within seconds through
//! `rota-config`'s wake key; a request edited in by hand, through the watch of its RotaNode. Each test has its
//! own namespace and node names, so the tests can share one control plane and run in parallel.

use std::time::Duration;

use anyhow::{Result, ensure};
use rota_core::{HistoryEvent, NodeState, Process};
use rota_e2e::fleet::{Fleet, request_reboot_by_hand};
use rota_e2e::testenv::Scope;
use rota_store::{Store, StoreExt};
use rota_store_kube::KubeStore;

mod kube_common;

use kube_common::{
    args, assert_rebooted_once, count, delete_procedures, finish, fleet, history,
    idle_without_a_slot, scope_with_nodes, start, wait, wait_finished, wait_state, wait_within,
};

/// Waits until `node`'s agent has started `process`, for at most 20 s: what an operator's
/// wake allows, well within the minute of the procedure poll that would otherwise find it.
async fn wait_woken_start(fleet: &Fleet, store: &KubeStore, node: &str, process: &Process) {
    wait_within(
        fleet,
        &format!("{node}'s agent to start {process}"),
        Duration::from_secs(20),
        || async {
            let started = count(&history(store, node).await?, process, HistoryEvent::Started);
            Ok((started > 0).then_some(()))
        },
    )
    .await;
}

/// One kwok node whose agent has started and is idle: what the tests of what wakes an idle
/// agent start from.
struct IdleAgent {
    scope: Scope,
    node: String,
    fleet: Fleet,
    store: KubeStore,
}

/// An [`IdleAgent`] run with `--drain-force` and `extra`; `None` when the tests are skipped.
async fn idle_agent(prefix: &str, extra: &[&str]) -> Result<Option<IdleAgent>> {
    let Some((env, scope, nodes)) = scope_with_nodes(prefix, 1).await? else {
        return Ok(None);
    };
    let mut agent_args = args(&["--drain-force"]);
    agent_args.extend(args(extra));
    let fleet = fleet(env, &scope, &nodes, agent_args).await;
    let store = start(&fleet).await?;
    let node = nodes[0].clone();
    wait_state(&fleet, &store, &node, NodeState::Idle).await;
    Ok(Some(IdleAgent {
        scope,
        node,
        fleet,
        store,
    }))
}

/// The idle agent's woken reboot: it starts, finishes once, and the test cleans up.
async fn reboots_once_when_woken(agent: IdleAgent) -> Result<()> {
    let IdleAgent {
        scope,
        node,
        fleet,
        store,
    } = agent;
    wait_woken_start(&fleet, &store, &node, &Process::Reboot).await;
    wait_finished(&fleet, &store, &node, 1).await;
    assert_rebooted_once(&fleet, &store, &node).await?;
    finish(fleet, scope).await
}

/// An operator's `rota request` is a write by another process to the node's RotaNode, which
/// no watch of the agents reports: it also writes `rota-config`'s wake key for that node, so
/// the idle agent (with the defaults of `--store kube`: a one-minute procedure poll, a
/// five-minute store poll) starts the work within seconds instead of at its next poll.
#[tokio::test]
async fn an_operators_request_reaches_an_idle_agent_within_seconds() -> Result<()> {
    let Some(agent) = idle_agent("kube-request", &[]).await? else {
        return Ok(());
    };
    let (request, created) = agent
        .store
        .request(
            &Fleet::node_name(&agent.node)?,
            &Process::Reboot,
            "operator",
        )
        .await?;
    ensure!(created, "a new request: {request:?}");
    reboots_once_when_woken(agent).await
}

/// A request written into the RotaNode by hand (`kubectl edit`: no wake) reaches the idle
/// agent within seconds through the watch of its own RotaNode, with a procedure poll of an
/// hour that would not find it within the test.
#[tokio::test]
async fn a_request_edited_in_by_hand_reaches_the_idle_agent_through_its_watch() -> Result<()> {
    let Some(agent) = idle_agent("kube-edited", &["--procedure-poll", "1h"]).await? else {
        return Ok(());
    };
    request_reboot_by_hand(agent.scope.client(), &agent.node).await?;
    reboots_once_when_woken(agent).await
}

/// A procedure submitted by an operator (`rota mop submit`, another process) wakes every idle
/// agent through `rota-config`'s wake key: the agent it selects starts it within seconds, not
/// at its next one-minute procedure poll.
#[tokio::test]
async fn a_submitted_procedure_reaches_an_idle_agent_within_seconds() -> Result<()> {
    let Some(IdleAgent {
        scope,
        node,
        fleet,
        store,
    }) = idle_agent("kube-submit", &[]).await?
    else {
        return Ok(());
    };
    let node = node.as_str();
    let name = format!("{}-wake", scope.id());
    let mut spec = rota_core::ProcedureSpec::new(name.clone(), "true\n".to_string());
    spec.nodes = vec![Fleet::node_name(node)?];
    let (_, created) = store.submit_procedure(&spec).await?;
    ensure!(created, "a new procedure {name}");
    let process = Process::mop(name.clone())?;
    wait_woken_start(&fleet, &store, node, &process).await;
    wait(&fleet, &format!("{node} to finish {name}"), || async {
        let finished = count(
            &history(&store, node).await?,
            &process,
            HistoryEvent::Finished,
        );
        let idle = idle_without_a_slot(&store, node).await?;
        Ok((idle && finished == 1).then_some(()))
    })
    .await;
    fleet.shutdown().await?;
    delete_procedures(&scope, &[&name]).await?;
    scope.cleanup().await
}

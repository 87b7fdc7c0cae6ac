//! Kubernetes mode end to end: one real `rota agent` process per kwok node
//! (`--store kube --node-actions kube`) on the real control plane of `testenv/`, with simulated
//! reboots (see `rota_e2e::fleet`). Each test has its own namespace and node names, so the tests
//! can share one control plane and run in parallel.
//!
//! Pods are bound to their nodes without a controller, so the agents drain with `--drain-force`,
//! except in the fleet test, whose pods belong to a Deployment.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rota_core::{HistoryEvent, NodeState, Process};
use rota_e2e::fleet::{DisruptionWatch, Fleet, FleetOptions, request_reboot_by_hand};
use rota_e2e::testenv::{self, Scope, app_labels};
use rota_store::{
    HistoryEntry, HistoryFilter, NodeRecord, OperatorStore, ProcedureStore, ReadStore, now_millis,
};
use rota_store_kube::KubeStore;

mod kube_common;

use kube_common::{
    PATIENCE, ROTA, args, env, fleet, one_slot_fleet, record, start, unschedulable, wait,
    wait_started, wait_within,
};

async fn history(store: &KubeStore, node: &str) -> Result<Vec<HistoryEntry>> {
    Ok(store
        .history(&HistoryFilter {
            node: Some(Fleet::node_name(node)?),
            ..HistoryFilter::default()
        })
        .await?)
}

fn count(entries: &[HistoryEntry], process: &Process, event: HistoryEvent) -> usize {
    entries
        .iter()
        .filter(|e| &e.process == process && e.event == event)
        .count()
}

async fn wait_state(fleet: &Fleet, store: &KubeStore, node: &str, state: NodeState) -> NodeRecord {
    wait(fleet, &format!("{node} to be {state}"), || async {
        Ok(record(store, node).await?.filter(|r| r.state == state))
    })
    .await
}

/// Waits until `node` is idle with `finished` reboots in its history.
async fn wait_finished(fleet: &Fleet, store: &KubeStore, node: &str, finished: usize) {
    wait(
        fleet,
        &format!("{node} to finish {finished} reboot(s)"),
        || async {
            // The RotaNode goes idle a moment before the Lease is given back (two objects, the
            // release last): a finished window is idle and without its slot.
            let idle = record(store, node)
                .await?
                .is_some_and(|r| r.state == NodeState::Idle && r.slot.is_none());
            let done = count(
                &history(store, node).await?,
                &Process::Reboot,
                HistoryEvent::Finished,
            );
            Ok((idle && done >= finished).then_some(()))
        },
    )
    .await;
}

/// Asserts what every successful reboot leaves: one reboot command, one new boot, one
/// `finished` reboot in history and nothing failed.
async fn assert_rebooted_once(fleet: &Fleet, store: &KubeStore, node: &str) -> Result<()> {
    let entries = history(store, node).await?;
    let finished = count(&entries, &Process::Reboot, HistoryEvent::Finished);
    ensure!(
        finished == 1,
        "{node}: {finished} finished reboots in {entries:?}"
    );
    let failed = count(&entries, &Process::Reboot, HistoryEvent::Failed);
    ensure!(failed == 0, "{node}: failed entries in {entries:?}");
    let commands = fleet.reboot_commands(node)?;
    ensure!(
        commands == 1,
        "{node}: the reboot command ran {commands} times"
    );
    let boots = fleet.boots(node)?;
    ensure!(
        boots == 2,
        "{node}: {boots} boots, expected the first and one more"
    );
    let record = record(store, node).await?.context("no record")?;
    ensure!(
        record.state == NodeState::Idle && record.slot.is_none(),
        "{node} did not end idle without a slot: {record:?}"
    );
    Ok(())
}

/// A PodDisruptionBudget on the pods labelled `app`, and waits until the disruption
/// controller reports `allowed` disruptions for it.
async fn create_pdb(
    scope: &Scope,
    app: &str,
    min_available: Option<i32>,
    max_unavailable: Option<i32>,
    allowed: i32,
) -> Result<()> {
    let pdbs = scope.api::<PodDisruptionBudget>();
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(app.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: min_available.map(IntOrString::Int),
            max_unavailable: max_unavailable.map(IntOrString::Int),
            selector: Some(LabelSelector {
                match_labels: Some(app_labels(app)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };
    pdbs.create(&PostParams::default(), &pdb).await?;
    scope.wait_pdb(app, allowed, PATIENCE).await?;
    Ok(())
}

/// One bare pod per node, `<app>-<i>`, all labelled `app`; waits until they run.
async fn pods_on(scope: &Scope, app: &str, nodes: &[String]) -> Result<()> {
    for (i, node) in nodes.iter().enumerate() {
        scope
            .create_pod_on(&format!("{app}-{i}"), node, &app_labels(app))
            .await?;
    }
    for i in 0..nodes.len() {
        scope
            .wait_pod_running(&format!("{app}-{i}"), PATIENCE)
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn six_nodes_reboot_two_at_a_time_under_a_budget() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-fleet").await?;
    let nodes = scope.create_ready_nodes(6).await?;
    let deployments = scope.api::<Deployment>();
    scope.create_deployment("web", 6, None).await?;
    testenv::wait_for("6 available replicas of web", PATIENCE, || async {
        let d = deployments.get("web").await?;
        Ok((d.status.and_then(|s| s.available_replicas) == Some(6)).then_some(()))
    })
    .await?;
    create_pdb(&scope, "web", None, Some(1), 1).await?;

    const CONCURRENCY: usize = 2;
    let concurrency = CONCURRENCY.to_string();
    let fleet = fleet(env, &scope, &nodes, args(&["--concurrency", &concurrency])).await;
    let store = fleet.store().await?;
    let watch = DisruptionWatch::start(&scope, CONCURRENCY, BTreeSet::new());
    fleet.start_all()?;
    wait_started(&fleet, &store).await;
    for node in &nodes {
        fleet.request_reboot(node)?;
    }
    for node in &nodes {
        wait_finished(&fleet, &store, node, 1).await;
    }

    let seen = watch.seen()?;
    assert!(
        seen.over_limit.is_empty(),
        "more than {CONCURRENCY} nodes unschedulable at once: {:?}",
        seen.over_limit
    );
    assert!(seen.max <= CONCURRENCY, "{seen:?}");
    let all: BTreeSet<String> = nodes.iter().cloned().collect();
    assert_eq!(seen.ever, all, "every node was cordoned for its reboot");
    for node in &nodes {
        assert!(
            !unschedulable(&scope, node).await?,
            "{node} ended unschedulable"
        );
        assert_rebooted_once(&fleet, &store, node).await?;
    }
    assert!(store.slot_holders().await?.is_empty());
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn a_drain_that_times_out_gives_the_slot_back_and_backs_off() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-drain-timeout").await?;
    let nodes = scope.create_ready_nodes(3).await?;
    let (blocked, others) = (&nodes[0], &nodes[1..]);
    pods_on(&scope, "blocked", &nodes[..1]).await?;
    pods_on(&scope, "free", others).await?;
    create_pdb(&scope, "blocked", Some(1), None, 0).await?;

    // Only the blocked node's drain has a short timeout: a slow eviction on a busy machine
    // must not fail the others' drains.
    let blocked_args = args(&["--drain-timeout", "3s", "--backoff-initial", "1h"]);
    let fleet = Fleet::new(
        env,
        &scope,
        &nodes,
        FleetOptions {
            binary: ROTA.into(),
            args: args(&["--concurrency", "1", "--drain-force"]),
        },
        &BTreeMap::from([(blocked.clone(), blocked_args)]),
    )
    .await?;
    let store = start(&fleet).await?;
    fleet.request_reboot(blocked)?;
    wait_state(&fleet, &store, blocked, NodeState::Draining).await;
    for node in others {
        fleet.request_reboot(node)?;
    }
    wait(&fleet, &format!("{blocked}'s drain to fail"), || async {
        let entries = history(&store, blocked).await?;
        Ok((count(&entries, &Process::Reboot, HistoryEvent::Failed) > 0).then_some(()))
    })
    .await;
    for node in others {
        wait_finished(&fleet, &store, node, 1).await;
        assert_rebooted_once(&fleet, &store, node).await?;
        assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    }

    let entries = history(&store, blocked).await?;
    let failed: Vec<&HistoryEntry> = entries
        .iter()
        .filter(|e| e.event == HistoryEvent::Failed)
        .collect();
    assert_eq!(failed.len(), 1, "{entries:?}");
    assert!(
        failed[0].released,
        "the failure gave the slot back: {entries:?}"
    );
    let cause = failed[0].cause.clone().unwrap_or_default();
    assert!(cause.contains("drain"), "cause: {cause}");
    let record = record(&store, blocked).await?.context("no record")?;
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "{record:?}");
    assert!(
        !store
            .slot_holders()
            .await?
            .iter()
            .any(|h| h.node.as_str() == blocked),
        "{blocked} still holds a slot"
    );
    assert!(
        !unschedulable(&scope, blocked).await?,
        "{blocked} left cordoned after the failed drain"
    );
    let backoffs = store.backoffs(&Fleet::node_name(blocked)?).await?;
    assert!(
        backoffs
            .iter()
            .any(|b| b.process == Process::Reboot && b.until > now_millis()),
        "no backoff recorded: {backoffs:?}"
    );
    assert_eq!(fleet.reboot_commands(blocked)?, 0);
    scope.wait_pod_running("blocked-0", PATIENCE).await?;
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn an_agent_killed_during_the_drain_resumes_it() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-kill-drain").await?;
    let nodes = scope.create_ready_nodes(1).await?;
    let node = &nodes[0];
    pods_on(&scope, "held", &nodes).await?;
    create_pdb(&scope, "held", Some(1), None, 0).await?;

    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    wait_state(&fleet, &store, node, NodeState::Draining).await;
    wait(&fleet, "the node cordoned", || async {
        Ok(unschedulable(&scope, node).await?.then_some(()))
    })
    .await;
    fleet.crash_and_restart(node)?;
    // The restarted agent drains again, and the budget still refuses: nothing moves on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = record(&store, node).await?.context("no record")?;
    assert_eq!(now.state, NodeState::Draining, "{now:?}");
    assert!(unschedulable(&scope, node).await?);
    assert_eq!(fleet.reboot_commands(node)?, 0);

    scope
        .api::<PodDisruptionBudget>()
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "minAvailable": 0 } })),
        )
        .await?;
    wait_finished(&fleet, &store, node, 1).await;
    assert_rebooted_once(&fleet, &store, node).await?;
    assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    scope.wait_pod_gone("held-0", PATIENCE).await?;
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn an_agent_killed_before_the_reboot_happens_never_reboots_twice() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-kill-reboot").await?;
    let nodes = scope.create_ready_nodes(1).await?;
    let node = &nodes[0];
    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = fleet.store().await?;
    fleet.hold_reboots(node, true)?;
    fleet.start_all()?;
    wait_started(&fleet, &store).await;
    fleet.request_reboot(node)?;
    wait_state(&fleet, &store, node, NodeState::Rebooting).await;
    wait(&fleet, "the reboot command", || async {
        Ok((fleet.reboot_commands(node)? == 1).then_some(()))
    })
    .await;

    fleet.crash_and_restart(node)?;
    // Give the restarted agent time to (wrongly) reboot again; the boot id is still the old one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(fleet.is_running(node)?, "the restarted agent exited");
    assert_eq!(fleet.reboot_commands(node)?, 1);
    let now = record(&store, node).await?.context("no record")?;
    assert_eq!(now.state, NodeState::Rebooting, "{now:?}");
    assert!(unschedulable(&scope, node).await?);

    fleet.hold_reboots(node, false)?;
    wait_finished(&fleet, &store, node, 1).await;
    assert_rebooted_once(&fleet, &store, node).await?;
    assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn an_agent_killed_during_verification_verifies_again() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-kill-verify").await?;
    let nodes = scope.create_ready_nodes(1).await?;
    let node = &nodes[0];
    let dir = tempfile::tempdir()?;
    let checks = dir.path().join("health.log");
    let health = format!("echo check >> '{}'; sleep 3", checks.display());
    let fleet = fleet(
        env,
        &scope,
        &nodes,
        args(&[
            "--concurrency",
            "1",
            "--drain-force",
            "--health-interval",
            "200ms",
            "--health-command",
            &health,
        ]),
    )
    .await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    let health_checks = || {
        std::fs::read_to_string(&checks)
            .unwrap_or_default()
            .lines()
            .count()
    };
    wait(&fleet, "the first health check", || async {
        Ok((health_checks() > 0).then_some(()))
    })
    .await;
    let now = record(&store, node).await?.context("no record")?;
    assert_eq!(now.state, NodeState::Verifying, "{now:?}");
    fleet.crash_and_restart(node)?;
    wait_finished(&fleet, &store, node, 1).await;
    assert!(
        health_checks() >= 2,
        "the restarted agent verified again before finishing"
    );
    assert_rebooted_once(&fleet, &store, node).await?;
    assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn the_slot_of_a_deleted_node_is_freed() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-node-deleted").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    let (gone, next) = (&nodes[0], &nodes[1]);
    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = fleet.store().await?;
    fleet.hold_reboots(gone, true)?;
    fleet.start_all()?;
    wait_started(&fleet, &store).await;
    fleet.request_reboot(gone)?;
    wait_state(&fleet, &store, gone, NodeState::Rebooting).await;
    fleet.request_reboot(next)?;
    wait_state(&fleet, &store, next, NodeState::Queued).await;
    let holders: Vec<String> = store
        .slot_holders()
        .await?
        .into_iter()
        .map(|h| h.node.to_string())
        .collect();
    assert_eq!(holders, std::slice::from_ref(gone));

    scope.nodes().delete(gone, &DeleteParams::default()).await?;
    wait_finished(&fleet, &store, next, 1).await;
    assert_rebooted_once(&fleet, &store, next).await?;
    assert!(
        !store
            .slot_holders()
            .await?
            .iter()
            .any(|h| h.node.as_str() == gone),
        "the deleted node still holds a slot"
    );
    fleet.kill(gone)?;
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn a_node_cordoned_beforehand_stays_cordoned() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-pre-cordoned").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    let (cordoned, plain) = (&nodes[0], &nodes[1]);
    scope.cordon(cordoned).await?;
    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = start(&fleet).await?;
    for node in &nodes {
        fleet.request_reboot(node)?;
    }
    for node in &nodes {
        wait_finished(&fleet, &store, node, 1).await;
        assert_rebooted_once(&fleet, &store, node).await?;
    }
    assert!(
        unschedulable(&scope, cordoned).await?,
        "{cordoned} was cordoned before rota and must stay so"
    );
    assert!(
        !unschedulable(&scope, plain).await?,
        "{plain} left cordoned"
    );
    fleet.shutdown().await?;
    scope.cleanup().await
}

/// kured's node marks through real agents: every node with work carries the
/// `PreferNoSchedule` taint until it is idle again (so both nodes of a rollout that takes them
/// one at a time carry it at once), and each window's cordon and uncordon set their labels.
#[tokio::test]
async fn waiting_nodes_are_tainted_and_windows_label_their_nodes() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-node-marks").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    let fleet = one_slot_fleet(
        env,
        &scope,
        &nodes,
        &[
            "--prefer-no-schedule-taint",
            "rota.dev/pending",
            "--cordon-label",
            "rota.dev/maintenance=in-progress",
            "--uncordon-label",
            "rota.dev/maintenance=done",
        ],
    )
    .await;
    let store = start(&fleet).await?;
    let marks = |node: String| {
        let scope = &scope;
        async move {
            let object = scope.nodes().get(&node).await?;
            let tainted = object
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "rota.dev/pending" && t.effect == "PreferNoSchedule");
            let label = object
                .metadata
                .labels
                .unwrap_or_default()
                .get("rota.dev/maintenance")
                .cloned();
            anyhow::Ok((tainted, label))
        }
    };
    for node in &nodes {
        ensure!(
            marks(node.clone()).await? == (false, None),
            "{node} marked before any work"
        );
        fleet.request_reboot(node)?;
    }
    wait(&fleet, "both nodes to carry the taint at once", || async {
        let (first, second) = (
            marks(nodes[0].clone()).await?,
            marks(nodes[1].clone()).await?,
        );
        Ok((first.0 && second.0).then_some(()))
    })
    .await;
    wait(
        &fleet,
        "a node in its window to carry the cordon's label",
        || async {
            for node in &nodes {
                let in_window = matches!(
                    record(&store, node).await?.map(|r| r.state),
                    Some(NodeState::Maintaining | NodeState::Rebooting | NodeState::Verifying)
                );
                let (_, label) = marks(node.clone()).await?;
                if in_window && label.as_deref() == Some("in-progress") {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        },
    )
    .await;
    for node in &nodes {
        wait_finished(&fleet, &store, node, 1).await;
        assert_rebooted_once(&fleet, &store, node).await?;
    }
    for node in &nodes {
        let node = node.clone();
        wait(&fleet, &format!("{node} to lose its taint"), || async {
            Ok((!marks(node.clone()).await?.0).then_some(()))
        })
        .await;
        ensure!(
            marks(node.clone()).await?.1.as_deref() == Some("done"),
            "{node} is back in service without the uncordon's label"
        );
    }
    fleet.shutdown().await?;
    scope.cleanup().await
}

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
    let Some(env) = env() else {
        return Ok(None);
    };
    let scope = env.scope(prefix).await?;
    let nodes = scope.create_ready_nodes(1).await?;
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
    fleet.shutdown().await?;
    scope.cleanup().await
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

/// A request written into the RotaNode by hand (`kubectl edit`: no wake) is found at the idle
/// agent's periodic re-read. Between re-reads the agent's handle answers its reads from its own
/// last write, so the re-read has to ask the API server.
#[tokio::test]
async fn a_request_edited_in_by_hand_is_found_at_the_next_poll() -> Result<()> {
    let Some(agent) = idle_agent("kube-edited", &["--procedure-poll", "2s"]).await? else {
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
        let idle = record(&store, node)
            .await?
            .is_some_and(|r| r.state == NodeState::Idle && r.slot.is_none());
        Ok((idle && finished == 1).then_some(()))
    })
    .await;
    fleet.shutdown().await?;
    let api: kube::Api<rota_store_kube::Procedure> = kube::Api::all(scope.client());
    api.delete(&name, &DeleteParams::default()).await?;
    scope.cleanup().await
}

/// Procedures on real agents: two procedures for two nodes, one slot. Each node runs both in
/// priority order inside one window (one drain, one release), the one asking for a reboot
/// gets exactly one, and neither runs twice.
#[tokio::test]
async fn procedures_run_once_per_node_in_priority_order_in_one_window() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-procedures").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    let fleet = one_slot_fleet(env, &scope, &nodes, &["--procedure-poll", "300ms"]).await;
    let store = fleet.store().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("procedures.log");
    let names: Vec<rota_core::NodeName> = nodes
        .iter()
        .map(|n| Fleet::node_name(n))
        .collect::<Result<_>>()?;
    // Procedures are cluster-scoped: names and node lists keep parallel tests apart.
    let (low, high) = (
        format!("{}-low", scope.id()),
        format!("{}-high", scope.id()),
    );
    for (name, priority, reboot) in [(&low, "90", true), (&high, "10", false)] {
        let mut spec = rota_core::ProcedureSpec::new(
            name.clone(),
            format!("echo \"$ROTA_NODE {name}\" >> {}\n", log.display()),
        );
        spec.priority = priority.parse()?;
        spec.reboot = reboot;
        spec.nodes = names.clone();
        store.submit_procedure(&spec).await?;
    }
    fleet.start_all()?;
    for node in &nodes {
        wait_finished(&fleet, &store, node, 1).await;
    }
    let lines = std::fs::read_to_string(&log)?;
    for node in &nodes {
        let ran: Vec<&str> = lines
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{node} ")))
            .collect();
        assert_eq!(ran, [high.as_str(), low.as_str()], "{node} in {lines}");
        let entries = history(&store, node).await?;
        for name in [&low, &high] {
            let process = Process::mop(name.clone())?;
            assert_eq!(
                count(&entries, &process, HistoryEvent::Finished),
                1,
                "{entries:?}"
            );
        }
        let windows = entries.iter().filter(|e| e.released).count();
        assert_eq!(
            windows, 1,
            "{node}: one window for all its work: {entries:?}"
        );
        assert_rebooted_once(&fleet, &store, node).await?;
        assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    }
    fleet.shutdown().await?;
    let procedures = scope.client();
    let api: kube::Api<rota_store_kube::Procedure> = kube::Api::all(procedures);
    for name in [&low, &high] {
        api.delete(name, &DeleteParams::default()).await?;
    }
    scope.cleanup().await
}

const POOL_LABEL: &str = "rota-e2e/pool";

async fn join_pool(scope: &Scope, node: &str, pool: &str) -> Result<()> {
    let patch = serde_json::json!({ "metadata": { "labels": { POOL_LABEL: pool } } });
    scope
        .nodes()
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The health gate: the Deployment pods that the first node's drain evicted can run nowhere
/// else (only that node is in their pool), so the node stays in `verifying` with the only slot
/// after its reboot, and the second node does not start. What was evicted is on the Node, and
/// outlives the agent crashing and the node rebooting. Once the pods can run elsewhere, the
/// first node finishes, and only then does the second one start.
#[tokio::test]
async fn evicted_pods_that_are_not_ready_again_hold_the_slot() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-gate-pods").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    let (first, second) = (&nodes[0], &nodes[1]);
    join_pool(&scope, first, "web").await?;
    scope
        .create_deployment_on(
            "web",
            2,
            None,
            BTreeMap::from([(POOL_LABEL.into(), "web".into())]),
        )
        .await?;
    let deployments = scope.api::<Deployment>();
    testenv::wait_for("2 ready replicas of web", PATIENCE, || async {
        let d = deployments.get("web").await?;
        Ok((d.status.and_then(|s| s.ready_replicas) == Some(2)).then_some(()))
    })
    .await?;

    let fleet = fleet(
        env,
        &scope,
        &nodes,
        args(&["--concurrency", "1", "--health-interval", "200ms"]),
    )
    .await;
    let store = fleet.store().await?;
    let watch = DisruptionWatch::start(&scope, 1, BTreeSet::new());
    fleet.hold_reboots(first, true)?;
    fleet.start_all()?;
    wait_started(&fleet, &store).await;
    fleet.request_reboot(first)?;
    wait_state(&fleet, &store, first, NodeState::Rebooting).await;
    // The crash below must come after the reboot command ran: an agent killed between recording
    // the reboot and running the command never runs it again (at most once), and waits out its
    // reboot timeout instead.
    wait(&fleet, "the reboot command", || async {
        Ok((fleet.reboot_commands(first)? == 1).then_some(()))
    })
    .await;
    fleet.request_reboot(second)?;
    wait_state(&fleet, &store, second, NodeState::Queued).await;

    let web = rota_kube_actions::Workload {
        kind: "Deployment".into(),
        namespace: scope.namespace().into(),
        name: "web".into(),
    };
    let evicted = rota_kube_actions::evicted(&scope.client(), first)
        .await?
        .context("no record of the evictions on the Node")?;
    assert_eq!(evicted.controllers, BTreeSet::from([web.clone()]));
    // The agent dies before the machine goes down; then the reboot kills it again.
    fleet.crash_and_restart(first)?;
    fleet.hold_reboots(first, false)?;
    wait_state(&fleet, &store, first, NodeState::Verifying).await;
    let reason = format!("2 of 2 pods of {web} are not Ready");
    wait(&fleet, "the gate's reason in the agent's log", || async {
        Ok(fleet.logs(400).contains(&reason).then_some(()))
    })
    .await;
    // Held: the gate keeps failing, so nothing moves.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = record(&store, first).await?.context("no record")?;
    assert_eq!(held.state, NodeState::Verifying, "{held:?}");
    assert!(held.slot.is_some(), "{held:?}");
    let waiting = record(&store, second).await?.context("no record")?;
    assert_eq!(waiting.state, NodeState::Queued, "{waiting:?}");
    assert!(!unschedulable(&scope, second).await?, "{second} started");
    assert_eq!(
        rota_kube_actions::evicted(&scope.client(), first)
            .await?
            .map(|e| e.controllers),
        Some(BTreeSet::from([web.clone()])),
        "the record outlived the crash and the reboot"
    );

    join_pool(&scope, second, "web").await?;
    wait_finished(&fleet, &store, first, 1).await;
    wait_finished(&fleet, &store, second, 1).await;
    let released = history(&store, first)
        .await?
        .into_iter()
        .find(|e| e.event == HistoryEvent::Finished && e.released)
        .context("no release of the first node")?;
    let started = history(&store, second)
        .await?
        .into_iter()
        .find(|e| e.event == HistoryEvent::Started)
        .context("the second node never started")?;
    assert!(
        started.at >= released.at,
        "{second} started at {} before {first} released at {}",
        started.at,
        released.at
    );
    let seen = watch.seen()?;
    assert!(seen.over_limit.is_empty(), "{seen:?}");
    for node in &nodes {
        assert_rebooted_once(&fleet, &store, node).await?;
        assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
        assert!(
            rota_kube_actions::evicted(&scope.client(), node)
                .await?
                .is_none(),
            "{node} kept its record of evictions after its window"
        );
    }
    fleet.shutdown().await?;
    scope.cleanup().await
}

/// `--health-pdbs`: a PodDisruptionBudget elsewhere in the cluster that is not satisfied keeps
/// the node in `verifying` with its slot; once it is satisfied, the node finishes. The gate
/// reads every budget of the cluster, so an unsatisfied one left behind by another test (one
/// that was killed before its cleanup) holds this node too.
#[tokio::test]
async fn an_unsatisfied_disruption_budget_holds_the_release_with_health_pdbs() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-gate-pdbs").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    // The budget's pod is on the node without an agent: only the budget's state matters.
    let (node, other) = (&nodes[0], &nodes[1]);
    pods_on(&scope, "guarded", std::slice::from_ref(other)).await?;
    create_pdb(&scope, "guarded", Some(2), None, 0).await?;
    let fleet = fleet(
        env,
        &scope,
        std::slice::from_ref(node),
        args(&[
            "--concurrency",
            "1",
            "--drain-force",
            "--health-pdbs",
            "--health-interval",
            "200ms",
        ]),
    )
    .await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    wait_state(&fleet, &store, node, NodeState::Verifying).await;
    let reason = format!(
        "{}/guarded (1 of 2 required pods healthy)",
        scope.namespace()
    );
    wait(
        &fleet,
        "the unsatisfied budget in the agent's log",
        || async { Ok(fleet.logs(400).contains(&reason).then_some(())) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = record(&store, node).await?.context("no record")?;
    assert_eq!(held.state, NodeState::Verifying, "{held:?}");
    assert!(held.slot.is_some(), "{held:?}");

    scope
        .api::<PodDisruptionBudget>()
        .patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "minAvailable": 1 } })),
        )
        .await?;
    wait_finished(&fleet, &store, node, 1).await;
    assert_rebooted_once(&fleet, &store, node).await?;
    assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    fleet.shutdown().await?;
    scope.cleanup().await
}

/// An agent whose service account may do nothing stops as it starts, with one error that names
/// every permission it lacks, and touches nothing: no RotaNode, no cordon.
#[tokio::test]
async fn an_agent_without_its_rbac_permissions_stops_at_once_and_names_them() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-agent-rbac").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    scope.service_account_client(env, "weak").await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    env.write_kubeconfig_as(&scope.client(), scope.namespace(), "weak", &kubeconfig)
        .await?;
    let run = tokio::process::Command::new(ROTA)
        .args(["agent", "--store", "kube", "--node-actions", "kube"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--namespace", scope.namespace(), "--node", &node])
        .arg("--host-root")
        .arg(dir.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(PATIENCE, run)
        .await
        .context("the agent did not stop")??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "the agent ran: {stderr}");
    for expected in [
        "lacks",
        "`get`, `list`, `watch`, `patch` on `nodes`;",
        "`create` on `pods/eviction`;",
        "`get`, `list`, `watch`, `create`, `update`, `patch` on `rotanodes.rota.dev`;",
        &format!(
            "`get`, `list`, `watch`, `create`, `update`, `delete` on \
             `leases.coordination.k8s.io` in namespace {};",
            scope.namespace()
        ),
    ] {
        ensure!(stderr.contains(expected), "no {expected:?} in: {stderr}");
    }
    ensure!(
        stderr.lines().filter(|l| l.contains("error")).count() == 1,
        "one error line: {stderr}"
    );
    // Events are a courtesy: named in a warning, not among what stops the agent.
    ensure!(
        stderr.contains("its Node gets no Events"),
        "no warning about the Events: {stderr}"
    );
    ensure!(
        !stderr.contains("permission(s) it needs: `create`, `patch` on `events"),
        "{stderr}"
    );
    let admin_store = KubeStore::connect(
        scope.client(),
        rota_store_kube::KubeStoreConfig {
            namespace: scope.namespace().into(),
            ..rota_store_kube::KubeStoreConfig::default()
        },
    )
    .await?;
    ensure!(
        admin_store.nodes().await?.is_empty(),
        "the agent wrote a RotaNode"
    );
    ensure!(!unschedulable(&scope, &node).await?, "the agent cordoned");
    scope.cleanup().await
}

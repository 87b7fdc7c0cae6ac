//! Kubernetes mode end to end, the health gate that holds a node's slot after its reboot: one
//! real `rota agent` process per kwok node on the real control plane of `testenv/`, with
//! simulated reboots (see `rota_e2e::fleet`). Pods the drain evicted that are not Ready again,
//! and with `--health-pdbs` any unsatisfied PodDisruptionBudget, keep the node in `verifying`
//! with its slot. Each test has its own namespace and node names, so the tests can share one
//! control plane and run in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use rota_core::{HistoryEvent, NodeState};
use rota_e2e::fleet::DisruptionWatch;
use rota_e2e::testenv::{self, Scope};
use rota_kube_actions::{Workload, evicted};

mod kube_common;

use kube_common::{
    PATIENCE, args, assert_rebooted_once, create_pdb, existing_record, finish, fleet, history,
    pods_on, scope_with_nodes, set_min_available, start, unschedulable, wait, wait_finished,
    wait_rebooted_once, wait_state,
};

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
    let Some((env, scope, nodes)) = scope_with_nodes("kube-gate-pods", 2).await? else {
        return Ok(());
    };
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
    let watch = DisruptionWatch::start(&scope, 1, BTreeSet::new());
    let store = start(&fleet).await?;
    fleet.hold_reboots(first, true)?;
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

    let web = Workload {
        kind: "Deployment".into(),
        namespace: scope.namespace().into(),
        name: "web".into(),
    };
    let evictions = evicted(&scope.client(), first)
        .await?
        .context("no record of the evictions on the Node")?;
    assert_eq!(evictions.controllers, BTreeSet::from([web.clone()]));
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
    let held = existing_record(&store, first).await?;
    assert_eq!(held.state, NodeState::Verifying, "{held:?}");
    assert!(held.slot.is_some(), "{held:?}");
    let waiting = existing_record(&store, second).await?;
    assert_eq!(waiting.state, NodeState::Queued, "{waiting:?}");
    assert!(!unschedulable(&scope, second).await?, "{second} started");
    assert_eq!(
        evicted(&scope.client(), first)
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
            evicted(&scope.client(), node).await?.is_none(),
            "{node} kept its record of evictions after its window"
        );
    }
    finish(fleet, scope).await
}

/// `--health-pdbs`: a PodDisruptionBudget elsewhere in the cluster that is not satisfied keeps
/// the node in `verifying` with its slot; once it is satisfied, the node finishes. The gate
/// reads every budget of the cluster, so an unsatisfied one left behind by another test (one
/// that was killed before its cleanup) holds this node too.
#[tokio::test]
async fn an_unsatisfied_disruption_budget_holds_the_release_with_health_pdbs() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-gate-pdbs", 2).await? else {
        return Ok(());
    };
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
    let held = existing_record(&store, node).await?;
    assert_eq!(held.state, NodeState::Verifying, "{held:?}");
    assert!(held.slot.is_some(), "{held:?}");

    set_min_available(&scope, "guarded", 1).await?;
    wait_rebooted_once(&fleet, &store, &scope, node).await?;
    finish(fleet, scope).await
}

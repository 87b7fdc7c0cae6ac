//! Kubernetes mode end to end, a rollout's turns: one real `rota agent` process per kwok node
//! (`--store kube --node-actions kube`) on the real control plane of `testenv/`, with simulated
//! reboots (see `rota_e2e::fleet`). Nodes take turns under a budget, a drain that times out
//! gives the slot back, so does one whose wait-completed pod outlasts its timeout (naming it), a
//! deleted node's slot is freed, and the marks on the Nodes (a cordon
//! from before, the waiting taint, the window's labels) are what they should be. Each test has
//! its own namespace and node names, so the tests can share one control plane and run in
//! parallel.
//!
//! Pods are bound to their nodes without a controller, so the agents drain with `--drain-force`,
//! except in the budget test, whose pods belong to a Deployment, and the wait-completed test,
//! whose pod is not evicted.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DeleteParams;
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::fleet::{DisruptionWatch, Fleet, FleetOptions};
use rota_e2e::testenv;
use rota_store::{HistoryEntry, HistoryFilter, StoreExt, now_millis};
use rota_store_kube::KubeStore;

mod kube_common;

use kube_common::{
    PATIENCE, ROTA, args, assert_rebooted_once, count, create_pdb, existing_record, finish, fleet,
    history, one_slot_fleet, pods_on, record, scope_with_nodes, start, unschedulable, wait,
    wait_finished, wait_rebooted_once, wait_state,
};

#[tokio::test]
async fn six_nodes_reboot_two_at_a_time_under_a_budget() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-fleet", 6).await? else {
        return Ok(());
    };
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
    let watch = DisruptionWatch::start(&scope, CONCURRENCY, BTreeSet::new());
    let store = start(&fleet).await?;
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
    finish(fleet, scope).await
}

#[tokio::test]
async fn a_drain_that_times_out_gives_the_slot_back_and_backs_off() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-drain-timeout", 3).await? else {
        return Ok(());
    };
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
            reboot_hook: None,
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
        wait_rebooted_once(&fleet, &store, &scope, node).await?;
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
    let record = existing_record(&store, blocked).await?;
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "{record:?}");
    assert!(
        !holds_a_slot(&store, blocked).await?,
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
    finish(fleet, scope).await
}

/// A wait-completed pod (here by `--drain-wait-completed-selector`) still running when the
/// wait-completed timeout passes fails the window like any failed drain: the cause, recorded in
/// the history and shown by `rota status`, names the pod; the pod was never evicted, and the
/// node is uncordoned.
#[tokio::test]
async fn a_wait_completed_pod_past_its_timeout_fails_the_window_naming_it() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-wait-completed", 1).await? else {
        return Ok(());
    };
    let node = &nodes[0];
    pods_on(&scope, "ci", &nodes).await?;
    let before = scope.pods().get("ci-0").await?;
    let fleet = fleet(
        env,
        &scope,
        &nodes,
        args(&[
            "--concurrency",
            "1",
            "--drain-wait-completed-selector",
            "app=ci",
            "--drain-wait-completed-timeout",
            "8s",
            "--backoff-initial",
            "1h",
        ]),
    )
    .await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    let waiting = format!("waiting for 1 pod to complete: {}/ci-0", scope.namespace());
    // While the drain waits, rota status shows what it waits for.
    wait(
        &fleet,
        &format!("{node}'s drain to show its wait"),
        || async {
            let record = existing_record(&store, node).await?;
            Ok(record
                .blocked
                .is_some_and(|b| b.reason == format!("the drain is held: {waiting}"))
                .then_some(()))
        },
    )
    .await;
    wait(&fleet, &format!("{node}'s drain to fail"), || async {
        let entries = history(&store, node).await?;
        Ok((count(&entries, &Process::Reboot, HistoryEvent::Failed) > 0).then_some(()))
    })
    .await;
    let entries = history(&store, node).await?;
    let cause = entries
        .iter()
        .find(|e| e.event == HistoryEvent::Failed)
        .and_then(|e| e.cause.clone())
        .unwrap_or_default();
    ensure!(
        cause.contains(&waiting) && cause.contains("not evicting it"),
        "cause: {cause}"
    );
    let record = existing_record(&store, node).await?;
    ensure!(
        record
            .last_result
            .as_deref()
            .is_some_and(|r| r.contains(&waiting)),
        "rota status shows {:?}",
        record.last_result
    );
    ensure!(
        record.blocked.is_none(),
        "the wait is still shown after the drain: {:?}",
        record.blocked
    );
    // The window's draining step keeps what it waited for (rota history --steps, HELD BY).
    let steps = store
        .steps(&HistoryFilter {
            node: Some(NodeName::new(node.as_str())?),
            ..HistoryFilter::default()
        })
        .await?;
    let draining = steps
        .iter()
        .rfind(|s| s.state == NodeState::Draining)
        .and_then(|s| s.note.clone());
    ensure!(
        draining == Some(format!("the drain is held: {waiting}")),
        "the draining step's note: {draining:?} in {steps:?}"
    );
    let after = scope.pods().get("ci-0").await?;
    ensure!(
        after.metadata.uid == before.metadata.uid && after.metadata.deletion_timestamp.is_none(),
        "the wait-completed pod was evicted: {:?}",
        after.metadata
    );
    ensure!(
        !unschedulable(&scope, node).await?,
        "{node} left cordoned after the failed drain"
    );
    assert_eq!(fleet.reboot_commands(node)?, 0);
    finish(fleet, scope).await
}

/// Whether `node` is among the store's slot holders.
async fn holds_a_slot(store: &KubeStore, node: &str) -> Result<bool> {
    Ok(store
        .slot_holders()
        .await?
        .iter()
        .any(|h| h.node.as_str() == node))
}

#[tokio::test]
async fn the_slot_of_a_deleted_node_is_freed() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-node-deleted", 2).await? else {
        return Ok(());
    };
    let (gone, next) = (&nodes[0], &nodes[1]);
    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = start(&fleet).await?;
    fleet.hold_reboots(gone, true)?;
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
        !holds_a_slot(&store, gone).await?,
        "the deleted node still holds a slot"
    );
    fleet.kill(gone)?;
    finish(fleet, scope).await
}

#[tokio::test]
async fn a_node_cordoned_beforehand_stays_cordoned() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-pre-cordoned", 2).await? else {
        return Ok(());
    };
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
    finish(fleet, scope).await
}

/// kured's node marks through real agents: every node with work carries the
/// `PreferNoSchedule` taint until it is idle again (so both nodes of a rollout that takes them
/// one at a time carry it at once), and each window's cordon and uncordon set their labels.
#[tokio::test]
async fn waiting_nodes_are_tainted_and_windows_label_their_nodes() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-node-marks", 2).await? else {
        return Ok(());
    };
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
    // A window lasts a tenth of a second here, shorter than one look: the reboots are held so
    // that the node in its window stays there until the label has been seen.
    for node in &nodes {
        ensure!(
            marks(node.clone()).await? == (false, None),
            "{node} marked before any work"
        );
        fleet.hold_reboots(node, true)?;
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
        fleet.hold_reboots(node, false)?;
    }
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
    finish(fleet, scope).await
}

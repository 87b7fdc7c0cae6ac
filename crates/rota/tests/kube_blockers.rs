//! Blockers in Kubernetes mode end to end: real `rota agent` processes per kwok node
//! (`--store kube --node-actions kube`) on the real control plane of `testenv/`. A pod matching
//! `--blocking-pod-selector` and the `rota.dev/pause` annotation hold a node back before its
//! slot (the others go on) and, appearing after the drain, before its reboot (slot and cordon
//! kept). Each test has its own namespace and nodes.

use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rota_core::{HistoryEvent, NodeState, Process};
use rota_e2e::fleet::Fleet;
use rota_e2e::testenv::{Scope, TestEnv, app_labels};
use rota_store::{HistoryFilter, NodeRecord, StoreExt};
use rota_store_kube::KubeStore;
use serde_json::json;

const PAUSE: &str = "rota.dev/pause";

mod kube_common;

use kube_common::{
    PATIENCE, ROTA, args, env, fleet, one_slot_fleet, record, start, unschedulable, wait,
};

async fn finished_reboots(store: &KubeStore, node: &str) -> Result<usize> {
    let entries = store
        .history(&HistoryFilter {
            node: Some(Fleet::node_name(node)?),
            ..HistoryFilter::default()
        })
        .await?;
    Ok(entries
        .iter()
        .filter(|e| e.process == Process::Reboot && e.event == HistoryEvent::Finished)
        .count())
}

/// Waits until `node` is idle with one finished reboot and no blocked reason.
async fn wait_rebooted(fleet: &Fleet, store: &KubeStore, node: &str) {
    wait(fleet, &format!("{node} to finish its reboot"), || async {
        let idle = record(store, node)
            .await?
            .is_some_and(|r| r.state == NodeState::Idle && r.blocked.is_none());
        Ok((idle && finished_reboots(store, node).await? == 1).then_some(()))
    })
    .await;
}

/// Waits until `node` is blocked for a reason containing `reason`.
async fn wait_blocked(fleet: &Fleet, store: &KubeStore, node: &str, reason: &str) -> NodeRecord {
    wait(
        fleet,
        &format!("{node} to be blocked by {reason}"),
        || async {
            Ok(record(store, node).await?.filter(|r| {
                r.blocked
                    .as_ref()
                    .is_some_and(|b| b.reason.contains(reason))
            }))
        },
    )
    .await
}

/// Sets (or with `None` removes) the pause annotation on the Node.
async fn annotate(scope: &Scope, node: &str, value: Option<&str>) -> Result<()> {
    let patch = json!({ "metadata": { "annotations": { PAUSE: value } } });
    scope
        .nodes()
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// `rota status -o json` as an operator runs it against the cluster.
fn status(env: &TestEnv, scope: &Scope) -> Result<Vec<serde_json::Value>> {
    let output = Command::new(ROTA)
        .args(["status", "-o", "json", "--store", "kube", "--kubeconfig"])
        .arg(env.kubeconfig())
        .args(["--namespace", scope.namespace()])
        .output()?;
    ensure!(output.status.success(), "rota status: {output:?}");
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn blocked_in_status(rows: &[serde_json::Value], node: &str) -> Option<String> {
    rows.iter()
        .find(|r| r["node"] == node)
        .and_then(|r| r["blocked"]["reason"].as_str())
        .map(str::to_string)
}

#[tokio::test]
async fn a_blocking_pod_holds_its_node_queued_until_it_is_deleted() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-block-pod").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    let (held, other) = (&nodes[0], &nodes[1]);
    scope
        .create_pod_on("backup-0", held, &app_labels("backup"))
        .await?;
    scope.wait_pod_running("backup-0", PATIENCE).await?;
    let fleet = one_slot_fleet(
        env,
        &scope,
        &nodes,
        &[
            "--blocking-pod-selector",
            "app=backup",
            "--blocker-interval",
            "1s",
        ],
    )
    .await;
    let store = start(&fleet).await?;
    fleet.request_reboot(held)?;
    let blocked = wait_blocked(&fleet, &store, held, "backup-0").await;
    assert_eq!(blocked.state, NodeState::Queued, "{blocked:?}");
    // Queued first, the held node does not hold the queue up: the other goes on.
    fleet.request_reboot(other)?;
    wait_rebooted(&fleet, &store, other).await;
    let record = record(&store, held).await?.expect("record");
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None, "a blocked node takes no slot");
    assert!(!unschedulable(&scope, held).await?, "never cordoned");
    assert_eq!(fleet.reboot_commands(held)?, 0);
    let reason = blocked_in_status(&status(env, &scope)?, held);
    assert!(
        reason.as_deref().is_some_and(|r| r.contains("app=backup")),
        "rota status says why: {reason:?}"
    );
    scope
        .pods()
        .delete("backup-0", &DeleteParams::default())
        .await?;
    wait_rebooted(&fleet, &store, held).await;
    assert_eq!(fleet.reboot_commands(held)?, 1);
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn the_pause_annotation_holds_one_node_while_the_others_go_on() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-block-annotation").await?;
    let nodes = scope.create_ready_nodes(3).await?;
    let (held, others) = (&nodes[0], &nodes[1..]);
    annotate(&scope, held, Some("disk replacement")).await?;
    let fleet = fleet(
        env,
        &scope,
        &nodes,
        args(&["--concurrency", "1", "--blocker-interval", "1s"]),
    )
    .await;
    let store = start(&fleet).await?;
    for node in &nodes {
        fleet.request_reboot(node)?;
    }
    for node in others {
        wait_rebooted(&fleet, &store, node).await;
    }
    let record = wait_blocked(
        &fleet,
        &store,
        held,
        "node annotation rota.dev/pause: disk replacement",
    )
    .await;
    assert_eq!(record.state, NodeState::Queued, "{record:?}");
    assert_eq!(record.slot, None);
    assert_eq!(fleet.reboot_commands(held)?, 0);
    annotate(&scope, held, None).await?;
    wait_rebooted(&fleet, &store, held).await;
    fleet.shutdown().await?;
    scope.cleanup().await
}

#[tokio::test]
async fn a_blocker_that_appears_after_the_drain_holds_the_reboot_with_the_slot() -> Result<()> {
    let Some(env) = env() else {
        return Ok(());
    };
    let scope = env.scope("kube-block-reboot").await?;
    let nodes = scope.create_ready_nodes(1).await?;
    let node = &nodes[0];
    // A budget that allows no eviction keeps the drain going while the blocker appears.
    scope
        .create_pod_on("slow-0", node, &app_labels("slow"))
        .await?;
    scope.wait_pod_running("slow-0", PATIENCE).await?;
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some("slow".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(app_labels("slow")),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };
    let pdbs = scope.api::<PodDisruptionBudget>();
    pdbs.create(&PostParams::default(), &pdb).await?;
    let fleet = one_slot_fleet(env, &scope, &nodes, &["--blocker-interval", "1s"]).await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    wait(&fleet, &format!("{node} to drain"), || async {
        Ok(record(&store, node)
            .await?
            .filter(|r| r.state == NodeState::Draining))
    })
    .await;
    annotate(&scope, node, Some("hold the reboot")).await?;
    pdbs.delete("slow", &DeleteParams::default()).await?;
    let blocked = wait_blocked(&fleet, &store, node, "hold the reboot").await;
    assert_eq!(blocked.state, NodeState::Maintaining, "{blocked:?}");
    // Several checks later: still held, with its slot and its cordon, and not rebooted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let record = record(&store, node).await?.expect("record");
    assert_eq!(record.state, NodeState::Maintaining, "{record:?}");
    assert!(record.slot.is_some(), "the slot is kept: {record:?}");
    assert!(unschedulable(&scope, node).await?, "the cordon is kept");
    assert_eq!(fleet.reboot_commands(node)?, 0);
    annotate(&scope, node, None).await?;
    wait_rebooted(&fleet, &store, node).await;
    assert_eq!(fleet.reboot_commands(node)?, 1);
    assert!(!unschedulable(&scope, node).await?, "uncordoned after");
    fleet.shutdown().await?;
    scope.cleanup().await
}

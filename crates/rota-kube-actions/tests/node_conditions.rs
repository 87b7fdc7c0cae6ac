//! [`KubeActions`] sets the node lifecycle conditions of KEP-5683 on its Node through a window:
//! `MaintenancePlanned` while queued, `DrainInProgress` while the drain runs (held up here by
//! a PodDisruptionBudget, so that the test sees it), `Drained` after, `MaintenanceInProgress`
//! from the cordon through the reboot, and each `False` again once the node is back in service
//! and idle; the conditions kwok keeps as the kubelet would (Ready and the pressures) stay as
//! they were. Without `--node-conditions` nothing is written.
//!
//! Against a real control plane (testenv/): kube-apiserver with the disruption controller,
//! kwok playing the kubelets. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

mod common;

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::Api;
use rota_actions::NodeActions;
use rota_core::NodeName;
use rota_e2e::testenv::{TestEnv, wait_for};
use rota_kube_actions::{
    DRAIN_IN_PROGRESS, DRAINED, KubeActions, MAINTENANCE_IN_PROGRESS, MAINTENANCE_PLANNED,
};

use common::{TIMEOUT, bare_pods, create_pdb, forced, same_pod_exists, set_min_available};

const OURS: [&str; 4] = [
    MAINTENANCE_PLANNED,
    DRAIN_IN_PROGRESS,
    DRAINED,
    MAINTENANCE_IN_PROGRESS,
];

/// The Node's conditions by type.
async fn conditions(nodes: &Api<Node>, node: &str) -> Result<BTreeMap<String, NodeCondition>> {
    let object = nodes.get(node).await?;
    Ok(object
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_.clone(), c))
        .collect())
}

/// The status of each of rota's four conditions, `-` for one not listed, in [`OURS`]' order.
fn statuses(conditions: &BTreeMap<String, NodeCondition>) -> [String; 4] {
    OURS.map(|t| conditions.get(t).map_or("-".into(), |c| c.status.clone()))
}

/// What a condition says apart from its heartbeat (which kwok renews for its own).
fn said(c: &NodeCondition) -> (String, Option<String>, Option<String>, Option<String>) {
    (
        c.status.clone(),
        c.reason.clone(),
        c.message.clone(),
        c.last_transition_time.as_ref().map(|t| t.0.to_string()),
    )
}

#[tokio::test]
async fn a_window_sets_the_node_lifecycle_conditions_and_clears_them_after() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("node-conditions").await?;
    let nodes_created = scope.create_ready_nodes(2).await?;
    let (node, other) = (&nodes_created[0], &nodes_created[1]);
    let nodes = scope.nodes();
    // One pod that a budget holds on the node, so that the drain waits and can be seen.
    let pods = bare_pods(&scope, "web", node, 1).await?;
    create_pdb(&scope, "web", 1).await?;
    scope.wait_pdb("web", 0, TIMEOUT).await?;

    // Before: kwok's kubelet conditions, none of rota's.
    let before = conditions(&nodes, node).await?;
    ensure!(
        before.get("Ready").is_some_and(|c| c.status == "True"),
        "{before:?}"
    );
    ensure!(statuses(&before) == ["-", "-", "-", "-"], "{before:?}");
    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(node.clone())?,
        forced(),
        "true".into(),
        None,
    );
    let step = |expected: [&'static str; 4], what: &'static str| {
        let nodes = nodes.clone();
        async move {
            let now = conditions(&nodes, node).await?;
            ensure!(
                statuses(&now) == expected,
                "{what}: MaintenancePlanned, DrainInProgress, Drained, MaintenanceInProgress are \
                 {:?}, not {expected:?}: {now:?}",
                statuses(&now)
            );
            for type_ in OURS {
                if let Some(c) = now.get(type_) {
                    let reason = c.reason.as_deref().unwrap_or_default();
                    ensure!(reason.starts_with("Rota"), "{what}: {c:?}");
                    ensure!(
                        c.message.as_deref().is_some_and(|m| m.contains("rota")),
                        "{what}: {c:?}"
                    );
                    ensure!(
                        c.last_transition_time.is_some() && c.last_heartbeat_time.is_some(),
                        "{what}: {c:?}"
                    );
                }
            }
            anyhow::Ok(now)
        }
    };

    // Queued.
    actions.mark_pending(true).await?;
    step(["True", "-", "-", "-"], "queued").await?;
    // The window opens with the cordon of the drain delay...
    actions.cordon().await?;
    let cordoned = step(["True", "-", "-", "True"], "cordoned").await?;
    let opened = cordoned[MAINTENANCE_IN_PROGRESS]
        .last_transition_time
        .clone();
    ensure!(cordoned[MAINTENANCE_IN_PROGRESS].reason.as_deref() == Some("RotaCordoned"));
    // ...then the drain, which the budget holds up...
    let draining = async {
        tokio::time::timeout(TIMEOUT, actions.drain())
            .await
            .context("the drain did not finish")?
            .context("the drain failed")
    };
    let observe = async {
        wait_for("DrainInProgress True", TIMEOUT, || async {
            let now = conditions(&nodes, node).await?;
            Ok(now
                .get(DRAIN_IN_PROGRESS)
                .is_some_and(|c| c.status == "True")
                .then_some(()))
        })
        .await?;
        let now = step(["True", "True", "-", "True"], "draining").await?;
        ensure!(
            now[MAINTENANCE_IN_PROGRESS].last_transition_time == opened,
            "MaintenanceInProgress moved its transition time without a change of status: {now:?}"
        );
        ensure!(
            same_pod_exists(&scope, &pods[0]).await?,
            "the budget let the pod go"
        );
        set_min_available(&scope, "web", 0).await
    };
    tokio::try_join!(draining, observe)?;
    // ...and is over.
    step(["True", "False", "True", "True"], "drained").await?;
    // The reboot.
    actions.reboot_starting(1_717_245_296_789).await?;
    let rebooting = step(["True", "False", "True", "True"], "rebooting").await?;
    ensure!(rebooting[MAINTENANCE_IN_PROGRESS].reason.as_deref() == Some("RotaRebooting"));
    ensure!(rebooting[MAINTENANCE_IN_PROGRESS].last_transition_time == opened);
    // Back in service: False, and still listed; the node is still queued until it is idle.
    actions.return_to_service(true).await?;
    let back = step(["True", "False", "False", "False"], "back in service").await?;
    ensure!(back[MAINTENANCE_IN_PROGRESS].reason.as_deref() == Some("RotaBackInService"));
    ensure!(!actions.is_cordoned().await?, "not uncordoned");
    actions.mark_pending(false).await?;
    let idle = step(["False", "False", "False", "False"], "idle").await?;
    // An idle agent's start (the mark again) writes nothing more.
    actions.mark_pending(false).await?;
    let again = conditions(&nodes, node).await?;
    for type_ in OURS {
        ensure!(
            again[type_].last_heartbeat_time == idle[type_].last_heartbeat_time,
            "{type_} was written again: {:?}",
            again[type_]
        );
    }

    // kwok's (the kubelet's) conditions are as they were.
    for (type_, was) in before.iter().filter(|(t, _)| !OURS.contains(&t.as_str())) {
        let now = again
            .get(type_)
            .with_context(|| format!("{type_} is gone: {again:?}"))?;
        ensure!(
            said(now) == said(was),
            "{type_} changed: {was:?} -> {now:?}"
        );
    }

    // A window without a drain or a reboot (a procedure that needs neither) is maintenance in
    // progress too, from its procedures' start until it is back in service.
    actions.mark_pending(true).await?;
    step(["True", "False", "False", "False"], "queued again").await?;
    actions.maintenance_started().await;
    let maintaining = step(["True", "False", "False", "True"], "maintaining").await?;
    ensure!(
        maintaining[MAINTENANCE_IN_PROGRESS].reason.as_deref() == Some("RotaMaintaining"),
        "{maintaining:?}"
    );
    actions.return_to_service(false).await?;
    step(
        ["True", "False", "False", "False"],
        "back after maintenance",
    )
    .await?;
    actions.mark_pending(false).await?;
    step(
        ["False", "False", "False", "False"],
        "idle after maintenance",
    )
    .await?;

    // Without --node-conditions: a whole window writes none of them.
    let plain = KubeActions::new(
        scope.client(),
        NodeName::new(other.clone())?,
        forced(),
        "true".into(),
        None,
    )
    .node_conditions(false);
    plain.mark_pending(true).await?;
    tokio::time::timeout(TIMEOUT, plain.drain())
        .await
        .context("the drain without conditions did not finish")??;
    plain.maintenance_started().await;
    plain.reboot_starting(1_717_245_296_789).await?;
    plain.return_to_service(true).await?;
    plain.mark_pending(false).await?;
    let untouched = conditions(&nodes, other).await?;
    ensure!(
        statuses(&untouched) == ["-", "-", "-", "-"],
        "{untouched:?}"
    );
    scope.cleanup().await
}

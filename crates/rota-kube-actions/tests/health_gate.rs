//! The health gate against a real control plane (testenv/): the drain's record of what it
//! evicted on the Node, the gate's count of the evicted workloads' Ready pods, and the
//! PodDisruptionBudgets. kube-controller-manager recreates the Deployment's pods, the scheduler
//! places them, kwok makes them Ready. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rota_e2e::testenv::{Scope, TestEnv, app_labels, pod_spec, wait_for};
use rota_kube_actions::{DrainOptions, Error, Workload};
use serde_json::json;

mod common;

const TIMEOUT: Duration = Duration::from_secs(120);

fn forced() -> DrainOptions {
    DrainOptions {
        force: true,
        retry_initial: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
        poll_interval: Duration::from_millis(200),
        ..DrainOptions::default()
    }
}

/// A StatefulSet `db` of one replica, and its pod `db-0` bound to `node` as the StatefulSet's
/// controller would make it (testenv runs no StatefulSet controller).
async fn stateful_set_on(scope: &Scope, node: &str) -> Result<()> {
    let labels = app_labels("db");
    let set = StatefulSet {
        metadata: ObjectMeta {
            name: Some("db".into()),
            ..ObjectMeta::default()
        },
        spec: StatefulSetSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec()),
            },
            ..StatefulSetSpec::default()
        },
        ..StatefulSet::default()
    };
    let set = scope
        .api::<StatefulSet>()
        .create(&PostParams::default(), &set)
        .await?;
    let mut all = scope.labels();
    all.extend(labels);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("db-0".into()),
            labels: Some(all),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "db".into(),
                uid: set.uid().context("a StatefulSet without a uid")?,
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..pod_spec()
        }),
        ..Pod::default()
    };
    scope.pods().create(&PostParams::default(), &pod).await?;
    scope.wait_pod_running("db-0", TIMEOUT).await?;
    Ok(())
}

/// The gate as the health check runs it: on the Node its `Ready` check read.
async fn check_gate(client: &Client, node: &str, pdbs: bool) -> rota_kube_actions::Result<()> {
    let object = rota_kube_actions::check_ready(client, node).await?;
    rota_kube_actions::check_gate(client, &object, pdbs).await
}

async fn not_restored(scope: &Scope, node: &str) -> Result<Vec<String>> {
    Ok(rota_kube_actions::workloads_not_restored(&scope.client(), node).await?)
}

#[tokio::test]
async fn the_gate_waits_for_the_evicted_workloads_to_be_whole_again() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("gate-workloads").await?;
    let client = scope.client();
    let ns = scope.namespace().to_string();
    let node = scope.create_ready_nodes(1).await?.remove(0);
    scope.create_deployment("web", 2, None).await?;
    wait_for("2 Ready pods of web", TIMEOUT, || async {
        let pods = scope
            .pods()
            .list(&kube::api::ListParams::default().labels("app=web"))
            .await?;
        let running = pods
            .items
            .iter()
            .filter(|p| rota_e2e::testenv::pod_is_running(p))
            .count();
        Ok((running == 2).then_some(()))
    })
    .await?;
    stateful_set_on(&scope, &node).await?;
    scope
        .create_pod_on("loose", &node, &app_labels("loose"))
        .await?;
    scope.wait_pod_running("loose", TIMEOUT).await?;
    ensure!(rota_kube_actions::evicted(&client, &node).await?.is_none());

    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &forced()))
        .await
        .context("the drain did not finish")??;

    // The record names the Deployment (not its ReplicaSet) and the StatefulSet, and counts the
    // pod without a controller, which nothing brings back.
    let evicted = rota_kube_actions::evicted(&client, &node)
        .await?
        .context("no record of the evictions")?;
    let workload = |kind: &str, name: &str| Workload {
        kind: kind.into(),
        namespace: ns.clone(),
        name: name.into(),
    };
    assert_eq!(evicted.count, 4, "{evicted:?}");
    assert_eq!(evicted.unmanaged, 1, "{evicted:?}");
    assert_eq!(
        evicted.controllers,
        BTreeSet::from([workload("Deployment", "web"), workload("StatefulSet", "db")])
    );

    // The only node is cordoned: the Deployment's replacements stay Pending, and nothing
    // recreates db-0.
    let web = format!("2 of 2 pods of Deployment {ns}/web are not Ready");
    let db = format!("1 of 1 pods of StatefulSet {ns}/db are not Ready");
    assert_eq!(
        not_restored(&scope, &node).await?,
        [web.clone(), db.clone()]
    );
    match check_gate(&client, &node, false).await {
        Err(e @ Error::NotRestored { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&web) && message.contains(&db), "{message}");
        }
        other => bail!("the gate passed or broke: {other:?}"),
    }

    // A second node takes the Deployment's pods; the StatefulSet is deleted (its controller
    // is gone: nothing to wait for).
    let spare = scope.create_node("spare").await?;
    scope.wait_node_ready(&spare, TIMEOUT).await?;
    let web_back = wait_for("web whole again", TIMEOUT, || async {
        let left = not_restored(&scope, &node).await?;
        Ok((!left.contains(&web)).then_some(left))
    })
    .await?;
    assert_eq!(web_back, std::slice::from_ref(&db));
    scope
        .api::<StatefulSet>()
        .delete("db", &DeleteParams::default())
        .await?;
    wait_for("the gate to pass", TIMEOUT, || async {
        Ok(not_restored(&scope, &node).await?.is_empty().then_some(()))
    })
    .await?;
    check_gate(&client, &node, false).await?;

    // The record outlives the drain until the uncordon ends the window.
    ensure!(rota_kube_actions::evicted(&client, &node).await?.is_some());
    rota_kube_actions::uncordon(&client, &node, &rota_kube_actions::NodeLabels::default()).await?;
    ensure!(
        rota_kube_actions::evicted(&client, &node).await?.is_none(),
        "the uncordon kept the record"
    );
    ensure!(!rota_kube_actions::is_cordoned(&client, &node).await?);
    scope.cleanup().await
}

#[tokio::test]
async fn a_repeated_drain_keeps_the_first_drains_record() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("gate-repeat").await?;
    let client = scope.client();
    let node = scope.create_ready_nodes(1).await?.remove(0);
    stateful_set_on(&scope, &node).await?;
    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &forced()))
        .await
        .context("the first drain did not finish")??;
    let first = rota_kube_actions::evicted(&client, &node)
        .await?
        .context("no record")?;
    // The drain again, as after an agent restart: db-0 is gone, nothing is left to evict, and
    // the record still names the StatefulSet.
    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &forced()))
        .await
        .context("the second drain did not finish")??;
    let second = rota_kube_actions::evicted(&client, &node)
        .await?
        .context("no record")?;
    assert_eq!(first, second);
    assert_eq!(second.count, 1);
    scope.cleanup().await
}

#[tokio::test]
async fn unsatisfied_disruption_budgets_are_named_until_they_are_satisfied() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("gate-pdbs").await?;
    let client = scope.client();
    let node = scope.create_ready_nodes(1).await?.remove(0);
    scope
        .create_pod_on("solo-0", &node, &app_labels("solo"))
        .await?;
    scope.wait_pod_running("solo-0", TIMEOUT).await?;
    // Two healthy pods wanted, one there.
    common::create_pdb(&scope, "solo", 2).await?;
    scope.wait_pdb("solo", 0, TIMEOUT).await?;

    // Other tests' budgets share the cluster: look for this one only.
    let ours = format!("{}/solo (1 of 2 required pods healthy)", scope.namespace());
    let unsatisfied = rota_kube_actions::unsatisfied_pdbs(&client).await?;
    assert!(unsatisfied.contains(&ours), "{unsatisfied:?}");
    match check_gate(&client, &node, true).await {
        Err(e @ Error::NotRestored { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("PodDisruptionBudgets not satisfied: ")
                    && message.contains(&format!("{}/solo", scope.namespace())),
                "{message}"
            );
        }
        other => bail!("the gate passed or broke: {other:?}"),
    }

    scope
        .api::<PodDisruptionBudget>()
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "minAvailable": 1 } })),
        )
        .await?;
    scope.wait_pdb("solo", 0, TIMEOUT).await?;
    let unsatisfied = rota_kube_actions::unsatisfied_pdbs(&client).await?;
    let prefix = format!("{}/", scope.namespace());
    assert!(
        !unsatisfied.iter().any(|u| u.starts_with(&prefix)),
        "{unsatisfied:?}"
    );
    scope.cleanup().await
}

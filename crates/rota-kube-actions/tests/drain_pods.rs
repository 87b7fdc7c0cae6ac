//! Which pods the drain evicts, refuses or leaves alone, and how it waits for them to be gone.
//!
//! Against a real control plane (testenv/): kube-apiserver with the disruption,
//! deployment and daemonset controllers, kwok playing the kubelets. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod, PodSpec, PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use rota_e2e::testenv::{self, TestEnv, app_labels, wait_for};
use rota_kube_actions::{DrainOptions, Error, MIRROR_ANNOTATION, RefusalReason};
use serde_json::json;

use common::{TIMEOUT, bare_pods, forced, node_of, options, running_pods, same_pod_exists};

#[tokio::test]
async fn daemonset_mirror_and_finished_pods_are_left_alone() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-leave-alone").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let client = scope.client();

    let daemonset = DaemonSet {
        metadata: ObjectMeta {
            name: Some("logs".into()),
            ..ObjectMeta::default()
        },
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(app_labels("logs")),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app_labels("logs")),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    node_selector: Some(scope.labels()),
                    ..testenv::pod_spec()
                }),
            },
            ..DaemonSetSpec::default()
        },
        ..DaemonSet::default()
    };
    scope
        .api::<DaemonSet>()
        .create(&PostParams::default(), &daemonset)
        .await?;
    let ds_pod = running_pods(&scope, "logs", 1).await?.remove(0);
    ensure!(node_of(&ds_pod).as_deref() == Some(node.as_str()));

    // What the kubelet publishes for a static pod.
    let mirror = Pod {
        metadata: ObjectMeta {
            name: Some(format!("etcd-{node}")),
            annotations: Some(BTreeMap::from([(
                MIRROR_ANNOTATION.to_string(),
                "0123456789abcdef".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.clone()),
            ..testenv::pod_spec()
        }),
        ..Pod::default()
    };
    let mirror = scope
        .pods()
        .create(&PostParams::default(), &mirror)
        .await
        .context("creating a mirror pod")?;

    // A bare pod that has finished: nothing runs, nothing to evict. It is marked Succeeded
    // once kwok has started it, so that kwok does not write its status at the same time.
    scope
        .create_pod_on("job-done", &node, &BTreeMap::new())
        .await?;
    scope.wait_pod_running("job-done", TIMEOUT).await?;
    scope
        .pods()
        .patch_status(
            "job-done",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": "Succeeded" } })),
        )
        .await
        .context("marking job-done Succeeded")?;
    let finished = scope.pods().get("job-done").await?;
    ensure!(finished.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"));

    let evicted = bare_pods(&scope, "web", &node, 1).await?.remove(0);

    // By default only web-0 is refused (it has no controller): the DaemonSet's, the mirror
    // and the finished pod have none either, but are not the drain's to evict at all.
    match tokio::time::timeout(
        TIMEOUT,
        rota_kube_actions::drain(&client, &node, &options()),
    )
    .await
    {
        Ok(Err(Error::Refused { refusals, .. }))
            if refusals.len() == 1 && refusals[0].pod.ends_with("/web-0") => {}
        other => bail!("expected web-0 alone to be refused, got {other:?}"),
    }
    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &forced()))
        .await
        .context("the forced drain did not finish")??;

    ensure!(
        !same_pod_exists(&scope, &evicted).await?,
        "web-0 was not evicted"
    );
    for pod in [&ds_pod, &mirror, &finished] {
        ensure!(
            same_pod_exists(&scope, pod).await?,
            "{} was disturbed",
            pod.name_any()
        );
    }
    scope.cleanup().await
}

#[tokio::test]
async fn emptydir_and_unmanaged_pods_are_refused_unless_allowed() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-refuse").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let client = scope.client();
    let bare = bare_pods(&scope, "bare", &node, 1).await?.remove(0);
    let scratch_volume = Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    scope
        .create_deployment("cache", 1, Some(vec![scratch_volume]))
        .await?;
    let cache = running_pods(&scope, "cache", 1).await?.remove(0);
    let ns = scope.namespace();

    let refused = |options: DrainOptions| {
        let client = client.clone();
        let node = node.clone();
        async move {
            match tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &options))
                .await
            {
                Ok(Err(Error::Refused { refusals, .. })) => Ok(refusals),
                other => bail!("expected a refusal, got {other:?}"),
            }
        }
    };

    let refusals = refused(options()).await?;
    let named: Vec<(String, RefusalReason)> = refusals
        .iter()
        .map(|r| (r.pod.clone(), r.reason.clone()))
        .collect();
    ensure!(
        named
            == vec![
                (
                    format!("{ns}/{}", bare.name_any()),
                    RefusalReason::Unmanaged
                ),
                (
                    format!("{ns}/{}", cache.name_any()),
                    RefusalReason::EmptyDir
                ),
            ]
            || named
                == vec![
                    (
                        format!("{ns}/{}", cache.name_any()),
                        RefusalReason::EmptyDir
                    ),
                    (
                        format!("{ns}/{}", bare.name_any()),
                        RefusalReason::Unmanaged
                    ),
                ],
        "unexpected refusals {named:?}"
    );
    let message = Error::Refused {
        node: node.clone(),
        refusals,
    }
    .to_string();
    ensure!(
        message.contains(&bare.name_any()) && message.contains(&cache.name_any()),
        "the error does not name the pods: {message}"
    );
    ensure!(same_pod_exists(&scope, &bare).await? && same_pod_exists(&scope, &cache).await?);

    let refusals = refused(forced()).await?;
    ensure!(
        refusals.len() == 1 && refusals[0].reason == RefusalReason::EmptyDir,
        "force alone must still refuse the emptyDir pod: {refusals:?}"
    );
    let refusals = refused(DrainOptions {
        delete_emptydir_data: true,
        ..options()
    })
    .await?;
    ensure!(
        refusals.len() == 1 && refusals[0].reason == RefusalReason::Unmanaged,
        "delete-emptydir-data alone must still refuse the bare pod: {refusals:?}"
    );

    let both = DrainOptions {
        force: true,
        delete_emptydir_data: true,
        ..options()
    };
    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &both))
        .await
        .context("the drain with both flags did not finish")??;
    ensure!(!same_pod_exists(&scope, &bare).await?);
    ensure!(!same_pod_exists(&scope, &cache).await?);
    scope.cleanup().await
}

#[tokio::test]
async fn the_drain_waits_for_the_evicted_uid_not_the_name() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-uid").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let client = scope.client();
    let pods = scope.pods();
    let finalizer = "rota.dev/test-hold";

    // A finalizer keeps the evicted pod Terminating until the test lets it go.
    let first = bare_pods(&scope, "db", &node, 1).await?.remove(0);
    pods.patch(
        "db-0",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": [finalizer] } })),
    )
    .await?;
    let draining = tokio::spawn({
        let client = client.clone();
        let node = node.clone();
        async move { rota_kube_actions::drain(&client, &node, &forced()).await }
    });
    wait_for("db-0 Terminating", TIMEOUT, || async {
        Ok(pods
            .get("db-0")
            .await?
            .metadata
            .deletion_timestamp
            .is_some()
            .then_some(()))
    })
    .await?;
    ensure!(
        !draining.is_finished(),
        "the drain ended while the evicted pod still exists: {:?}",
        draining.await
    );

    // Let it go and at once put a namesake on the node, as a StatefulSet would (binding it
    // directly, past the cordon). The drain must finish: the pod it evicted is gone.
    pods.patch(
        "db-0",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await?;
    scope.wait_pod_gone("db-0", TIMEOUT).await?;
    let second = scope
        .create_pod_on("db-0", &node, &app_labels("db"))
        .await?;
    ensure!(second.uid() != first.uid());
    tokio::time::timeout(TIMEOUT, draining)
        .await
        .context("the drain waited on the namesake of the evicted pod")??
        .context("the drain failed")?;
    ensure!(
        same_pod_exists(&scope, &second).await?,
        "the namesake created after the drain's list was evicted too"
    );
    scope.cleanup().await
}

/// A pod that a finalizer keeps terminating: with the skip, the drain stops waiting for it
/// once it is that long past its deletion deadline, and finishes; without, it waits for ever
/// (only the caller's timeout ends it).
#[tokio::test]
async fn a_pod_stuck_terminating_is_not_waited_for_past_the_skip() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-stuck").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let pods = bare_pods(&scope, "held", &node, 1).await?;
    let hold = |finalizers: serde_json::Value| {
        let scope = &scope;
        async move {
            scope
                .pods()
                .patch(
                    "held-0",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": { "finalizers": finalizers } })),
                )
                .await
        }
    };
    hold(json!(["rota.dev/test-hold"])).await?;
    let client = scope.client();
    let skipping = DrainOptions {
        grace_period: Some(Duration::ZERO),
        skip_wait_for_delete: Some(Duration::from_secs(2)),
        ..forced()
    };
    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &skipping))
        .await
        .context("the drain waited for the stuck pod")??;
    let stuck = scope.pods().get("held-0").await?;
    ensure!(
        stuck.uid() == pods[0].uid() && stuck.metadata.deletion_timestamp.is_some(),
        "the held pod should still be terminating: {:?}",
        stuck.metadata
    );

    let waiting = DrainOptions {
        grace_period: Some(Duration::ZERO),
        ..forced()
    };
    let drained = tokio::time::timeout(
        Duration::from_secs(3),
        rota_kube_actions::drain(&client, &node, &waiting),
    )
    .await;
    ensure!(
        drained.is_err(),
        "without the skip the drain ended: {drained:?}"
    );
    hold(serde_json::Value::Null).await?;
    scope.cleanup().await
}

#[tokio::test]
async fn the_drain_hears_of_each_deletion_without_listing_again() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-watch").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    bare_pods(&scope, "web", &node, 3).await?;
    // A list every hour: only the watch can end this drain within the test's bound.
    let options = DrainOptions {
        poll_interval: Duration::from_secs(3600),
        ..forced()
    };
    tokio::time::timeout(
        TIMEOUT,
        rota_kube_actions::drain(&scope.client(), &node, &options),
    )
    .await
    .context("the drain waited for its next list")?
    .context("the drain failed")?;
    let left = scope
        .pods()
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    ensure!(left.items.is_empty(), "pods left: {:?}", left.items.len());
    scope.cleanup().await
}

/// kured's `--drain-pod-selector`: only the pods matching the selector are evicted (and
/// waited for); the others stay on the cordoned node.
#[tokio::test]
async fn only_the_pods_matching_the_drain_pod_selector_are_evicted() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-selector").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let web = bare_pods(&scope, "web", &node, 2).await?;
    let db = bare_pods(&scope, "db", &node, 1).await?;
    let selecting = DrainOptions {
        pod_selector: Some("app in (web)".into()),
        ..forced()
    };
    tokio::time::timeout(
        TIMEOUT,
        rota_kube_actions::drain(&scope.client(), &node, &selecting),
    )
    .await
    .context("the drain did not finish")??;
    for pod in &web {
        ensure!(
            !same_pod_exists(&scope, pod).await?,
            "{} matches the selector and was not evicted",
            pod.name_any()
        );
    }
    let kept = scope.pods().get(&db[0].name_any()).await?;
    ensure!(
        kept.uid() == db[0].uid() && kept.metadata.deletion_timestamp.is_none(),
        "db-0 does not match the selector and was disturbed: {:?}",
        kept.metadata
    );
    ensure!(
        rota_kube_actions::is_cordoned(&scope.client(), &node).await?,
        "the node is not cordoned"
    );
    scope.cleanup().await
}

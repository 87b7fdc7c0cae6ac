//! The drain against a real control plane (testenv/): kube-apiserver with the disruption,
//! deployment and daemonset controllers, kwok playing the kubelets. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod, PodSpec, PodTemplateSpec, Volume};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use rota_agent::NodeActions;
use rota_core::NodeName;
use rota_e2e::proxy::Proxy;
use rota_e2e::testenv::{self, Scope, TestEnv, app_labels, pod_is_running, wait_for};
use rota_kube_actions::{DrainOptions, Error, KubeActions, MIRROR_ANNOTATION, RefusalReason};
use serde_json::json;
use tokio::sync::watch;

/// How long a test waits for the cluster before it fails (a bound, not an expectation).
const TIMEOUT: Duration = Duration::from_secs(120);

/// Quick retries and polls, so that the tests react soon after the cluster changes.
fn options() -> DrainOptions {
    DrainOptions {
        retry_initial: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
        poll_interval: Duration::from_millis(200),
        ..DrainOptions::default()
    }
}

fn forced() -> DrainOptions {
    DrainOptions {
        force: true,
        ..options()
    }
}

async fn create_pdb(scope: &Scope, app: &str, min_available: i32) -> Result<()> {
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(app.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(LabelSelector {
                match_labels: Some(app_labels(app)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };
    scope
        .api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await
        .with_context(|| format!("creating PDB {app}"))?;
    Ok(())
}

async fn set_min_available(scope: &Scope, app: &str, min_available: i32) -> Result<()> {
    scope
        .api::<PodDisruptionBudget>()
        .patch(
            app,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "minAvailable": min_available } })),
        )
        .await?;
    Ok(())
}

/// `n` bare pods `<app>-<i>` on `node`, Running.
async fn bare_pods(scope: &Scope, app: &str, node: &str, n: usize) -> Result<Vec<Pod>> {
    let mut pods = Vec::new();
    for i in 0..n {
        let name = format!("{app}-{i}");
        scope.create_pod_on(&name, node, &app_labels(app)).await?;
        pods.push(scope.wait_pod_running(&name, TIMEOUT).await?);
    }
    Ok(pods)
}

/// The app's Running pods once there are `n` of them.
async fn running_pods(scope: &Scope, app: &str, n: usize) -> Result<Vec<Pod>> {
    let pods = scope.pods();
    wait_for(&format!("{n} Running pod(s) of {app}"), TIMEOUT, || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?;
        let running: Vec<Pod> = list.items.into_iter().filter(pod_is_running).collect();
        Ok((running.len() == n).then_some(running))
    })
    .await
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

async fn same_pod_exists(scope: &Scope, pod: &Pod) -> Result<bool> {
    let current = scope.pods().get_opt(&pod.name_any()).await?;
    Ok(current.is_some_and(|p| p.uid() == pod.uid()))
}

#[tokio::test]
async fn pdb_refusals_are_retried_until_the_budget_is_relaxed() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-pdb-retry").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let pods = bare_pods(&scope, "web", &node, 2).await?;
    create_pdb(&scope, "web", 2).await?;
    scope.wait_pdb("web", 0, TIMEOUT).await?;

    let client = scope.client();
    let progress = watch::Sender::default();
    let mut refusals = progress.subscribe();
    let draining = tokio::spawn({
        let node = node.clone();
        async move { rota_kube_actions::drain_with_progress(&client, &node, &forced(), &progress).await }
    });
    // Both evictions are refused (429), and the drain keeps trying.
    let names: Vec<String> = pods
        .iter()
        .map(|p| format!("{}/{}", scope.namespace(), p.name_any()))
        .collect();
    tokio::time::timeout(
        TIMEOUT,
        refusals.wait_for(|p| names.iter().all(|n| p.refused.contains_key(n))),
    )
    .await
    .context("the drain never reported both evictions refused")?
    .context("the drain ended before both evictions were refused")?;
    ensure!(rota_kube_actions::is_cordoned(&scope.client(), &node).await?);
    for pod in &pods {
        ensure!(
            same_pod_exists(&scope, pod).await?,
            "{} went despite the budget",
            pod.name_any()
        );
    }
    let reason = refusals.borrow().refused.get(&names[0]).cloned();
    ensure!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("The disruption budget web needs 2 healthy pods")),
        "the refusal does not give the budget's reason: {reason:?}"
    );
    ensure!(
        !draining.is_finished(),
        "the drain ended while the budget forbids any eviction: {:?}",
        draining.await
    );

    set_min_available(&scope, "web", 0).await?;
    tokio::time::timeout(TIMEOUT, draining)
        .await
        .context("the drain did not finish after the budget was relaxed")??
        .context("the drain failed")?;
    for pod in &pods {
        ensure!(
            !same_pod_exists(&scope, pod).await?,
            "{} is still there after the drain",
            pod.name_any()
        );
    }
    scope.cleanup().await
}

#[tokio::test]
async fn a_budget_that_never_allows_lets_the_callers_timeout_fire_and_the_node_be_uncordoned()
-> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-pdb-never").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let pods = bare_pods(&scope, "db", &node, 1).await?;
    create_pdb(&scope, "db", 1).await?;
    scope.wait_pdb("db", 0, TIMEOUT).await?;
    let client = scope.client();

    let progress = watch::Sender::default();
    let mut refusals = progress.subscribe();
    let options = forced();
    let drain = rota_kube_actions::drain_with_progress(&client, &node, &options, &progress);
    // The caller's timeout: it fires once the refusal has been seen, so that the drain has
    // really been turned down before it is canceled.
    let outcome = tokio::time::timeout(TIMEOUT, async {
        tokio::select! {
            drained = drain => Some(drained),
            _ = refusals.wait_for(|p| !p.refused.is_empty()) => None,
        }
    })
    .await
    .context("the eviction was never refused")?;
    ensure!(
        outcome.is_none(),
        "the drain ended under a budget that never allows: {outcome:?}"
    );
    let db_0 = format!("{}/db-0", scope.namespace());
    ensure!(
        refusals.borrow().refused.contains_key(&db_0),
        "progress does not name the held-back pod: {:?}",
        *refusals.borrow()
    );
    ensure!(rota_kube_actions::is_cordoned(&client, &node).await?);
    ensure!(same_pod_exists(&scope, &pods[0]).await?);

    // The canceled drain left nothing behind but the cordon, which the caller lifts.
    rota_kube_actions::uncordon(&client, &node, &rota_kube_actions::NodeLabels::default()).await?;
    ensure!(!rota_kube_actions::is_cordoned(&client, &node).await?);
    ensure!(pod_is_running(&scope.pods().get("db-0").await?));

    // Draining again once the budget allows carries on from the cluster's state.
    set_min_available(&scope, "db", 0).await?;
    tokio::time::timeout(TIMEOUT, rota_kube_actions::drain(&client, &node, &forced()))
        .await
        .context("the second drain did not finish")??;
    ensure!(!same_pod_exists(&scope, &pods[0]).await?);
    scope.cleanup().await
}

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
    let named: Vec<(String, RefusalReason)> =
        refusals.iter().map(|r| (r.pod.clone(), r.reason)).collect();
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

#[tokio::test]
async fn kube_actions_drain_a_deployment_pod_onto_another_node_and_uncordon() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-actions").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    scope.create_deployment("api", 1, None).await?;
    let first = running_pods(&scope, "api", 1).await?.remove(0);
    let first_node = node_of(&first).context("running pod without a node")?;
    ensure!(nodes.contains(&first_node));

    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(first_node.clone())?,
        options(),
        "true".into(),
        Some("test \"$ROTA_NODE\" = ".to_owned() + &first_node),
    );
    ensure!(!actions.is_cordoned().await?);
    tokio::time::timeout(TIMEOUT, actions.drain())
        .await
        .context("the drain did not finish")??;
    ensure!(actions.is_cordoned().await?);
    ensure!(!same_pod_exists(&scope, &first).await?);
    let second = running_pods(&scope, "api", 1).await?.remove(0);
    let second_node = node_of(&second).context("replacement pod without a node")?;
    ensure!(
        second_node != first_node && nodes.contains(&second_node),
        "the replacement landed on {second_node}, not the other test node"
    );

    // Draining a drained node again is a no-op (the agent repeats it after a restart).
    tokio::time::timeout(TIMEOUT, actions.drain())
        .await
        .context("the repeated drain did not finish")??;
    ensure!(same_pod_exists(&scope, &second).await?);

    actions.health().await?;
    actions
        .reboot()
        .await?
        .await
        .context("the reboot command's result was dropped")??;
    actions.uncordon().await?;
    ensure!(!actions.is_cordoned().await?);

    let failing = KubeActions::new(
        scope.client(),
        NodeName::new(first_node.clone())?,
        options(),
        "true".into(),
        Some("exit 3".into()),
    );
    let err = failing
        .health()
        .await
        .err()
        .context("a failing health command passed")?;
    ensure!(err.to_string().contains("exit 3"), "{err}");

    let missing = KubeActions::new(
        scope.client(),
        NodeName::new(scope.node_name("missing"))?,
        options(),
        "true".into(),
        None,
    );
    let err = missing
        .health()
        .await
        .err()
        .context("a missing node was healthy")?;
    ensure!(err.to_string().contains("does not exist"), "{err}");
    scope.cleanup().await
}

/// The labels of the cordon go on the Node with the cordon and stay while the node is out
/// (a repeated drain, after an agent restart, keeps them); the uncordon sets its own and removes
/// the cordon's others. Labels set on the Node by anyone else stay as they are.
#[tokio::test]
async fn the_cordon_and_the_uncordon_set_their_node_labels() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-labels").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(scope.client());
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "team": "payments" } } })),
        )
        .await?;
    let labels = |text: &str| -> Result<BTreeMap<String, String>> {
        Ok(rota_kube_actions::parse_labels(text)?.into_iter().collect())
    };
    let mut drain = options();
    drain.labels = rota_kube_actions::NodeLabels::new(
        labels("kured=rebooting,example.com/out=true")?,
        labels("kured=done")?,
    );
    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(node.clone())?,
        drain,
        "true".into(),
        None,
    );
    let label =
        |object: &k8s_openapi::api::core::v1::Node, key: &str| object.labels().get(key).cloned();
    for attempt in ["the drain", "the repeated drain"] {
        tokio::time::timeout(TIMEOUT, actions.drain())
            .await
            .with_context(|| format!("{attempt} did not finish"))??;
        let object = nodes.get(&node).await?;
        ensure!(
            label(&object, "kured").as_deref() == Some("rebooting")
                && label(&object, "example.com/out").as_deref() == Some("true"),
            "after {attempt} the Node's labels are {:?}",
            object.labels()
        );
        ensure!(actions.is_cordoned().await?);
    }
    actions.uncordon().await?;
    let object = nodes.get(&node).await?;
    ensure!(
        label(&object, "kured").as_deref() == Some("done")
            && label(&object, "example.com/out").is_none()
            && label(&object, "team").as_deref() == Some("payments"),
        "after the uncordon the Node's labels are {:?}",
        object.labels()
    );
    ensure!(!actions.is_cordoned().await?);
    scope.cleanup().await
}

/// A node waiting for maintenance carries the taint `KEY:PreferNoSchedule` and loses it again;
/// the Node's other taints stay as they are, and marking twice changes nothing.
#[tokio::test]
async fn a_node_marked_pending_carries_a_prefer_no_schedule_taint_until_unmarked() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-taint").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(scope.client());
    let taints = || async {
        let object = nodes.get(&node).await?;
        anyhow::Ok(
            object
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect::<Vec<_>>(),
        )
    };
    // Someone else's taint, which the marks must keep.
    let mut object = nodes.get(&node).await?;
    let spec = object.spec.get_or_insert_default();
    spec.taints
        .get_or_insert_default()
        .push(k8s_openapi::api::core::v1::Taint {
            key: "team".into(),
            value: Some("payments".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    nodes
        .replace(&node, &PostParams::default(), &object)
        .await?;
    let before = taints().await?;
    ensure!(
        before.contains(&"team:NoSchedule".to_string()),
        "{before:?}"
    );
    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(node.clone())?,
        options(),
        "true".into(),
        None,
    )
    .pending_taint(Some("rota.dev/pending".into()));
    for _ in 0..2 {
        actions.mark_pending(true).await?;
        let now = taints().await?;
        let mut expected = before.clone();
        expected.push("rota.dev/pending:PreferNoSchedule".into());
        ensure!(now == expected, "marked: {now:?}, before: {before:?}");
    }
    for _ in 0..2 {
        actions.mark_pending(false).await?;
        let now = taints().await?;
        ensure!(now == before, "unmarked: {now:?}, before: {before:?}");
    }

    // Without a key there is nothing to mark, and nothing is asked.
    let plain = KubeActions::new(
        scope.client(),
        NodeName::new(scope.node_name("missing"))?,
        options(),
        "true".into(),
        None,
    );
    plain.mark_pending(true).await?;
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

/// The API server out of reach as the drain starts (a restart of the control plane, the
/// network to it down): the drain starts again after a pause, where the cluster is, instead of
/// failing the node's window, and finishes once the API server answers. The agent reaches the
/// API server through a proxy that the test cuts.
#[tokio::test]
async fn a_drain_that_meets_an_unreachable_api_server_starts_again_and_finishes() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-outage").await?;
    scope.create_ready_nodes(2).await?;
    scope.create_deployment("api", 1, None).await?;
    let first = running_pods(&scope, "api", 1).await?.remove(0);
    let node = node_of(&first).context("running pod without a node")?;

    let mut config = env.config().await?;
    let server: SocketAddr = config
        .cluster_url
        .authority()
        .context("the API server's address")?
        .as_str()
        .parse()?;
    let proxy = Proxy::start(server).await?;
    config.cluster_url = format!("https://{}", proxy.addr()).parse()?;
    let actions = KubeActions::new(
        rota_kube_client::client(config)?,
        NodeName::new(node.clone())?,
        options(),
        "true".into(),
        None,
    );
    proxy.cut();
    let outage = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.restore();
    };
    let (drained, ()) = tokio::join!(tokio::time::timeout(TIMEOUT, actions.drain()), outage);
    drained.context("the drain did not finish")??;
    ensure!(proxy.refused() > 0, "the drain never met the outage");
    ensure!(actions.is_cordoned().await?);
    ensure!(!same_pod_exists(&scope, &first).await?);
    scope.cleanup().await
}

#[tokio::test]
async fn a_missing_permission_names_the_verb_and_the_resource() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-rbac").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let admin = scope.client();
    let weak = scope.service_account_client(env, "weak").await?;

    let err = rota_kube_actions::drain(&weak, &node, &options())
        .await
        .err()
        .context("a drain without any permission succeeded")?;
    ensure!(
        matches!(
            &err,
            Error::Forbidden {
                verb: "patch",
                resource: "nodes",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    ensure!(
        message.contains("`patch`") && message.contains("`nodes`") && message.contains(&node),
        "{message}"
    );

    // Allowed to cordon, not to list pods: the next missing rule is named.
    let role = scope
        .grant("cordon", "weak", "nodes", &["get", "patch"])
        .await?;
    let err = wait_for("the cordon to be allowed", TIMEOUT, || async {
        match rota_kube_actions::drain(&weak, &node, &options()).await {
            Err(Error::Forbidden { verb: "patch", .. }) => Ok(None),
            Err(e) => Ok(Some(e)),
            Ok(()) => bail!("a drain without permission to list pods succeeded"),
        }
    })
    .await?;
    ensure!(
        matches!(
            &err,
            Error::Forbidden {
                verb: "list",
                resource: "pods",
                ..
            }
        ),
        "{err:?}"
    );
    ensure!(rota_kube_actions::is_cordoned(&admin, &node).await?);

    scope.revoke(&role).await?;
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

//! Wait-completed pods (Cluster API's `WaitCompleted`): the drain does not evict them, and ends
//! only once they have completed; past its wait-completed timeout it fails naming them, and
//! still does not evict them. And the drain's own timeout, which names what held it.
//!
//! Against a real control plane (testenv/): kube-apiserver with the disruption,
//! deployment and daemonset controllers, kwok playing the kubelets. No mocks. A pod completes
//! as the kubelet (kwok) completes one: its phase set through the status subresource. The Job
//! whose pod the drain waits for is the real node's test (`crates/rota-e2e/tests/real_node.rs`):
//! kwok completes a Job's pods the moment they run.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

mod common;

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use rota_e2e::testenv::{Scope, TestEnv, app_labels};
use rota_kube_actions::{DRAIN_ANNOTATION, DrainOptions, Error, Selector, WAIT_COMPLETED};
use serde_json::json;
use tokio::sync::watch;

use common::{TIMEOUT, bare_pods, create_pdb, forced, options, same_pod_exists};

/// A pod `name` on `node`, Running, annotated wait-completed: a CI job's, say. It has no
/// owner: kwok completes a Job's pods the moment they run (its `pod-complete` stage), and here
/// the test decides when the pod completes.
async fn wait_completed_pod_on(scope: &Scope, name: &str, node: &str) -> Result<Pod> {
    scope.create_pod_on(name, node, &app_labels(name)).await?;
    scope
        .pods()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": {
                "annotations": { DRAIN_ANNOTATION: WAIT_COMPLETED },
            }})),
        )
        .await
        .with_context(|| format!("annotating {name}"))?;
    scope.wait_pod_running(name, TIMEOUT).await
}

/// Ends the pod's run with `phase`, as the kubelet reports it through the status subresource.
async fn complete(scope: &Scope, pod: &str, phase: &str) -> Result<()> {
    scope
        .pods()
        .patch_status(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": phase } })),
        )
        .await
        .with_context(|| format!("marking {pod} {phase}"))?;
    Ok(())
}

/// The pod is there as it was, not evicted: the same UID, and no deletion under way.
async fn untouched(scope: &Scope, pod: &Pod) -> Result<bool> {
    let current = scope.pods().get_opt(&pod.name_any()).await?;
    Ok(current.is_some_and(|p| p.uid() == pod.uid() && p.metadata.deletion_timestamp.is_none()))
}

/// A pod annotated wait-completed, and a CI runner matched by the selector (both bare, which
/// needs no --drain-force: they are not evicted): the drain evicts the Deployment's pod beside
/// them, then waits; it ends only once both have completed, and neither was evicted.
#[tokio::test]
async fn the_drain_waits_for_wait_completed_pods_to_complete_and_never_evicts_them() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-wait-completed").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let ns = scope.namespace().to_owned();
    let job = wait_completed_pod_on(&scope, "job-x", &node).await?;
    let runner = bare_pods(&scope, "ci-runner", &node, 1).await?.remove(0);
    scope.create_deployment("web", 1, None).await?;
    let web = common::running_pods(&scope, "web", 1).await?.remove(0);

    // The safe defaults: the bare runner would be refused if it were to be evicted.
    let waiting = DrainOptions {
        wait_completed_selector: Some(
            Selector::parse("app=ci-runner").map_err(anyhow::Error::msg)?,
        ),
        ..options()
    };
    let progress = watch::Sender::default();
    let mut seen = progress.subscribe();
    let draining = tokio::spawn({
        let client = scope.client();
        let node = node.clone();
        async move { rota_kube_actions::drain_with_progress(&client, &node, &waiting, &progress).await }
    });
    // Sorted, as the progress lists them.
    let both = vec![
        format!("{ns}/{}", runner.name_any()),
        format!("{ns}/{}", job.name_any()),
    ];
    // The Deployment's pod is evicted and gone (the progress may say the pods are waited for
    // before its eviction has even started)...
    rota_e2e::testenv::wait_for("the Deployment's pod to be evicted", TIMEOUT, || async {
        Ok((!same_pod_exists(&scope, &web).await?).then_some(()))
    })
    .await?;
    // ...and then the drain reports only the two it waits for.
    let reported = tokio::time::timeout(
        TIMEOUT,
        seen.wait_for(|p| p.waiting == both && p.terminating.is_empty()),
    )
    .await
    .map(drop);
    ensure!(
        reported.is_ok(),
        "the drain never reported waiting for both pods, with the evicted one gone: {:?}",
        *seen.borrow()
    );
    let shown = seen.borrow().to_string();
    ensure!(
        shown == format!("waiting for 2 pods to complete: {}", both.join(", ")),
        "the progress reads {shown:?}"
    );
    // Another pass of the drain's list and watch, and it still waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        !draining.is_finished(),
        "the drain ended while wait-completed pods run: {:?}",
        draining.await
    );

    complete(&scope, &job.name_any(), "Succeeded").await?;
    let rest = vec![format!("{ns}/{}", runner.name_any())];
    tokio::time::timeout(TIMEOUT, seen.wait_for(|p| p.waiting == rest))
        .await
        .context("the drain never saw the Job's pod complete")?
        .context("the drain ended before")?;
    ensure!(
        !draining.is_finished(),
        "the drain ended while the runner still runs: {:?}",
        draining.await
    );

    complete(&scope, &runner.name_any(), "Failed").await?;
    tokio::time::timeout(TIMEOUT, draining)
        .await
        .context("the drain did not end once both pods completed")??
        .context("the drain failed")?;
    ensure!(seen.borrow().waiting.is_empty(), "{:?}", *seen.borrow());
    for pod in [&job, &runner] {
        ensure!(
            untouched(&scope, pod).await?,
            "{} was evicted",
            pod.name_any()
        );
    }
    ensure!(rota_kube_actions::is_cordoned(&scope.client(), &node).await?);
    scope.cleanup().await
}

/// Past the wait-completed timeout the drain fails, naming the pod still running, and leaves it
/// running: no eviction then either.
#[tokio::test]
async fn a_wait_completed_pod_still_running_at_the_timeout_fails_the_drain_naming_it() -> Result<()>
{
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-wait-timeout").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let job = wait_completed_pod_on(&scope, "job-y", &node).await?;
    let named = format!("{}/{}", scope.namespace(), job.name_any());
    let impatient = DrainOptions {
        wait_completed_timeout: Duration::from_secs(3),
        ..options()
    };
    let progress = watch::Sender::default();
    let drained = tokio::time::timeout(
        TIMEOUT,
        rota_kube_actions::drain_with_progress(&scope.client(), &node, &impatient, &progress),
    )
    .await
    .context("the drain outlived its wait-completed timeout")?;
    let error = match drained {
        Err(error @ Error::WaitCompletedTimeout { .. }) => error,
        other => bail!("expected the wait-completed timeout, got {other:?}"),
    };
    let Error::WaitCompletedTimeout { pods, .. } = &error else {
        unreachable!("matched above");
    };
    ensure!(*pods == [named.clone()], "{pods:?}");
    let message = error.to_string();
    ensure!(
        message.contains(&format!("waiting for 1 pod to complete: {named}"))
            && message.contains("3s")
            && message.contains("not evicting it"),
        "{message}"
    );
    ensure!(
        progress.borrow().waiting == [named.clone()],
        "{:?}",
        *progress.borrow()
    );
    ensure!(
        untouched(&scope, &job).await?,
        "the timed-out pod was evicted"
    );
    ensure!(
        rota_kube_actions::is_cordoned(&scope.client(), &node).await?,
        "the caller uncordons; the drain leaves the cordon"
    );
    scope.cleanup().await
}

/// The drain's own timeout (the agent's --drain-timeout): a budget that never allows the
/// eviction fails the drain with what held it, the budget's refusal of the pod.
#[tokio::test]
async fn a_drain_past_its_timeout_fails_naming_what_holds_it() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-own-timeout").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let pods = bare_pods(&scope, "db", &node, 1).await?;
    create_pdb(&scope, "db", 1).await?;
    scope.wait_pdb("db", 0, TIMEOUT).await?;
    let bounded = DrainOptions {
        timeout: Some(Duration::from_secs(3)),
        ..forced()
    };
    let drained = tokio::time::timeout(
        TIMEOUT,
        rota_kube_actions::drain(&scope.client(), &node, &bounded),
    )
    .await
    .context("the drain outlived its own timeout")?;
    let db_0 = format!("{}/db-0", scope.namespace());
    match &drained {
        Err(Error::DrainTimeout { progress, .. })
            if progress.refused.contains_key(&db_0) && progress.waiting.is_empty() => {}
        other => bail!("expected the drain timeout naming {db_0}, got {other:?}"),
    }
    let message = drained.expect_err("matched").to_string();
    ensure!(
        message.contains("within the drain timeout of 3s: eviction refused for 1 pod: ")
            && message.contains(&db_0),
        "{message}"
    );
    ensure!(same_pod_exists(&scope, &pods[0]).await?);
    scope.cleanup().await
}

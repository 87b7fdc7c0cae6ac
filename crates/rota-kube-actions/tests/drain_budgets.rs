//! The drain and PodDisruptionBudgets: refused evictions are retried until the budget allows them,
//! and a budget that never does leaves the caller's timeout to end the drain.
//!
//! Against a real control plane (testenv/): kube-apiserver with the disruption,
//! deployment and daemonset controllers, kwok playing the kubelets. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

mod common;

use anyhow::{Context as _, Result, ensure};
use kube::ResourceExt;
use rota_e2e::testenv::{TestEnv, pod_is_running};
use tokio::sync::watch;

use common::{TIMEOUT, bare_pods, create_pdb, forced, same_pod_exists, set_min_available};

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

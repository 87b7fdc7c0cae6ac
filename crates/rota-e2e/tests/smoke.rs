//! Smoke test of the test environment itself: real nodes (kwok), real PodDisruptionBudget
//! status (kube-controller-manager), real eviction semantics (kube-apiserver) and real
//! rescheduling (kube-scheduler).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use rota_e2e::testenv::{self, TestEnv, api_error_code, app_labels, pod_is_running, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Prints a progress line with the time since the test started (shown with --nocapture and on
/// failure).
fn progress(start: Instant, what: &str) {
    println!("[{:>6.1}s] {what}", start.elapsed().as_secs_f64());
}

#[tokio::test]
async fn pdb_blocks_eviction_until_relaxed() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let t = Instant::now();
    let scope = env.scope("smoke-pdb").await?;
    progress(t, &format!("namespace {}", scope.namespace()));
    let pods = scope.pods();

    // Three kwok nodes, Ready.
    let nodes = scope.create_ready_nodes(3).await?;
    for name in &nodes {
        let node = scope.nodes().get(name).await?;
        ensure!(testenv::node_is_ready(&node), "node {name} is not Ready");
    }

    progress(t, "3 nodes Ready");

    // One pod per node, bound directly, all Running.
    let labels = app_labels("web");
    let mut pod_names = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let name = format!("web-{i}");
        scope.create_pod_on(&name, node, &labels).await?;
        pod_names.push(name);
    }
    for name in &pod_names {
        let pod = scope.wait_pod_running(name, TIMEOUT).await?;
        ensure!(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
        );
    }

    progress(t, "3 pods Running");

    // A budget that allows no disruption.
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some("web".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(3)),
            selector: Some(LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };
    let pdbs = scope.api::<PodDisruptionBudget>();
    pdbs.create(&PostParams::default(), &pdb).await?;
    let status = scope
        .wait_pdb("web", 0, TIMEOUT)
        .await?
        .status
        .context("no PDB status")?;
    ensure!(
        status.current_healthy == Some(3) && status.desired_healthy == Some(3),
        "unexpected PDB status {status:?}"
    );

    progress(t, "PDB minAvailable=3 observed, 0 disruptions allowed");

    // Eviction is refused with 429.
    let victim = &pod_names[0];
    match pods.evict(victim, &EvictParams::default()).await {
        Ok(s) => bail!("eviction of {victim} succeeded despite the budget: {s:?}"),
        Err(e) => ensure!(
            api_error_code(&e) == Some(429),
            "expected 429 TooManyRequests, got {e}"
        ),
    }
    ensure!(
        testenv::pod_is_running(&pods.get(victim).await?),
        "refused eviction still touched the pod"
    );

    progress(t, "eviction refused with 429");

    // Relax the budget; now the eviction goes through and kwok finishes the deletion.
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": { "minAvailable": 2 } })),
    )
    .await?;
    scope.wait_pdb("web", 1, TIMEOUT).await?;
    progress(t, "PDB relaxed to minAvailable=2, 1 disruption allowed");
    pods.evict(victim, &EvictParams::default())
        .await
        .context("eviction under a relaxed budget")?;
    progress(t, "eviction accepted");
    if let Some(pod) = pods.get_opt(victim).await? {
        ensure!(
            pod.metadata.deletion_timestamp.is_some(),
            "evicted pod {victim} is not terminating"
        );
    }
    scope.wait_pod_gone(victim, TIMEOUT).await?;
    progress(t, "evicted pod gone");
    for name in &pod_names[1..] {
        ensure!(
            pod_is_running(&pods.get(name).await?),
            "{name} was disturbed"
        );
    }

    scope.cleanup().await?;
    progress(t, "cleaned up");
    Ok(())
}

#[tokio::test]
async fn evicted_deployment_pod_is_rescheduled_elsewhere() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let t = Instant::now();
    let scope = env.scope("smoke-deploy").await?;
    progress(t, &format!("namespace {}", scope.namespace()));
    let pods = scope.pods();
    scope.create_ready_nodes(3).await?;
    progress(t, "3 nodes Ready");

    // A one-replica Deployment kept on this scope's nodes by the scheduler.
    scope.create_deployment("api", 1, None).await?;

    let selector = "app=api";
    let running_pod = |exclude: Option<String>| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels(selector)).await?;
            Ok(list
                .items
                .into_iter()
                .find(|p: &Pod| pod_is_running(p) && p.metadata.name != exclude))
        }
    };
    let first = wait_for("the Deployment's pod Running", TIMEOUT, || {
        running_pod(None)
    })
    .await?;
    let first_name = first.metadata.name.clone().context("pod without a name")?;
    let first_node = first
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("running pod without a node")?;

    progress(t, &format!("pod {first_name} Running on {first_node}"));

    // Drain its node: cordon, evict.
    scope.cordon(&first_node).await?;
    pods.evict(&first_name, &EvictParams::default())
        .await
        .context("evicting the Deployment's pod")?;
    progress(t, "node cordoned, pod evicted");

    let second = wait_for("a replacement pod Running", TIMEOUT, || {
        running_pod(Some(first_name.clone()))
    })
    .await?;
    let second_node = second
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("replacement pod without a node")?;
    ensure!(
        second_node != first_node,
        "replacement pod landed on the cordoned node {first_node}"
    );
    ensure!(
        second_node.starts_with(scope.id()),
        "replacement pod left the test's nodes: {second_node}"
    );
    progress(t, &format!("replacement Running on {second_node}"));
    scope.wait_pod_gone(&first_name, TIMEOUT).await?;
    progress(t, "evicted pod gone");

    scope.cleanup().await?;
    progress(t, "cleaned up");
    Ok(())
}

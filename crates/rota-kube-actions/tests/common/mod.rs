//! What the drain's tests against a real control plane share: their bound on waiting, quick
//! drain options, and making and finding pods and budgets.

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use rota_e2e::testenv::{Scope, app_labels, pod_is_running, wait_for};
use rota_kube_actions::DrainOptions;
use serde_json::json;

/// How long a test waits for the cluster before it fails (a bound, not an expectation).
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// Quick retries and polls, so that the tests react soon after the cluster changes.
pub fn options() -> DrainOptions {
    DrainOptions {
        retry_initial: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
        poll_interval: Duration::from_millis(200),
        ..DrainOptions::default()
    }
}

#[allow(dead_code, reason = "not every test binary uses every helper")]
pub fn forced() -> DrainOptions {
    DrainOptions {
        force: true,
        ..options()
    }
}

#[allow(dead_code, reason = "not every test binary uses every helper")]
pub async fn create_pdb(scope: &Scope, app: &str, min_available: i32) -> Result<()> {
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

#[allow(dead_code, reason = "not every test binary uses every helper")]
pub async fn set_min_available(scope: &Scope, app: &str, min_available: i32) -> Result<()> {
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
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub async fn bare_pods(scope: &Scope, app: &str, node: &str, n: usize) -> Result<Vec<Pod>> {
    let mut pods = Vec::new();
    for i in 0..n {
        let name = format!("{app}-{i}");
        scope.create_pod_on(&name, node, &app_labels(app)).await?;
        pods.push(scope.wait_pod_running(&name, TIMEOUT).await?);
    }
    Ok(pods)
}

/// The app's Running pods once there are `n` of them.
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub async fn running_pods(scope: &Scope, app: &str, n: usize) -> Result<Vec<Pod>> {
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

#[allow(dead_code, reason = "not every test binary uses every helper")]
pub fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

#[allow(dead_code, reason = "not every test binary uses every helper")]
pub async fn same_pod_exists(scope: &Scope, pod: &Pod) -> Result<bool> {
    let current = scope.pods().get_opt(&pod.name_any()).await?;
    Ok(current.is_some_and(|p| p.uid() == pod.uid()))
}

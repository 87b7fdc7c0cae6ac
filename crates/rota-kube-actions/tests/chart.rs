//! The Helm chart `charts/rota`, applied to the real control plane of testenv/ with the helm and
//! kubectl that `testenv/build` builds: its objects exist, and its RBAC (under its node-scoped
//! policy) is enough for a drain and no more. What `helm template` renders from the values is
//! tested in `chart_values.rs`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rota_e2e::chart;
use rota_e2e::testenv::{TestEnv, pod_is_running, tool, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

fn kubectl(env: &TestEnv, args: &[&str], stdin: &[u8]) -> Result<()> {
    let mut child = Command::new(tool("kubectl")?)
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting kubectl")?;
    child
        .stdin
        .take()
        .context("kubectl without stdin")?
        .write_all(stdin)?;
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn api_code(result: Result<impl std::fmt::Debug, kube::Error>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

async fn running_pod(pods: &Api<Pod>, selector: &str) -> Result<Pod> {
    wait_for(&format!("a Running pod {selector}"), TIMEOUT, || async {
        let list = pods.list(&ListParams::default().labels(selector)).await?;
        Ok(list.items.into_iter().find(pod_is_running))
    })
    .await
}

#[tokio::test]
async fn the_chart_applies_and_its_rbac_is_enough_to_drain_and_no_more() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("chart").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let admin = scope.client();
    // Its own release name, so that its cluster-scoped RBAC objects are its own too.
    let release = scope.id();
    let namespace = format!("{}-sys", scope.id());
    // The scope's own nodes only: tests sharing the control plane keep their nodes to
    // themselves.
    let namespace_value = format!("namespace.name={}", json!(namespace));
    let node_selector = format!("nodeSelector={}", json!(scope.labels()));
    let rendered = chart::rendered(release, &[&namespace_value, &node_selector], None)?;
    kubectl(env, &["apply", "-f", "-"], rendered.as_bytes())?;

    let fullname = format!("{release}-agent");
    Api::<Namespace>::all(admin.clone())
        .get(&namespace)
        .await
        .context("the chart's namespace")?;
    Api::<ServiceAccount>::namespaced(admin.clone(), &namespace)
        .get("rota-agent")
        .await
        .context("the chart's service account")?;
    Api::<ClusterRole>::all(admin.clone())
        .get(&fullname)
        .await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .get(&fullname)
        .await?;
    Api::<Role>::namespaced(admin.clone(), &namespace)
        .get(&fullname)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), &namespace)
        .get(&fullname)
        .await?;
    let policy = format!("{fullname}-node-scoped");
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .get(&policy)
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .get(&policy)
        .await?;
    let daemonset = Api::<DaemonSet>::namespaced(admin.clone(), &namespace)
        .get(&fullname)
        .await
        .context("the chart's DaemonSet")?;
    let pod_spec = daemonset
        .spec
        .template
        .spec
        .as_ref()
        .context("DaemonSet without a pod spec")?;
    ensure!(pod_spec.host_pid == Some(true), "the agent needs hostPID");
    let container = pod_spec.containers.first().context("no container")?;
    let args = container.args.clone().unwrap_or_default();
    ensure!(
        args.iter().any(|a| a == "--host-root=/host"),
        "args: {args:?}"
    );
    // The API server accepts the default metrics port, probes and annotations as rendered.
    for arg in ["--metrics-addr=0.0.0.0:9746", "--log-format=text"] {
        ensure!(args.iter().any(|a| a == arg), "no {arg} in args: {args:?}");
    }
    let port = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .context("no container port named metrics")?;
    ensure!(port.container_port == 9746, "{port:?}");
    for (probe, path) in [
        (container.liveness_probe.as_ref(), "/healthz"),
        (container.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe.and_then(|p| p.http_get.as_ref());
        ensure!(
            get.is_some_and(|g| g.path.as_deref() == Some(path)
                && g.port == IntOrString::String("metrics".into())),
            "no httpGet probe of {path} on the metrics port: {get:?}"
        );
    }
    let annotations = daemonset
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    for (key, value) in [
        ("prometheus.io/scrape", "true"),
        ("prometheus.io/port", "9746"),
        ("prometheus.io/path", "/metrics"),
    ] {
        ensure!(
            annotations.get(key).map(String::as_str) == Some(value),
            "pod annotation {key}: {annotations:?}"
        );
    }
    let node_env = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "ROTA_NODE")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    ensure!(node_env.as_deref() == Some("spec.nodeName"), "{node_env:?}");
    let host_dirs: Vec<(String, Option<String>)> = pod_spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.host_path.as_ref())
        .map(|h| (h.path.clone(), h.type_.clone()))
        .collect();
    for dir in ["/run", "/var/run", "/var"] {
        ensure!(
            host_dirs.contains(&(dir.to_string(), Some("Directory".to_string()))),
            "{dir} is not mounted as a host directory: {host_dirs:?}"
        );
    }

    // The DaemonSet controller puts an agent on the node; kwok runs it.
    let agents: Api<Pod> = Api::namespaced(admin.clone(), &namespace);
    let agent = running_pod(&agents, "app.kubernetes.io/name=rota").await?;
    ensure!(agent.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()));

    // Acting as the chart's service account: a whole drain and uncordon work...
    scope.create_deployment("api", 1, None).await?;
    let workload = running_pod(&scope.pods(), "app=api").await?;
    // The token the kubelet mounts into the agent's pod, bound to it: the chart's node-scoped
    // policy lets only such a token, naming the node, write the node's objects.
    let token = rota_e2e::tokens::pod_token(&admin, &agent).await?;
    let agent_client = env.client_with_token(&token).await?;
    // ...the agent's start-up check finds every permission it looks for...
    let wanted = rota_store_kube::permissions::agent_permissions(&namespace, true);
    let missing = rota_store_kube::permissions::missing(&agent_client, &wanted).await?;
    ensure!(
        missing.is_empty(),
        "the chart does not grant what the agent checks for: {missing:?}"
    );
    let options = rota_kube_actions::DrainOptions {
        retry_initial: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
        poll_interval: Duration::from_millis(200),
        ..rota_kube_actions::DrainOptions::default()
    };
    tokio::time::timeout(
        TIMEOUT,
        rota_kube_actions::drain(&agent_client, &node, &options),
    )
    .await
    .context("the drain as the agent did not finish")??;
    ensure!(
        scope
            .pods()
            .get_opt(&workload.name_any())
            .await?
            .is_none_or(|p| p.uid() != workload.uid()),
        "the workload was not evicted"
    );
    let agent_now = agents.get(&agent.name_any()).await?;
    ensure!(
        agent_now.uid() == agent.uid(),
        "the drain evicted its own agent"
    );
    let ready = rota_kube_actions::check_ready(&agent_client, &node).await?;
    // The health gate reads what it needs: the drain recorded the Deployment, whose replacement
    // pod cannot run on the cordoned node, and the PodDisruptionBudgets can be listed.
    let evicted = rota_kube_actions::evicted(&agent_client, &node)
        .await?
        .context("the drain recorded no evictions")?;
    ensure!(
        evicted
            .controllers
            .iter()
            .any(|w| w.kind == "Deployment" && w.namespace == scope.namespace() && w.name == "api"),
        "{evicted:?}"
    );
    let expected = format!(
        "1 of 1 pods of Deployment {}/api are not Ready",
        scope.namespace()
    );
    match rota_kube_actions::check_gate(&agent_client, &ready, true).await {
        Err(rota_kube_actions::Error::NotRestored { reasons, .. })
            if reasons.iter().any(|r| r == &expected) => {}
        other => bail!("the gate as the agent: {other:?}"),
    }
    rota_kube_actions::uncordon(
        &agent_client,
        &node,
        &rota_kube_actions::NodeLabels::default(),
    )
    .await?;
    ensure!(!rota_kube_actions::is_cordoned(&agent_client, &node).await?);
    ensure!(
        rota_kube_actions::evicted(&agent_client, &node)
            .await?
            .is_none(),
        "the uncordon kept the record of evictions"
    );

    // ...Leases in its own namespace too, but nothing beyond what it needs.
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("rota-slot-0".into()),
            ..ObjectMeta::default()
        },
        ..Lease::default()
    };
    Api::<Lease>::namespaced(agent_client.clone(), &namespace)
        .create(&PostParams::default(), &lease)
        .await
        .context("creating a slot Lease as the agent")?;
    let elsewhere = Api::<Lease>::namespaced(agent_client.clone(), scope.namespace())
        .create(&PostParams::default(), &lease)
        .await;
    ensure!(
        api_code(elsewhere) == Some(403),
        "a Lease outside the namespace"
    );
    let pods_as_agent: Api<Pod> = Api::namespaced(agent_client.clone(), scope.namespace());
    let replacement = running_pod(&scope.pods(), "app=api").await?;
    ensure!(
        api_code(
            pods_as_agent
                .delete(&replacement.name_any(), &DeleteParams::default())
                .await
        ) == Some(403),
        "the agent may delete pods outright (bypassing disruption budgets)"
    );
    let nodes_as_agent: Api<k8s_openapi::api::core::v1::Node> = Api::all(agent_client.clone());
    ensure!(
        api_code(nodes_as_agent.delete(&node, &DeleteParams::default()).await) == Some(403),
        "the agent may delete nodes"
    );

    kubectl(
        env,
        &["delete", "--wait=false", "-f", "-"],
        rendered.as_bytes(),
    )?;
    scope.cleanup().await
}

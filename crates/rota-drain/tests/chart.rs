//! The Helm chart `charts/rota`, applied to the real control plane of testenv/ with the helm and
//! kubectl that `testenv/build` builds: its objects exist, its RBAC is enough for a drain and no
//! more, and bad values fail `helm template` with a message that names them.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use rota_e2e::testenv::{SKIP_ENV, TestEnv, pod_is_running, testenv_dir, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota")
}

/// The path of a binary that `testenv/build` built (`helm`, `kubectl`).
fn tool(name: &str) -> Result<PathBuf> {
    let build = testenv_dir().join("build");
    let out = Command::new(&build)
        .arg("--paths")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --paths", build.display()))?;
    ensure!(
        out.status.success(),
        "{} --paths failed: {}",
        build.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(PathBuf::from))
        .with_context(|| format!("{} --paths does not list {name}", build.display()))
}

/// `helm template` of the chart with `--set` arguments; the raw output, whatever the status.
fn helm_template(release: &str, sets: &[String]) -> Result<Output> {
    let mut helm = Command::new(tool("helm")?);
    helm.arg("template").arg(release).arg(chart_dir());
    for set in sets {
        helm.arg("--set-json").arg(set);
    }
    helm.stdin(Stdio::null())
        .output()
        .context("running helm template")
}

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

/// A client acting as the service account `namespace/name`.
async fn client_as(env: &TestEnv, admin: &Client, namespace: &str, name: &str) -> Result<Client> {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = serde_json::from_value(json!({ "spec": { "expirationSeconds": 3600 } }))?;
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .context("token request without status")?
        .token;
    let mut config = env.config().await?;
    config.auth_info = serde_json::from_value(json!({ "token": token }))?;
    Ok(rota_drain::client(config)?)
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
    let sets = [
        format!("namespace.name={}", json!(namespace)),
        format!("nodeSelector={}", json!(scope.labels())),
    ];
    let rendered = helm_template(release, &sets)?;
    ensure!(
        rendered.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    kubectl(env, &["apply", "-f", "-"], &rendered.stdout)?;

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
    let agent_client = client_as(env, &admin, &namespace, "rota-agent").await?;
    let options = rota_drain::DrainOptions {
        retry_initial: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
        poll_interval: Duration::from_millis(200),
        ..rota_drain::DrainOptions::default()
    };
    tokio::time::timeout(TIMEOUT, rota_drain::drain(&agent_client, &node, &options))
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
    rota_drain::check_ready(&agent_client, &node).await?;
    rota_drain::uncordon(&agent_client, &node).await?;
    ensure!(!rota_drain::is_cordoned(&agent_client, &node).await?);

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
        &rendered.stdout,
    )?;
    scope.cleanup().await
}

#[test]
fn bad_values_fail_helm_template_with_a_clear_message() -> Result<()> {
    // helm comes from testenv/build like the control plane, so it skips along with it.
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let cases = [
        (
            "drain.concurrency=\"five\"",
            "at '/drain/concurrency': got string, want integer",
        ),
        (
            "agent.concurrency=\"two\"",
            "at '/agent/concurrency': got string, want null or integer",
        ),
        ("drain.concurrency=0", "at '/drain/concurrency': minimum"),
        (
            "agent.drainTimeout=600",
            "at '/agent/drainTimeout': got number, want string",
        ),
        ("agent.nodeActions=\"ssh\"", "at '/agent/nodeActions'"),
        (
            "agent.rebootSentinels=[\"/etc/reboot-now\"]",
            "host path /etc/reboot-now is not under any of hostMounts",
        ),
    ];
    for (set, expected) in cases {
        let out = helm_template("rota", &[set.to_string()])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            bail!("helm template accepted {set}");
        }
        ensure!(
            stderr.contains(expected),
            "helm template with {set}: expected {expected:?} in: {stderr}"
        );
    }
    Ok(())
}

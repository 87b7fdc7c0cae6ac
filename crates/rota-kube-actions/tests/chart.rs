//! The Helm chart `charts/rota`, applied to the real control plane of testenv/ with the helm and
//! kubectl that `testenv/build` builds: its objects exist, and its RBAC (under its node-scoped
//! policy) is enough for a drain, for the agent's windows and for the scheduler's grants, and no
//! more. What `helm template` renders from the values is tested in `chart_values.rs`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rota_core::{NodeName, NodeState, Process};
use rota_e2e::chart;
use rota_e2e::testenv::{TestEnv, pod_is_running, tool, wait_for};
use rota_kube_api::{RotaNode, RotaWindow};
use rota_store::{Session, Store, StoreExt, Transition, WindowChange, now_millis};
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The agent's session in the store.
const TTL: Duration = Duration::from_secs(30);

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

/// One whole window of a reboot through the store as the agent (its pod's token, under the
/// node-scoped policy), granted by a scheduler round as the scheduler's service account:
/// request, queue, grant, take-up, fence, drain, maintain, verify, finish. Each of the agent's
/// writes is one the chart lets it make: its RotaNode created and updated, the grant taken up
/// and cleared, the ended window written as a RotaWindow, the oldest deleted, and the Lease
/// given back.
async fn one_window(
    agent: &KubeStore,
    session: &Session,
    scheduler: &kube::Client,
    namespace: &str,
) -> Result<()> {
    agent
        .add_request(session, &Process::Reboot, "chart")
        .await
        .context("the agent requesting a reboot")?;
    agent
        .transition(
            session,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .context("the agent queueing")?;
    rota_scheduler::round(scheduler.clone(), namespace, Duration::from_secs(600))
        .await
        .context("a scheduler round as the scheduler's service account")?;
    let slot = wait_for("the agent taking its grant up", TIMEOUT, || async {
        Ok(agent.try_acquire_slot(session).await?.slot())
    })
    .await?;
    ensure!(slot == 0, "granted slot {slot}");
    let fenced = agent
        .fence(session, TTL)
        .await
        .context("the agent's fence")?;
    ensure!(fenced == slot, "fenced on slot {fenced}");
    agent
        .transition(
            session,
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(Some(Process::Reboot))
                .window(WindowChange::Open),
        )
        .await
        .context("the agent opening its window")?;
    for (from, to) in [
        (NodeState::Draining, NodeState::Maintaining),
        (NodeState::Maintaining, NodeState::Verifying),
    ] {
        agent.transition(session, Transition::new(from, to)).await?;
    }
    agent
        .transition(
            session,
            Transition::new(NodeState::Verifying, NodeState::Idle).window(WindowChange::Finish),
        )
        .await
        .context("the agent ending its window")?;
    Ok(())
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
    rota_e2e::fleet::install_crd(admin.clone()).await?;
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
    // The scheduler: its own service account and roles, and a Deployment of two replicas.
    let scheduler_name = format!("{release}-scheduler");
    Api::<ServiceAccount>::namespaced(admin.clone(), &namespace)
        .get(&scheduler_name)
        .await
        .context("the scheduler's service account")?;
    Api::<ClusterRole>::all(admin.clone())
        .get(&scheduler_name)
        .await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .get(&scheduler_name)
        .await?;
    Api::<Role>::namespaced(admin.clone(), &namespace)
        .get(&scheduler_name)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), &namespace)
        .get(&scheduler_name)
        .await?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &namespace)
        .get(&scheduler_name)
        .await
        .context("the scheduler's Deployment")?;
    let deployment_spec = &deployment.spec;
    ensure!(deployment_spec.replicas == Some(2), "{deployment_spec:?}");
    let scheduler_pod = deployment_spec
        .template
        .spec
        .as_ref()
        .context("the scheduler's Deployment without a pod spec")?;
    ensure!(
        scheduler_pod.service_account_name.as_deref() == Some(scheduler_name.as_str()),
        "the scheduler runs as {:?}",
        scheduler_pod.service_account_name
    );
    let container = scheduler_pod.containers.first().context("no container")?;
    ensure!(
        container.command.as_deref() == Some(&["rota".to_string(), "scheduler".to_string()][..]),
        "{:?}",
        container.command
    );
    let args = container.args.clone().unwrap_or_default();
    for arg in [
        format!("--namespace={namespace}"),
        "--lease-duration=15s".into(),
        "--take-up=60s".into(),
    ] {
        ensure!(
            args.contains(&arg),
            "no {arg} in the scheduler's args: {args:?}"
        );
    }
    let identity = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "POD_NAME")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    ensure!(identity.as_deref() == Some("metadata.name"), "{identity:?}");
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
    for arg in [
        "--host-root=/host".to_string(),
        format!("--namespace={namespace}"),
        "--kept-windows=20".into(),
    ] {
        ensure!(args.contains(&arg), "no {arg} in args: {args:?}");
    }
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

    // The DaemonSet controller puts an agent on the node, and the Deployment its schedulers
    // (on the agents' nodes too); kwok runs them.
    let agents: Api<Pod> = Api::namespaced(admin.clone(), &namespace);
    let agent = running_pod(&agents, "app.kubernetes.io/component=agent").await?;
    ensure!(agent.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()));
    running_pod(&agents, "app.kubernetes.io/component=scheduler").await?;

    // Acting as the chart's service account: a whole drain and uncordon work...
    scope.create_deployment("api", 1, None).await?;
    let workload = running_pod(&scope.pods(), "app=api").await?;
    // The token the kubelet mounts into the agent's pod, bound to it: the chart's node-scoped
    // policy lets only such a token, naming the node, write the node's objects.
    let token = rota_e2e::tokens::pod_token(&admin, &agent).await?;
    let agent_client = env.client_with_token(&token).await?;
    // ...the agent's start-up check finds every permission it looks for...
    let wanted = rota_kube_api::permissions::agent_permissions(&namespace, true);
    let missing = rota_kube_api::permissions::missing(&agent_client, &wanted).await?;
    ensure!(
        missing.is_empty(),
        "the chart does not grant what the agent checks for: {missing:?}"
    );
    // ...and the scheduler's, as its own service account.
    let scheduler_client = env.client_as(&admin, &namespace, &scheduler_name).await?;
    let wanted = rota_kube_api::permissions::scheduler_permissions(&namespace);
    let missing = rota_kube_api::permissions::missing(&scheduler_client, &wanted).await?;
    ensure!(
        missing.is_empty(),
        "the chart does not grant what the scheduler needs: {missing:?}"
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

    // The node-scoped policy in force (the API server picks a new one up within seconds): a
    // dry run of another node's RotaNode, which RBAC allows, is refused by it.
    let policy_named = format!("ValidatingAdmissionPolicy '{policy}'");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let rota_nodes_as_agent: Api<RotaNode> = Api::all(agent_client.clone());
    let other = format!("{node}-other");
    wait_for("the node-scoped policy to be enforced", TIMEOUT, || async {
        let probe = RotaNode::new(
            &other,
            rota_kube_api::crd::RotaNodeSpec {
                node: other.clone(),
                grant: None,
                withdrawn: None,
            },
        );
        match rota_nodes_as_agent.create(&dry_run, &probe).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(&policy_named) => {
                Ok(Some(()))
            }
            Err(e) => Err(e.into()),
        }
    })
    .await?;

    // ...two whole windows through the store, each granted by the scheduler's round as the
    // scheduler's service account; the agent keeps one ended window (history.keptWindows
    // as 1), so the second deletes the first...
    let store = KubeStore::connect(
        agent_client.clone(),
        KubeStoreConfig {
            namespace: namespace.clone(),
            kept_windows: 1,
            ..KubeStoreConfig::default()
        },
    )
    .await
    .context("the store's start-up check as the agent")?;
    let node_name = NodeName::new(&node)?;
    let session = store
        .open_session(&node_name, TTL)
        .await
        .context("the agent's first session (its RotaNode created)")?;
    // The agent grants itself no slot: only the scheduler writes spec.grant.
    let mut self_granted = rota_nodes_as_agent.get(&node).await?;
    self_granted.spec.grant = Some(rota_kube_api::crd::GrantSpec {
        slot: 0,
        at: rota_kube_api::crd::Timestamp(now_millis()),
    });
    match rota_nodes_as_agent
        .replace(&node, &dry_run, &self_granted)
        .await
    {
        Err(kube::Error::Api(s))
            if s.code == 403
                && s.message.contains(&policy_named)
                && s.message.contains("only the scheduler grants") => {}
        other => bail!("the agent granting itself a slot: {other:?}"),
    }
    let windows: Api<RotaWindow> = Api::all(admin.clone());
    let mut ended: Vec<String> = Vec::new();
    for window in 1..=2 {
        one_window(&store, &session, &scheduler_client, &namespace)
            .await
            .with_context(|| format!("window {window}"))?;
        let object = Api::<RotaNode>::all(admin.clone()).get(&node).await?;
        ensure!(
            object.spec.grant.is_none(),
            "window {window}: the grant stayed: {:?}",
            object.spec
        );
        let status = object.status.context("a RotaNode without status")?;
        ensure!(
            status.slot.is_none() && status.windows.len() == 1,
            "window {window}: {status:?}"
        );
        ended.push(status.windows[0].clone());
        let lease = Api::<Lease>::namespaced(admin.clone(), &namespace)
            .get("rota-slot-0")
            .await?;
        ensure!(
            rota_kube_api::slots::holder(&lease).is_none(),
            "window {window}: the agent did not give its Lease back: {:?}",
            lease.spec
        );
    }
    ensure!(ended[0] != ended[1], "{ended:?}");
    windows
        .get(&ended[1])
        .await
        .context("the last ended window")?;
    ensure!(
        windows.get_opt(&ended[0]).await?.is_none(),
        "the agent did not delete the window it no longer keeps, {}",
        ended[0]
    );
    drop(store);

    // ...but it takes no Lease: neither in its own namespace nor elsewhere.
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("rota-slot-1".into()),
            ..ObjectMeta::default()
        },
        ..Lease::default()
    };
    for (where_, leases) in [
        ("its namespace", &namespace),
        ("another namespace", &scope.namespace().to_string()),
    ] {
        let created = Api::<Lease>::namespaced(agent_client.clone(), leases)
            .create(&PostParams::default(), &lease)
            .await;
        ensure!(
            api_code(created) == Some(403),
            "the agent may create a Lease in {where_}"
        );
    }
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

    // The node's RotaNode is cluster-scoped: deleted with it go its RotaWindows (their owner).
    Api::<RotaNode>::all(admin.clone())
        .delete(&node, &DeleteParams::default())
        .await?;
    kubectl(
        env,
        &["delete", "--wait=false", "-f", "-"],
        rendered.as_bytes(),
    )?;
    scope.cleanup().await
}

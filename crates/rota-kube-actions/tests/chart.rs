//! The Helm chart `charts/rota`, applied to the real control plane of testenv/ with the helm and
//! kubectl that `testenv/build` builds: its objects exist, its RBAC (under its node-scoped
//! policy) is enough for a drain and no more, and bad values fail `helm template` with a
//! message that names them.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
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
use rota_e2e::testenv::{SKIP_ENV, TestEnv, pod_is_running, tool, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota")
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
        (
            "hostPathPrefix=\"var/lib/host\"",
            "at '/hostPathPrefix': 'var/lib/host' does not match pattern",
        ),
        (
            "hostPathPrefix=\"/srv/host/\"",
            "at '/hostPathPrefix': '/srv/host/' does not match pattern",
        ),
        (
            "agent.releaseDelay=30",
            "at '/agent/releaseDelay': got number, want string",
        ),
        (
            "agent.healthPdbs=\"yes\"",
            "at '/agent/healthPdbs': got string, want boolean",
        ),
        (
            "agent.logFormat=\"yaml\"",
            "at '/agent/logFormat': value must be one of 'text', 'json'",
        ),
        (
            "metrics.port=0",
            "at '/metrics/port': minimum: got 0, want 1",
        ),
        (
            "metrics.port=65536",
            "at '/metrics/port': maximum: got 65,536, want 65,535",
        ),
        (
            "notifications.webhooks=[\"ftp://x\"]",
            "at '/notifications/webhooks/0': 'ftp://x' does not match pattern",
        ),
        (
            "notifications.slack=[\"https://ok\",\"hooks.slack.com/x\"]",
            "at '/notifications/slack/1': 'hooks.slack.com/x' does not match pattern",
        ),
        (
            "notifications.templates={\"failed\":\"{node}: {cause}\"}",
            "notifications.templates [failed]: no webhook to send them to",
        ),
        (
            "agent.windows=[\"mon-fri 22-04\"]",
            "at '/agent/windows/0': 'mon-fri 22-04' does not match pattern",
        ),
        (
            "agent.failureBudget=0",
            "at '/agent/failureBudget': minimum: got 0, want 1",
        ),
        (
            "blockers.prometheus.url=\"prometheus:9090\"",
            "at '/blockers/prometheus/url'",
        ),
        (
            "blockers.prometheus.alertFiringOnly=true",
            "alert filters need blockers.prometheus.url",
        ),
        (
            "blockers.interval=60",
            "at '/blockers/interval': got number, want string",
        ),
        (
            "notifications.templates={\"rebooted\":\"{node}\"}",
            "at '/notifications/templates': additional properties 'rebooted' not allowed",
        ),
        (
            "drain.cordonLabels={\"kured\":\"not ok\"}",
            "at '/drain/cordonLabels/kured'",
        ),
        (
            "drain.uncordonLabels={\"bad key\":\"done\"}",
            "invalid propertyName 'bad key'",
        ),
        (
            "drain.preferNoScheduleTaint=\"Rota/pending\"",
            "at '/drain/preferNoScheduleTaint'",
        ),
        (
            "drain.skipWaitForDeleteTimeout=30",
            "at '/drain/skipWaitForDeleteTimeout'",
        ),
        (
            "agent.rebootSentinelCommandInterval=300",
            "at '/agent/rebootSentinelCommandInterval': got number, want string",
        ),
        (
            "authority.nodeScoped=\"yes\"",
            "at '/authority/nodeScoped': got string, want boolean",
        ),
        (
            "rbac.operators=[{\"kind\":\"ServiceAccount\",\"name\":\"ops\"}]",
            "at '/rbac/operators/0': missing property 'namespace'",
        ),
        (
            "rbac.viewers=[{\"kind\":\"Robot\",\"name\":\"x\"}]",
            "at '/rbac/viewers/0/kind': value must be one of 'User', 'Group', 'ServiceAccount'",
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

#[test]
fn the_chart_renders_windows_and_the_failure_budget_as_agent_flags() -> Result<()> {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let default = agent_args(&rendered_daemonset(&[])?)?;
    ensure!(
        !default
            .iter()
            .any(|a| a.starts_with("--window") || a.starts_with("--failure-budget")),
        "no window and no budget by default: {default:?}"
    );
    let args = agent_args(&rendered_daemonset(&[
        "agent.windows=[\"mon-fri 22:00-04:00 Europe/Berlin\",\"sat 08:00:30-10:00\"]".to_string(),
        "agent.failureBudget=2".to_string(),
    ])?)?;
    let ours: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| a.starts_with("--window") || a.starts_with("--failure-budget"))
        .collect();
    ensure!(
        ours == [
            "--window=mon-fri 22:00-04:00 Europe/Berlin",
            "--window=sat 08:00:30-10:00",
            "--failure-budget=2",
        ],
        "{args:?}"
    );
    Ok(())
}

/// The rendered DaemonSet of `helm template` with `--set-json` arguments.
fn rendered_daemonset(sets: &[String]) -> Result<String> {
    let mut helm = Command::new(tool("helm")?);
    helm.arg("template")
        .arg("rota")
        .arg(chart_dir())
        .arg("--show-only")
        .arg("templates/daemonset.yaml");
    for set in sets {
        helm.arg("--set-json").arg(set);
    }
    let out = helm
        .stdin(Stdio::null())
        .output()
        .context("running helm template")?;
    ensure!(
        out.status.success(),
        "helm template {sets:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The agent's args in a rendered DaemonSet: the items of its `args:` list, each unquoted.
fn agent_args(daemonset: &str) -> Result<Vec<String>> {
    let mut lines = daemonset
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1);
    let mut args = Vec::new();
    for line in lines.by_ref() {
        let Some(item) = line.trim().strip_prefix("- ") else {
            break;
        };
        args.push(if item.starts_with('"') {
            serde_json::from_str(item).with_context(|| format!("arg {item}"))?
        } else {
            item.to_string()
        });
    }
    ensure!(!args.is_empty(), "no args in:\n{daemonset}");
    Ok(args)
}

#[test]
fn the_chart_renders_metrics_notifications_and_log_format_as_agent_flags() -> Result<()> {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let probes = |port: &str| {
        [
            format!("ports:\n            - name: metrics\n              containerPort: {port}\n"),
            "livenessProbe:\n            httpGet:\n              path: /healthz\n              port: metrics\n".to_string(),
            "readinessProbe:\n            httpGet:\n              path: /readyz\n              port: metrics\n".to_string(),
            "prometheus.io/path: /metrics\n".to_string(),
            format!("prometheus.io/port: \"{port}\"\n"),
            "prometheus.io/scrape: \"true\"\n".to_string(),
        ]
    };

    // Defaults: metrics on 9746 with probes and scrape annotations, text logs, no webhooks.
    let default = rendered_daemonset(&[])?;
    let args = agent_args(&default)?;
    for arg in ["--metrics-addr=0.0.0.0:9746", "--log-format=text"] {
        ensure!(args.iter().any(|a| a == arg), "no {arg} in {args:?}");
    }
    ensure!(
        !args.iter().any(|a| a.starts_with("--notify-")),
        "notification flags by default: {args:?}"
    );
    for snippet in probes("9746") {
        ensure!(default.contains(&snippet), "no {snippet:?} in:\n{default}");
    }

    // Custom values: another port, JSON logs, webhooks, Slack URLs and templates in order,
    // and the chart's own podAnnotations beside the scrape annotations.
    let custom = rendered_daemonset(&[
        "metrics.port=9999".to_string(),
        "agent.logFormat=\"json\"".to_string(),
        format!(
            "notifications={}",
            json!({
                "webhooks": ["https://hooks.example/a", "http://10.0.0.1:8080/b"],
                "slack": ["https://hooks.slack.com/services/T/B/X"],
                "templates": {
                    "reboot": "rebooting {node} \"now\"",
                    "failed": "{node} failed {process}: {cause}",
                },
            })
        ),
        "podAnnotations={\"team\":\"ops\"}".to_string(),
    ])?;
    let args = agent_args(&custom)?;
    let flags: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| {
            ["--metrics-addr", "--log-format", "--notify-"]
                .iter()
                .any(|p| a.starts_with(p))
        })
        .collect();
    ensure!(
        flags
            == [
                "--log-format=json",
                "--metrics-addr=0.0.0.0:9999",
                "--notify-webhook=https://hooks.example/a",
                "--notify-webhook=http://10.0.0.1:8080/b",
                "--notify-slack=https://hooks.slack.com/services/T/B/X",
                "--notify-template=failed={node} failed {process}: {cause}",
                "--notify-template=reboot=rebooting {node} \"now\"",
            ],
        "flags: {flags:?}"
    );
    for snippet in probes("9999") {
        ensure!(custom.contains(&snippet), "no {snippet:?} in:\n{custom}");
    }
    ensure!(
        custom.contains("team: ops\n"),
        "podAnnotations lost:\n{custom}"
    );

    // Blockers: none but the interval by default; every value a flag.
    let blockers = |args: &[String]| -> Vec<String> {
        args.iter()
            .filter(|a| {
                [
                    "--blocking-pod-selector",
                    "--prometheus-url",
                    "--alert-",
                    "--blocker-interval",
                ]
                .iter()
                .any(|p| a.starts_with(p))
            })
            .cloned()
            .collect()
    };
    ensure!(
        blockers(&agent_args(&default)?) == ["--blocker-interval=1m"],
        "default blocker flags: {:?}",
        blockers(&agent_args(&default)?)
    );
    let custom = rendered_daemonset(&[format!(
        "blockers={}",
        json!({
            "podSelectors": ["app=backup", "tier in (db,cache)"],
            "prometheus": {
                "url": "http://prometheus.monitoring:9090",
                "alertFilterRegexp": "^(Watchdog|InfoInhibitor)$",
                "alertFilterMatchOnly": true,
                "alertFiringOnly": true,
            },
            "interval": "30s",
        })
    )])?;
    let flags = blockers(&agent_args(&custom)?);
    ensure!(
        flags
            == [
                "--blocking-pod-selector=app=backup",
                "--blocking-pod-selector=tier in (db,cache)",
                "--prometheus-url=http://prometheus.monitoring:9090",
                "--alert-filter-regexp=^(Watchdog|InfoInhibitor)$",
                "--alert-filter-match-only",
                "--alert-firing-only",
                "--blocker-interval=30s",
            ],
        "blocker flags: {flags:?}"
    );

    // Metrics disabled: no address, port, probes or scrape annotations.
    let disabled = rendered_daemonset(&["metrics.enabled=false".to_string()])?;
    let args = agent_args(&disabled)?;
    ensure!(
        !args.iter().any(|a| a.starts_with("--metrics-addr")),
        "{args:?}"
    );
    for absent in [
        "containerPort",
        "livenessProbe",
        "readinessProbe",
        "prometheus.io/",
        "annotations:",
    ] {
        ensure!(
            !disabled.contains(absent),
            "{absent} with metrics disabled:\n{disabled}"
        );
    }
    Ok(())
}

#[test]
fn the_chart_renders_the_kured_style_drain_values_as_agent_flags() -> Result<()> {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let label_flags = |args: Vec<String>| -> Vec<String> {
        args.into_iter()
            .filter(|a| {
                a.starts_with("--cordon-label")
                    || a.starts_with("--uncordon-label")
                    || a.starts_with("--prefer-no-schedule-taint")
                    || a.starts_with("--drain-skip-wait-for-delete-timeout")
                    || a.starts_with("--reboot-sentinel-command")
            })
            .collect()
    };
    let default = label_flags(agent_args(&rendered_daemonset(&[])?)?);
    ensure!(default.is_empty(), "defaults: {default:?}");
    let custom = label_flags(agent_args(&rendered_daemonset(&[
        "drain.cordonLabels={\"kured\":\"rebooting\",\"example.com/out\":\"true\"}".to_string(),
        "drain.uncordonLabels={\"kured\":\"done\"}".to_string(),
        "drain.preferNoScheduleTaint=\"rota.dev/pending\"".to_string(),
        "drain.skipWaitForDeleteTimeout=\"5m\"".to_string(),
        "agent.rebootSentinelCommand=\"! needs-restarting -r\"".to_string(),
    ])?)?);
    ensure!(
        custom
            == [
                "--reboot-sentinel-command=! needs-restarting -r",
                "--reboot-sentinel-command-interval=5m",
                "--drain-skip-wait-for-delete-timeout=5m",
                "--cordon-label=example.com/out=true",
                "--cordon-label=kured=rebooting",
                "--uncordon-label=kured=done",
                "--prefer-no-schedule-taint=rota.dev/pending"
            ],
        "custom: {custom:?}"
    );
    Ok(())
}

#[test]
fn the_chart_renders_the_health_gate_values_as_agent_flags() -> Result<()> {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let gate_flags = |args: Vec<String>| -> Vec<String> {
        args.into_iter()
            .filter(|a| a.starts_with("--release-delay") || a.starts_with("--health-pdbs"))
            .collect()
    };
    let default = gate_flags(agent_args(&rendered_daemonset(&[])?)?);
    ensure!(default == ["--release-delay=0s"], "defaults: {default:?}");
    let custom = gate_flags(agent_args(&rendered_daemonset(&[
        "agent.releaseDelay=\"2m\"".to_string(),
        "agent.healthPdbs=true".to_string(),
    ])?)?);
    ensure!(
        custom == ["--release-delay=2m", "--health-pdbs"],
        "custom: {custom:?}"
    );
    Ok(())
}

//! rota as users install it: `helm install` of charts/rota with the image `scripts/image`
//! built, on the control plane whose one real node runs a kubelet and containerd
//! (`testenv/node-up`). The agent pod runs under the kubelet with the chart's pod spec, talks to
//! the API server with its own service account, drains real containers under a
//! PodDisruptionBudget (and waits for a wait-completed Job's container to finish, never evicting
//! it) and runs a stand-in reboot command through the chart's values. Every host
//! path of the chart points into a directory of the test; nothing can reboot or change this
//! machine.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use rota_e2e::real_node::RealNode;
use rota_e2e::testenv::{Scope, api_error_code, pod_is_running, run, tool, wait_for};
use rota_kube_api::{RotaNode, RotaWindow};
use serde_json::json;

const IMAGE_ENV: &str = "ROTA_TEST_IMAGE";
/// The name the chart's default image (`repository: rota`, the tag its appVersion) has in
/// containerd.
const IMAGE: &str = "docker.io/library/rota:0.1.0";
const RELEASE: &str = "rota";
const NAMESPACE: &str = "rota-system";
const TIMEOUT: Duration = Duration::from_secs(180);

/// The host side of the chart's mounts: `<dir>/run`, `<dir>/var`, `<dir>/var/run` stand for
/// the node's own.
struct Host {
    dir: tempfile::TempDir,
    /// Boot ids are `<test>-<n>`: tests share the node and its RotaNode, never a boot id.
    test: String,
}

impl Host {
    fn new(node: &RealNode, test: &str) -> Result<Host> {
        let dir = tempfile::Builder::new()
            .prefix("host-")
            .tempdir_in(node.dir()?)?;
        for sub in ["run", "var/run", "var/lib/rota"] {
            std::fs::create_dir_all(dir.path().join(sub))?;
        }
        let host = Host {
            dir,
            test: test.to_string(),
        };
        host.set_boot(1)?;
        Ok(host)
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    fn set_boot(&self, n: u32) -> Result<()> {
        let id = format!("{}-{n}", self.test);
        Ok(std::fs::write(self.path("var/boot-id"), format!("{id}\n"))?)
    }

    /// How many times the stand-in reboot command ran.
    fn reboots(&self) -> usize {
        std::fs::read_to_string(self.path("reboots"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// What a reboot does to the node's /run: it comes back empty.
    fn empty_run(&self) -> Result<()> {
        for entry in std::fs::read_dir(self.path("run"))? {
            let path = entry?.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
    }
}

/// The chart's values for this test: every host path under `host`, a reboot command that only
/// records that it ran (in this machine's namespaces, entered through the kubelet's pid, as the
/// chart's nsenter would enter PID 1's on a real node), the agent only on the real node.
fn values(node: &RealNode, host: &Host) -> Result<serde_json::Value> {
    let enter = format!("nsenter -t {} -m -u -i -n -p --", node.kubelet_pid()?);
    Ok(json!({
        "image": { "pullPolicy": "Never" },
        "hostPathPrefix": host.dir.path(),
        "nodeSelector": { "rota.dev/testenv-real-node": "true" },
        "agent": {
            "concurrency": 1,
            "bootIdFile": "/host/var/boot-id",
            "rebootCommand": format!("{enter} sh -c 'echo reboot >> {}'", host.path("reboots").display()),
            "execPrefix": enter,
            "healthInterval": "1s",
            "verifyTimeout": "3m",
            "backoff": { "initial": "1s", "max": "10s", "exponent": 2 },
            "procedurePoll": "10s",
            "startJitter": "0s",
        },
        "drain": { "gracePeriod": "5s" },
    }))
}

fn helm(node: &RealNode, args: &[&str]) -> Result<String> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota");
    let mut cmd = Command::new(tool("helm")?);
    cmd.arg("--kubeconfig").arg(node.kubeconfig());
    for arg in args {
        if *arg == "CHART" {
            cmd.arg(&chart);
        } else {
            cmd.arg(arg);
        }
    }
    run(&mut cmd)
}

/// `helm install` with this test's values and `extra` ones (`--set` arguments).
fn helm_install(node: &RealNode, host: &Host, extra: &[&str]) -> Result<()> {
    let values_file = host.path("values.json");
    std::fs::write(&values_file, serde_json::to_vec(&values(node, host)?)?)?;
    let values_file = values_file.to_str().context("non-UTF-8 path")?.to_string();
    let mut args = vec!["install", RELEASE, "CHART", "--values", &values_file];
    for set in extra {
        args.extend(["--set", set]);
    }
    helm(node, &args)?;
    Ok(())
}

/// The real node, with rota's image (`ROTA_TEST_IMAGE`, the archive of `scripts/image`) in its
/// containerd.
fn real_node_with_the_image() -> Result<RealNode> {
    let node = RealNode::get()?;
    let archive = std::env::var_os(IMAGE_ENV)
        .map(PathBuf::from)
        .with_context(|| {
            format!(
                "{IMAGE_ENV} is not set: scripts/test sets it to the archive scripts/image writes"
            )
        })?;
    node.import_image(&archive, IMAGE)?;
    Ok(node)
}

/// The KEP-5683 node lifecycle conditions that the agent sets on its Node, in the order
/// [`lifecycle_conditions`] reads them.
const LIFECYCLE_CONDITIONS: [&str; 4] = [
    "MaintenancePlanned",
    "DrainInProgress",
    "Drained",
    "MaintenanceInProgress",
];

/// The status of each of [`LIFECYCLE_CONDITIONS`] on the Node `name`, as an operator reads it:
/// `kubectl get node -o jsonpath`; empty for a condition the Node does not list.
fn lifecycle_conditions(node: &RealNode, name: &str) -> Result<Vec<String>> {
    let kubectl = tool("kubectl")?;
    LIFECYCLE_CONDITIONS
        .iter()
        .map(|type_| {
            let path = format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}");
            let mut cmd = Command::new(&kubectl);
            cmd.arg("--kubeconfig")
                .arg(node.kubeconfig())
                .args(["get", "node", name, "-o", &path]);
            Ok(run(&mut cmd)?.trim().to_string())
        })
        .collect()
}

/// The release's agents' pods (component `agent`), not its scheduler's replicas (component
/// `scheduler`), which run on the same node.
fn agent_selector() -> String {
    format!(
        "app.kubernetes.io/name=rota,app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
    )
}

/// The agent pod on the real node once it is Ready (its probes passed), and its name.
async fn agent_ready(client: &Client, node: &str) -> Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = agent_selector();
    wait_for("the agent pod Ready on the real node", TIMEOUT, || async {
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        Ok(running_on(&list.items, node).cloned())
    })
    .await
}

/// A Deployment of two busybox containers that stop at once on SIGTERM, one on the real node
/// (preferred) and one on a kwok node (never two on one node), under a budget that lets one go
/// at a time.
async fn workload(scope: &Scope, node: &RealNode, kwok: &[String]) -> Result<()> {
    let mut hosts = kwok.to_vec();
    hosts.push(node.name()?.to_string());
    let labels = json!({ "app": "web" });
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": labels },
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{ "matchExpressions": [{
                                    "key": "kubernetes.io/hostname", "operator": "In", "values": hosts,
                                }]}],
                            },
                            "preferredDuringSchedulingIgnoredDuringExecution": [{
                                "weight": 100,
                                "preference": { "matchExpressions": [{
                                    "key": "rota.dev/testenv-real-node", "operator": "In", "values": ["true"],
                                }]},
                            }],
                        },
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [{
                                "labelSelector": { "matchLabels": labels },
                                "topologyKey": "kubernetes.io/hostname",
                            }],
                        },
                    },
                    "containers": [{
                        "name": "web",
                        "image": node.busybox_image()?,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                    }],
                },
            },
        },
    }))?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "minAvailable": 1, "selector": { "matchLabels": labels } },
    }))?;
    scope
        .api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await?;
    scope
        .api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await?;
    Ok(())
}

/// A Job's pod on the real node, annotated `rota.dev/drain: wait-completed`, that sleeps 20 s
/// (past the drain, which starts a few seconds after it runs) and exits 0; once Running. This
/// control plane runs no Job controller (testenv/up's --controllers), so the pod is made as the
/// Job controller makes one: owned by its Job, which stays suspended. The real kubelet runs it.
async fn ci_job_on_the_real_node(scope: &Scope, node: &RealNode) -> Result<Pod> {
    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "ci" },
        "spec": {
            "suspend": true,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "ci", "image": node.busybox_image()? }],
            }},
        },
    }))?;
    let job = scope
        .api::<Job>()
        .create(&PostParams::default(), &job)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "ci-job",
            "labels": { "app": "ci" },
            "annotations": { "rota.dev/drain": "wait-completed" },
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "ci", "uid": job.uid(),
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "nodeName": node.name()?,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "ci",
                "image": node.busybox_image()?,
                "imagePullPolicy": "Never",
                "command": ["sleep", "20"],
            }],
        },
    }))?;
    scope.pods().create(&PostParams::default(), &pod).await?;
    wait_for("the CI job running on the real node", TIMEOUT, || async {
        let pod = scope.pods().get("ci-job").await?;
        Ok(pod_is_running(&pod).then_some(pod))
    })
    .await
}

fn running_on<'a>(pods: &'a [Pod], node: &str) -> Option<&'a Pod> {
    pods.iter().find(|p| {
        pod_is_running(p) && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
    })
}

/// The node's RotaNode; none before the chart installed the CRD, or before the agent made it.
async fn rota_node(client: &Client, node: &str) -> Result<Option<RotaNode>> {
    match Api::<RotaNode>::all(client.clone()).get_opt(node).await {
        Err(e) if api_error_code(&e) == Some(404) => Ok(None),
        other => Ok(other?),
    }
}

async fn unschedulable(client: &Client, node: &str) -> Result<bool> {
    let node = Api::<Node>::all(client.clone()).get(node).await?;
    Ok(node.spec.and_then(|s| s.unschedulable).unwrap_or(false))
}

/// What both tests start from: the image in containerd, a host directory, two kwok nodes beside
/// the real one, and the web workload with one container on the real node.
struct Fixture {
    node: RealNode,
    client: Client,
    name: String,
    host: Host,
    scope: Scope,
    /// The web pod on the real node.
    real_pod: String,
    /// `finished` entries in the RotaNode's history before this test (earlier tests share the
    /// node).
    finished_before: usize,
}

impl Fixture {
    async fn new(test: &str) -> Result<Fixture> {
        let node = real_node_with_the_image()?;
        let client = node.client().await?;
        let name = node.name()?.to_string();
        let host = Host::new(&node, test)?;
        let scope = node.scope(test).await?;
        let kwok = scope.create_ready_nodes(2).await?;
        workload(&scope, &node, &kwok).await?;
        let web = scope.pods();
        let real_pod = wait_for(
            "a web container running on the real node",
            TIMEOUT,
            || async {
                let pods = web
                    .list(&ListParams::default().labels("app=web"))
                    .await?
                    .items;
                Ok(running_on(&pods, &name).map(|p| p.name_any()))
            },
        )
        .await?;
        let finished_before = finished_entries(&client, &name).await?;
        Ok(Fixture {
            node,
            client,
            name,
            host,
            scope,
            real_pod,
            finished_before,
        })
    }

    /// `helm install` with this test's values; the agent pod once Ready.
    async fn install(&self) -> Result<Pod> {
        let installed = Instant::now();
        helm_install(&self.node, &self.host, &[])?;
        let agent = agent_ready(&self.client, &self.name).await?;
        eprintln!(
            "helm install -> agent pod {} Ready in {:.1}s",
            agent.name_any(),
            installed.elapsed().as_secs_f64()
        );
        Ok(agent)
    }

    /// `helm uninstall`, until the release's pods are gone: its agents' and its scheduler's (a
    /// scheduler left over would compete with the next install's for the lead).
    async fn uninstall(&self) -> Result<()> {
        helm(&self.node, &["uninstall", RELEASE, "--wait"])?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        let selector = format!("app.kubernetes.io/instance={RELEASE}");
        wait_for("the agent and scheduler pods gone", TIMEOUT, || async {
            let left = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok(left.items.is_empty().then_some(()))
        })
        .await
    }

    /// Touches the reboot sentinel and waits until the stand-in reboot command ran: the node
    /// is then cordoned, its web container evicted, and its RotaNode `rebooting`.
    async fn request_reboot_and_wait_for_it(&self) -> Result<()> {
        std::fs::write(self.host.path("run/reboot-needed"), b"")?;
        wait_for("the stand-in reboot command to run", TIMEOUT, || async {
            Ok((self.host.reboots() > 0).then_some(()))
        })
        .await?;
        ensure!(
            unschedulable(&self.client, &self.name).await?,
            "the node is not cordoned while it reboots"
        );
        let pods = self
            .scope
            .pods()
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items;
        ensure!(
            pods.iter().all(|p| p.name_any() != self.real_pod),
            "the web pod {} on the real node was not evicted: {:?}",
            self.real_pod,
            pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
        );
        self.expect_state("rebooting").await
    }

    async fn expect_state(&self, state: &str) -> Result<()> {
        let status = rota_node(&self.client, &self.name)
            .await?
            .and_then(|r| r.status);
        ensure!(
            status.as_ref().map(|s| s.state.to_string()).as_deref() == Some(state),
            "the RotaNode is not {state}: {status:?}"
        );
        Ok(())
    }

    /// What a reboot does to the node as the agent sees it: a new boot id and an empty /run.
    fn reboot(&self) -> Result<()> {
        self.host.set_boot(2)?;
        self.host.empty_run()
    }

    /// Waits until the node finished its reboot: idle, a new `finished` entry, uncordoned, its
    /// slot released, and rebooted exactly once.
    async fn wait_finished(&self) -> Result<()> {
        let status = wait_for(
            "the RotaNode idle with the reboot finished",
            TIMEOUT,
            || async {
                let finished = finished_entries(&self.client, &self.name).await?;
                let status = rota_node(&self.client, &self.name)
                    .await?
                    .and_then(|r| r.status);
                Ok(status
                    .filter(|s| s.state.to_string() == "idle" && finished > self.finished_before))
            },
        )
        .await?;
        ensure!(
            !unschedulable(&self.client, &self.name).await?,
            "the node is still cordoned after it finished"
        );
        assert_eq!(
            self.host.reboots(),
            1,
            "the node did not reboot exactly once"
        );
        assert!(
            status.slot.is_none(),
            "the slot was not released: {status:?}"
        );
        Ok(())
    }

    async fn cleanup(self) -> Result<()> {
        self.scope.cleanup().await
    }
}

/// `VmRSS` of the `rota agent` processes that run in a container: started as the chart starts
/// them (`rota agent`, where the tests' local agents run a path), in a mount namespace other
/// than this process's.
fn agent_rss() -> Result<String> {
    let own = std::fs::read_link("/proc/self/ns/mnt")?;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let proc = entry?.path();
        let Ok(cmdline) = std::fs::read(proc.join("cmdline")) else {
            continue;
        };
        let in_container = std::fs::read_link(proc.join("ns/mnt")).is_ok_and(|ns| ns != own);
        if in_container && cmdline.starts_with(b"rota\0agent\0") {
            let status = std::fs::read_to_string(proc.join("status")).unwrap_or_default();
            if let Some(rss) = status.lines().find(|l| l.starts_with("VmRSS:")) {
                found.push(rss.trim_start_matches("VmRSS:").trim().to_string());
            }
        }
    }
    ensure!(
        !found.is_empty(),
        "no rota agent process runs in a container of the real node"
    );
    Ok(found.join(", "))
}

/// The node's `finished` history entries, in its RotaNode and in the RotaWindows its windows'
/// history moved to as they ended, each once.
async fn finished_entries(client: &Client, node: &str) -> Result<usize> {
    let status = rota_node(client, node).await?.and_then(|r| r.status);
    let windows = Api::<RotaWindow>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("list the RotaWindows")?;
    let moved = windows
        .items
        .into_iter()
        .filter(|w| w.spec.node == node)
        .flat_map(|w| w.spec.history);
    let ids: BTreeSet<i64> = status
        .map(|s| s.history)
        .unwrap_or_default()
        .into_iter()
        .chain(moved)
        .filter(|h| h.event.to_string() == "finished")
        .map(|h| h.id)
        .collect();
    Ok(ids.len())
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_install_puts_the_agent_on_the_real_node_and_it_reboots_it_once() -> Result<()> {
    let fx = Fixture::new("real-node-reboot").await?;
    let agent = fx.install().await?;
    // The agent uses the pod's own service account, not an admin kubeconfig.
    assert_eq!(
        agent
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some("rota-agent")
    );
    // A measurement for the closing note, not an assertion: the idle agent's resident memory
    // in its pod, as the kernel counts it.
    // A CI job the drain must not evict: it waits until the job has completed (issue 41).
    let ci_job = ci_job_on_the_real_node(&fx.scope, &fx.node).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!("idle agent in its pod: {}", agent_rss()?);
    fx.request_reboot_and_wait_for_it().await?;
    // The reboot came after the drain, and the drain after the job's end: it ran to completion
    // on the node, never evicted.
    let ci_after = fx.scope.pods().get("ci-job").await?;
    ensure!(
        ci_after.uid() == ci_job.uid()
            && ci_after.metadata.deletion_timestamp.is_none()
            && ci_after.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"),
        "the CI job did not run to its end before the reboot: {:?} {:?}",
        ci_after.metadata,
        ci_after.status.as_ref().map(|s| &s.phase)
    );
    // Mid-window, the Node says so in KEP-5683's words (the agent set them before it ran the
    // reboot command), beside the conditions the real kubelet keeps.
    let mid_window = lifecycle_conditions(&fx.node, &fx.name)?;
    ensure!(
        mid_window == ["True", "False", "True", "True"],
        "MaintenancePlanned, DrainInProgress, Drained, MaintenanceInProgress while rebooting: \
         {mid_window:?}"
    );

    // The "reboot": and the agent pod goes with the old boot.
    fx.reboot()?;
    Api::<Pod>::namespaced(fx.client.clone(), NAMESPACE)
        .delete(&agent.name_any(), &DeleteParams::default())
        .await?;
    fx.wait_finished().await?;
    let new_agent = agent_ready(&fx.client, &fx.name).await?;
    assert_ne!(new_agent.name_any(), agent.name_any());
    // Back in service and idle: each False, and still listed (MaintenancePlanned goes with
    // the idle agent's next pass, right after the write that ended the window).
    wait_for("the lifecycle conditions False", TIMEOUT, || async {
        let now = lifecycle_conditions(&fx.node, &fx.name)?;
        Ok((now == ["False"; 4]).then_some(()))
    })
    .await?;
    let ready = Api::<Node>::all(fx.client.clone())
        .get(&fx.name)
        .await?
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status);
    ensure!(
        ready.as_deref() == Some("True"),
        "the kubelet's Ready is {ready:?}"
    );

    let events: Api<Event> = Api::all(fx.client.clone());
    let on_node = events
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name={},involvedObject.kind=Node",
            fx.name
        )))
        .await?
        .items;
    let reasons: Vec<String> = on_node.iter().filter_map(|e| e.reason.clone()).collect();
    eprintln!("events on the node: {reasons:?}");
    for reason in [
        "SlotAcquired",
        "Rebooting",
        "Verifying",
        "MaintenanceFinished",
    ] {
        ensure!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event on the node: {reasons:?}"
        );
    }

    scraped_through_the_annotations(&new_agent).await?;

    // `helm upgrade` with a changed value rolls the DaemonSet: a new agent pod, Ready.
    let values_file = fx.host.path("values.json");
    let values_file = values_file.to_str().context("non-UTF-8 path")?;
    helm(
        &fx.node,
        &[
            "upgrade",
            RELEASE,
            "CHART",
            "--values",
            values_file,
            "--set",
            "agent.logLevel=debug",
        ],
    )?;
    let upgraded = wait_for("the upgraded agent pod Ready", TIMEOUT, || async {
        let agent = agent_ready(&fx.client, &fx.name).await?;
        Ok((agent.name_any() != new_agent.name_any()).then_some(agent))
    })
    .await?;
    let env = upgraded
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find(|e| e.name == "RUST_LOG"))
        .and_then(|e| e.value.clone());
    assert_eq!(
        env.as_deref(),
        Some("debug"),
        "the upgrade did not reach the pod"
    );
    fx.uninstall().await?;
    fx.cleanup().await
}

/// The agent pod found through the chart's `prometheus.io/*` annotations, as a cluster's
/// Prometheus finds it, handed to the test Prometheus (`scripts/prometheus-up`, whose file_sd
/// directory is `ROTA_TEST_PROMETHEUS_TARGETS`), which then scrapes its `/metrics`.
async fn scraped_through_the_annotations(agent: &Pod) -> Result<()> {
    let url = std::env::var("ROTA_TEST_PROMETHEUS_URL")
        .context("ROTA_TEST_PROMETHEUS_URL is not set: scripts/test starts the test Prometheus")?;
    let targets = std::env::var("ROTA_TEST_PROMETHEUS_TARGETS").context(
        "ROTA_TEST_PROMETHEUS_TARGETS is not set: scripts/test names the test Prometheus's file_sd directory",
    )?;
    let annotations = agent.annotations();
    let annotation = |key: &str| {
        annotations
            .get(key)
            .cloned()
            .with_context(|| format!("the agent pod has no {key} annotation: {annotations:?}"))
    };
    ensure!(annotation("prometheus.io/scrape")? == "true");
    let ip = agent
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("the agent pod has no IP")?;
    let target = json!([{
        "targets": [format!("{ip}:{}", annotation("prometheus.io/port")?)],
        "labels": {
            "__metrics_path__": annotation("prometheus.io/path")?,
            "kubernetes_pod_name": agent.name_any(),
        },
    }]);
    let file = Path::new(&targets).join("rota-agent.json");
    std::fs::write(&file, serde_json::to_vec(&target)?)?;

    let http = reqwest::Client::new();
    let query = format!(
        "rota_slot_held{{job=\"annotated-pods\",kubernetes_pod_name=\"{}\"}}",
        agent.name_any()
    );
    let series = wait_for("Prometheus to scrape the agent pod", TIMEOUT, || async {
        let answer: serde_json::Value = http
            .get(format!("{url}/api/v1/query"))
            .query(&[("query", &query)])
            .send()
            .await?
            .json()
            .await?;
        let result = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok((!result.is_empty()).then_some(result))
    })
    .await;
    std::fs::remove_file(&file)?;
    eprintln!("scraped: {}", serde_json::Value::Array(series?));
    Ok(())
}

/// `helm uninstall` while the node is in its window (rebooting) takes the agents and their
/// RBAC, and keeps their namespace (`helm.sh/resource-policy: keep`) with the slot Leases: the
/// node stays cordoned, holds its slot, and its RotaNode keeps its state (custom resources
/// outlive the release). Installed again, the agent takes up the window where it stopped and
/// finishes it: the reboot is not repeated. (Without the keep, the namespace and the Lease went,
/// and the new agent, refused by every fence, left the node cordoned for good.)
#[tokio::test(flavor = "multi_thread")]
async fn helm_uninstall_in_the_middle_of_a_window_leaves_the_node_out_until_reinstalled()
-> Result<()> {
    let fx = Fixture::new("real-node-uninstall").await?;
    fx.install().await?;
    fx.request_reboot_and_wait_for_it().await?;

    fx.uninstall().await?;
    ensure!(
        unschedulable(&fx.client, &fx.name).await?,
        "the node was uncordoned by the uninstall"
    );
    fx.expect_state("rebooting").await?;
    // The namespace stays, and in it the node's slot.
    let lease = Api::<Lease>::namespaced(fx.client.clone(), NAMESPACE)
        .get("rota-slot-0")
        .await
        .context("the slot Lease after helm uninstall")?;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(fx.name.as_str()),
        "the node in its window no longer holds its slot"
    );

    fx.reboot()?;
    fx.install().await?;
    fx.wait_finished().await?;
    fx.uninstall().await?;
    fx.cleanup().await
}

/// An agent whose service account has none of the chart's RBAC (`rbac.create=false`) stops at
/// once with one line naming what it lacks, and the pod's logs (through the kubelet) show it.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_without_its_rbac_names_what_it_lacks_in_its_pod_logs() -> Result<()> {
    let node = real_node_with_the_image()?;
    let client = node.client().await?;
    let host = Host::new(&node, "real-node-rbac")?;
    helm_install(&node, &host, &["rbac.create=false"])?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = agent_selector();
    let logs = wait_for("the agent's error in its pod's logs", TIMEOUT, || async {
        for pod in pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            for previous in [false, true] {
                let params = LogParams {
                    previous,
                    ..LogParams::default()
                };
                if let Ok(logs) = pods.logs(&pod.name_any(), &params).await
                    && logs.contains("RBAC permission(s) it needs")
                {
                    return Ok(Some(logs));
                }
            }
        }
        Ok(None)
    })
    .await;
    helm(&node, &["uninstall", RELEASE, "--wait"])?;
    let logs = logs?;
    eprintln!("the agent's logs: {logs}");
    let line = logs
        .lines()
        .find(|l| l.starts_with("error:"))
        .context("no error line in the agent's logs")?;
    ensure!(
        line.contains("lacks") && line.contains("on `nodes`") && line.contains("rbac.create=true"),
        "the error line does not name the permissions and the fix: {line}"
    );
    Ok(())
}

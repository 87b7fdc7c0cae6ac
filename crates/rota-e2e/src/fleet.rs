//! A fleet of real `rota agent` processes in Kubernetes mode, one per kwok node.
//!
//! Each [`Fleet`] host is a directory standing in for a machine: a host root (`root/`, with
//! `run/` and `var/run/`), a boot id file, the agent's log and a log of reboot commands. The
//! agents run with `--store kube --node-actions kube` against the test's namespace.
//!
//! The reboot command an agent runs appends a line to the host's `reboots.log` and creates
//! `reboot-requested`. A supervisor task sees that file and reboots the "machine": it kills the
//! agent and what it started with SIGKILL (the machine going down), writes a new boot id, empties the host root's
//! `run/`, and starts the agent again. A test can hold a host's reboots back
//! ([`Fleet::hold_reboots`]) to act while the node is between asking for a reboot and getting it.
//! A host's agent is stopped and started only under the host's lock, so the supervisor's
//! reboots and a test's kills and restarts never leave two agents running for one node.
//!
//! [`DisruptionWatch`] follows the Nodes through a watch and remembers the largest number of
//! them that were unschedulable at any observed version of the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use rota_core::{NodeName, Process};
use rota_kube_api::crd::{RequestStateName, RequestStatus, Timestamp};
use rota_kube_api::{RotaNode, crds};
use rota_store::now_millis;
use rota_store_kube::{KubeStore, KubeStoreConfig, NAMESPACE_LABEL};
use tokio::task::JoinHandle;

use crate::testenv::{Scope, TestEnv};

/// The sentinel every agent of a fleet watches, as seen on the host.
pub const REBOOT_SENTINEL: &str = "/run/reboot-needed";
/// How often the supervisor looks for reboot requests.
const SUPERVISOR_PERIOD: Duration = Duration::from_millis(100);

/// Adds a pending reboot request to the RotaNode named `object` as `kubectl edit` would: a
/// replace of the object, which wakes no agent. A write of the node's agent in between makes
/// it read the object again and retry.
pub async fn request_reboot_by_hand(client: Client, object: &str) -> Result<()> {
    let api: Api<RotaNode> = Api::all(client);
    for _ in 0..5 {
        let mut edited = api.get(object).await?;
        let status = edited
            .status
            .get_or_insert_with(|| rota_store_kube::record::new_status(now_millis()));
        status.last_id += 1;
        status.requests.push(RequestStatus {
            id: status.last_id,
            process: Process::Reboot,
            source: "kubectl".into(),
            created_at: Timestamp(now_millis()),
            state: RequestStateName::Pending,
        });
        match api.replace(object, &PostParams::default(), &edited).await {
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            written => {
                written.with_context(|| format!("editing RotaNode {object} by hand"))?;
                return Ok(());
            }
        }
    }
    bail!("RotaNode {object} kept changing under the edit by hand")
}

/// Installs (or updates) rota's CRDs and waits until the API server serves them.
pub async fn install_crd(client: Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in crds() {
        let name = crd.metadata.name.clone().context("a CRD without a name")?;
        api.patch(
            &name,
            &PatchParams::apply("rota-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying the CRD {name}"))?;
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("the CRD {name} was not established within a minute"))?
        .with_context(|| format!("watching the CRD {name}"))?;
    }
    Ok(())
}

/// One simulated machine: its files and its agent process.
struct Host {
    node: String,
    dir: PathBuf,
    /// Flags for this host's agent only, after the fleet's.
    extra: Vec<String>,
    agent: Mutex<Option<Child>>,
    boots: AtomicU32,
    hold: AtomicBool,
}

impl Host {
    fn agent(&self) -> MutexGuard<'_, Option<Child>> {
        self.agent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn boot_id_file(&self) -> PathBuf {
        self.dir.join("boot_id")
    }

    fn reboot_marker(&self) -> PathBuf {
        self.dir.join("reboot-requested")
    }

    fn reboots_log(&self) -> PathBuf {
        self.dir.join("reboots.log")
    }

    fn agent_log(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    fn write_boot_id(&self) -> Result<()> {
        let boot = self.boots.fetch_add(1, Ordering::SeqCst) + 1;
        let path = self.boot_id_file();
        std::fs::write(&path, format!("{}-boot-{boot}\n", self.node))
            .with_context(|| format!("writing {}", path.display()))
    }

    /// SIGKILLs the agent, if it runs, and reaps it.
    fn kill(&self) -> Result<()> {
        self.kill_in(&mut self.agent())
    }

    /// [`Host::kill`] with the host's lock held: `slot` is its agent.
    fn kill_in(&self, slot: &mut Option<Child>) -> Result<()> {
        if let Some(mut child) = slot.take() {
            // The agent's process group: the commands it runs die with it, as they do in its
            // systemd unit's cgroup or its container, and with the machine when it reboots. A
            // reboot command left running would otherwise reboot the next boot again. The
            // group outlives an agent that aborted, while its commands run; a group already
            // empty is no error.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            child
                .kill()
                .with_context(|| format!("killing the agent of {}", self.node))?;
            child
                .wait()
                .with_context(|| format!("reaping the agent of {}", self.node))?;
        }
        Ok(())
    }

    /// What a reboot does to the machine: the agent dies, the boot id changes, `/run` empties.
    /// `slot` is the agent, under the host's lock.
    fn reboot_in(&self, slot: &mut Option<Child>) -> Result<()> {
        self.kill_in(slot)?;
        let marker = self.reboot_marker();
        std::fs::remove_file(&marker).with_context(|| format!("removing {}", marker.display()))?;
        self.write_boot_id()?;
        let run = self.root().join("run");
        for entry in
            std::fs::read_dir(&run).with_context(|| format!("listing {}", run.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            }
            .with_context(|| format!("removing {}", path.display()))?;
        }
        Ok(())
    }
}

/// How to run the agents of a [`Fleet`].
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// The `rota` binary.
    pub binary: PathBuf,
    /// Flags for every agent, after the ones the fleet sets (`--store`, `--node`, …).
    pub args: Vec<String>,
    /// A shell command every reboot command runs first (`ROTA_NODE` is set), such as a test's
    /// log of reboots; its failure does not stop the reboot.
    pub reboot_hook: Option<String>,
}

/// What starting an agent needs besides its host: the same for every agent of a fleet.
#[derive(Clone, Debug)]
struct Launch {
    binary: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    args: Vec<String>,
    reboot_hook: Option<String>,
}

/// The schedulers every fleet runs, as the chart's two replicas do.
pub const SCHEDULERS: [&str; 2] = ["scheduler-a", "scheduler-b"];
/// Their leader Lease's duration: a failover grants again within it.
pub const SCHEDULER_LEASE: Duration = Duration::from_secs(4);
/// How long an agent has to take a grant up in a test's fleet.
pub const TAKE_UP: Duration = Duration::from_secs(10);

/// Real `rota agent` processes, one per node, the supervisor that reboots their machines, and
/// two `rota scheduler` processes.
pub struct Fleet {
    dir: tempfile::TempDir,
    launch: Launch,
    schedulers: BTreeMap<String, Mutex<Option<Child>>>,
    namespace: String,
    client: Client,
    hosts: BTreeMap<String, Arc<Host>>,
    supervisor: JoinHandle<()>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Fleet {
    /// Prepares one host per node of `nodes` (Kubernetes node names) in `scope`, installs the
    /// RotaNode CRD and starts the supervisor. `extra` gives flags for single nodes' agents.
    /// No agent runs until [`Fleet::start`].
    pub async fn new(
        env: &TestEnv,
        scope: &Scope,
        nodes: &[String],
        options: FleetOptions,
        extra: &BTreeMap<String, Vec<String>>,
    ) -> Result<Fleet> {
        install_crd(scope.client()).await?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("rota-fleet-{}-", scope.id()))
            .tempdir()
            .context("creating the fleet's directory")?;
        let mut hosts = BTreeMap::new();
        for node in nodes {
            let host_dir = dir.path().join(node);
            for sub in ["root/run", "root/var/run"] {
                let path = host_dir.join(sub);
                std::fs::create_dir_all(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
            }
            let host = Host {
                node: node.clone(),
                dir: host_dir,
                extra: extra.get(node).cloned().unwrap_or_default(),
                agent: Mutex::new(None),
                boots: AtomicU32::new(0),
                hold: AtomicBool::new(false),
            };
            host.write_boot_id()?;
            hosts.insert(node.clone(), Arc::new(host));
        }
        let errors = Arc::new(Mutex::new(Vec::new()));
        let launch = Launch {
            binary: options.binary,
            kubeconfig: env.kubeconfig().to_path_buf(),
            namespace: scope.namespace().to_string(),
            args: options.args,
            reboot_hook: options.reboot_hook,
        };
        let supervisor = tokio::spawn(supervise(
            hosts.values().cloned().collect(),
            launch.clone(),
            errors.clone(),
        ));
        let schedulers = SCHEDULERS
            .iter()
            .map(|name| (name.to_string(), Mutex::new(None)))
            .collect();
        let fleet = Fleet {
            dir,
            launch,
            schedulers,
            namespace: scope.namespace().to_string(),
            client: scope.client(),
            hosts,
            supervisor,
            errors,
        };
        for name in SCHEDULERS {
            fleet.start_scheduler(name)?;
        }
        Ok(fleet)
    }

    /// Starts scheduler `name` (one of [`SCHEDULERS`]); its output goes to `<name>.log`.
    pub fn start_scheduler(&self, name: &str) -> Result<()> {
        let slot = self
            .schedulers
            .get(name)
            .with_context(|| format!("{name} is not a scheduler of this fleet"))?;
        let log_path = self.dir.path().join(format!("{name}.log"));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let stderr = log
            .try_clone()
            .with_context(|| format!("opening {}", log_path.display()))?;
        let child = Command::new(&self.launch.binary)
            .process_group(0)
            .arg("scheduler")
            .arg("--kubeconfig")
            .arg(&self.launch.kubeconfig)
            .args(["--namespace", &self.launch.namespace, "--identity", name])
            .arg("--lease-duration")
            .arg(format!("{}s", SCHEDULER_LEASE.as_secs()))
            .arg("--take-up")
            .arg(format!("{}s", TAKE_UP.as_secs()))
            .env("RUST_LOG", "info,rota_scheduler=debug")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} scheduler", self.launch.binary.display()))?;
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut old) = slot.replace(child) {
            let _ = old.kill();
            let _ = old.wait();
        }
        Ok(())
    }

    /// SIGKILLs scheduler `name`, if it runs.
    pub fn kill_scheduler(&self, name: &str) -> Result<()> {
        let slot = self
            .schedulers
            .get(name)
            .with_context(|| format!("{name} is not a scheduler of this fleet"))?;
        if let Some(mut child) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
            child.kill().context("killing a scheduler")?;
            child.wait().context("waiting for a killed scheduler")?;
        }
        Ok(())
    }

    fn host(&self, node: &str) -> Result<&Arc<Host>> {
        self.hosts
            .get(node)
            .with_context(|| format!("{node} is not a node of this fleet"))
    }

    /// The nodes, in name order.
    pub fn nodes(&self) -> Vec<String> {
        self.hosts.keys().cloned().collect()
    }

    /// Starts every node's agent.
    pub fn start_all(&self) -> Result<()> {
        for node in self.hosts.keys() {
            self.start(node)?;
        }
        Ok(())
    }

    /// Starts the node's agent (after killing the one that runs, if any).
    pub fn start(&self, node: &str) -> Result<()> {
        self.start_with_env(node, &[]).map(|_| ())
    }

    /// [`Fleet::start`] with `env` added to this one agent's environment (such as a crash
    /// point, `ROTA_CRASH_AT`); the agents the supervisor starts after a reboot get none.
    /// Returns whether an agent was running (and was killed).
    pub fn start_with_env(&self, node: &str, env: &[(&str, &str)]) -> Result<bool> {
        let host = self.host(node)?;
        let mut slot = host.agent();
        let running = match slot.as_mut() {
            Some(child) => child.try_wait()?.is_none(),
            None => false,
        };
        host.kill_in(&mut slot)?;
        spawn_agent(host, &mut slot, &self.launch, env)?;
        Ok(running)
    }

    /// SIGKILLs the node's agent, as a crash would, and leaves it stopped.
    pub fn kill(&self, node: &str) -> Result<()> {
        self.host(node)?.kill()
    }

    /// Kills the node's agent with SIGKILL and starts it again on the same boot.
    pub fn crash_and_restart(&self, node: &str) -> Result<()> {
        self.start(node)
    }

    /// How the node's agent ended, if it has exited by itself (not killed by the fleet);
    /// `None` while it runs or when none was started.
    pub fn exit_status(&self, node: &str) -> Result<Option<ExitStatus>> {
        let host = self.host(node)?;
        let mut agent = host.agent();
        Ok(match agent.as_mut() {
            Some(child) => child.try_wait()?,
            None => None,
        })
    }

    /// Whether the node's agent process is running (it has not exited).
    pub fn is_running(&self, node: &str) -> Result<bool> {
        let host = self.host(node)?;
        let mut agent = host.agent();
        Ok(match agent.as_mut() {
            Some(child) => child.try_wait()?.is_none(),
            None => false,
        })
    }

    /// Touches the node's reboot sentinel (`$ROOT/run/reboot-needed`).
    pub fn request_reboot(&self, node: &str) -> Result<()> {
        let host = self.host(node)?;
        let path = host.root().join(REBOOT_SENTINEL.trim_start_matches('/'));
        std::fs::write(&path, b"").with_context(|| format!("touching {}", path.display()))
    }

    /// While held, a reboot the node's agent asks for does not happen (the machine hangs on
    /// its way down); releasing lets the supervisor carry out a pending one.
    pub fn hold_reboots(&self, node: &str, hold: bool) -> Result<()> {
        self.host(node)?.hold.store(hold, Ordering::SeqCst);
        Ok(())
    }

    /// How many times the node's agent has run the reboot command.
    pub fn reboot_commands(&self, node: &str) -> Result<usize> {
        let path = self.host(node)?.reboots_log();
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(text.lines().count()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// How many boots the node has had (1 before any reboot).
    pub fn boots(&self, node: &str) -> Result<u32> {
        Ok(self.host(node)?.boots.load(Ordering::SeqCst))
    }

    /// The last `lines` lines of every agent's log, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for host in self.hosts.values() {
            let text = std::fs::read_to_string(host.agent_log()).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("==== agent of {} ====\n", host.node));
            for line in &all[all.len().saturating_sub(lines)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        for name in SCHEDULERS {
            let path = self.dir.path().join(format!("{name}.log"));
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("==== {name} ====\n"));
            for line in &all[all.len().saturating_sub(lines)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Errors of the supervisor (a reboot it could not carry out); empty when all went well.
    pub fn supervisor_errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A store client on the fleet's namespace, as the agents use it.
    pub async fn store(&self) -> Result<KubeStore> {
        KubeStore::connect(
            self.client.clone(),
            KubeStoreConfig {
                namespace: self.namespace.clone(),
                ..KubeStoreConfig::default()
            },
        )
        .await
        .context("connecting to the Kubernetes store")
    }

    /// The node's name as the store knows it.
    pub fn node_name(node: &str) -> Result<NodeName> {
        NodeName::new(node).with_context(|| format!("{node} is not a valid node name"))
    }

    /// Stops every agent and the supervisor, and deletes the fleet's RotaNodes.
    pub async fn shutdown(self) -> Result<()> {
        self.supervisor.abort();
        for host in self.hosts.values() {
            host.kill()?;
        }
        for name in SCHEDULERS {
            self.kill_scheduler(name)?;
        }
        let rota_nodes: Api<RotaNode> = Api::all(self.client.clone());
        let selector = format!("{NAMESPACE_LABEL}={}", self.namespace);
        for object in rota_nodes
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .context("listing the fleet's RotaNodes")?
        {
            rota_nodes
                .delete(&object.name_any(), &DeleteParams::default())
                .await
                .context("deleting a RotaNode")?;
        }
        Ok(())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.supervisor.abort();
        for slot in self.schedulers.values() {
            if let Some(mut child) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for host in self.hosts.values() {
            if let Some(mut child) = host.agent().take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Starts the host's agent into `slot` (the host's, under its lock), with `env` added to its
/// environment; its stdout and stderr are appended to the host's `agent.log`.
fn spawn_agent(
    host: &Host,
    slot: &mut Option<Child>,
    launch: &Launch,
    env: &[(&str, &str)],
) -> Result<()> {
    let Launch {
        binary,
        kubeconfig,
        namespace,
        args,
        reboot_hook,
    } = launch;
    let mut reboot = format!(
        "echo reboot >> '{}' && touch '{}'",
        host.reboots_log().display(),
        host.reboot_marker().display()
    );
    if let Some(hook) = reboot_hook {
        reboot = format!("{{ {hook}; }} || true; {reboot}");
    }
    let log_path = host.agent_log();
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let stderr = log
        .try_clone()
        .with_context(|| format!("opening {}", log_path.display()))?;
    let child = Command::new(binary)
        // A process group of its own, for Host::kill_in.
        .process_group(0)
        .arg("agent")
        .args(["--store", "kube", "--node-actions", "kube"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", namespace, "--node", &host.node])
        .arg("--host-root")
        .arg(host.root())
        .arg("--boot-id-file")
        .arg(host.boot_id_file())
        .args(["--reboot-sentinel", REBOOT_SENTINEL])
        .args(["--reboot-command", &reboot])
        // A test's fleet starts at once, not spread over --start-jitter's default.
        .args(["--start-jitter", "0s"])
        .args(args)
        .args(&host.extra)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {} agent", binary.display()))?;
    *slot = Some(child);
    Ok(())
}

/// Carries out the reboots the agents ask for, until aborted.
async fn supervise(hosts: Vec<Arc<Host>>, launch: Launch, errors: Arc<Mutex<Vec<String>>>) {
    loop {
        for host in &hosts {
            if host.hold.load(Ordering::SeqCst) || !host.reboot_marker().exists() {
                continue;
            }
            // The whole reboot under the host's lock: no agent may start on the old boot.
            let mut slot = host.agent();
            let rebooted = host
                .reboot_in(&mut slot)
                .and_then(|()| spawn_agent(host, &mut slot, &launch, &[]));
            drop(slot);
            if let Err(e) = rebooted {
                errors
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("rebooting {}: {e:#}", host.node));
            }
        }
        tokio::time::sleep(SUPERVISOR_PERIOD).await;
    }
}

/// What a [`DisruptionWatch`] saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disruptions {
    /// The largest number of watched nodes unschedulable at once.
    pub max: usize,
    /// Each set of unschedulable nodes that was larger than the limit.
    pub over_limit: Vec<BTreeSet<String>>,
    /// Every node that was unschedulable at some point.
    pub ever: BTreeSet<String>,
    /// How many Node versions the watch delivered.
    pub events: usize,
}

/// Follows the scope's Nodes through a watch: after every version of a Node the API server
/// reports, counts the nodes that are unschedulable (except `ignore`, such as pre-cordoned ones).
pub struct DisruptionWatch {
    seen: Arc<Mutex<Disruptions>>,
    task: JoinHandle<Result<()>>,
}

impl DisruptionWatch {
    /// Starts watching the nodes labelled with `scope`'s label.
    pub fn start(scope: &Scope, limit: usize, ignore: BTreeSet<String>) -> DisruptionWatch {
        let seen = Arc::new(Mutex::new(Disruptions::default()));
        let nodes: Api<Node> = Api::all(scope.client());
        let selector = format!("{}={}", crate::testenv::SCOPE_LABEL, scope.id());
        let config = watcher::Config::default().labels(&selector);
        let state = seen.clone();
        let task = tokio::spawn(async move {
            let mut unschedulable: BTreeMap<String, bool> = BTreeMap::new();
            let mut stream = watcher(nodes, config).boxed();
            while let Some(event) = stream.try_next().await.context("watching the Nodes")? {
                match event {
                    watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                        let cordoned = node
                            .spec
                            .as_ref()
                            .and_then(|s| s.unschedulable)
                            .unwrap_or(false);
                        unschedulable.insert(node.name_any(), cordoned);
                    }
                    watcher::Event::Delete(node) => {
                        unschedulable.remove(&node.name_any());
                    }
                    watcher::Event::Init | watcher::Event::InitDone => continue,
                }
                let now: BTreeSet<String> = unschedulable
                    .iter()
                    .filter(|(name, cordoned)| **cordoned && !ignore.contains(*name))
                    .map(|(name, _)| name.clone())
                    .collect();
                let mut seen = state.lock().unwrap_or_else(|e| e.into_inner());
                seen.events += 1;
                seen.max = seen.max.max(now.len());
                seen.ever.extend(now.iter().cloned());
                if now.len() > limit {
                    seen.over_limit.push(now);
                }
            }
            bail!("the Node watch ended")
        });
        DisruptionWatch { seen, task }
    }

    /// What the watch has seen so far; an error if the watch failed.
    pub fn seen(&self) -> Result<Disruptions> {
        if self.task.is_finished() {
            bail!("the Node watch stopped early");
        }
        Ok(self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

impl Drop for DisruptionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

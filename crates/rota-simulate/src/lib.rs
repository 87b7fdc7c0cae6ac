//! `rota simulate`: N real agents in one process against a real store, each with its own host
//! root so that the real sentinel watcher sees its sentinel appear. Only node actions are
//! simulated: a reboot stops the node's agent and starts it again the maintenance time after
//! the reboot command, with a new boot id and an empty `/run` (a tmpfs does not survive a
//! reboot).
//!
//! Only the setup depends on the store ([`StoreChoice`]): a SQL store with nothing else, or a
//! Kubernetes cluster with kwok nodes, pods and real cordon/drain/uncordon (see `cluster`).
//! The harness and the metrics are the same for every store.
//!
//! With a handle per agent (`handles`), what the stores themselves counted is read around each
//! phase of the run (`counters`): etcd's metrics with `--etcd-metrics` (`etcd`), PostgreSQL's
//! statistics on PostgreSQL (`postgres_counters`).

mod actions;
mod cluster;
mod counters;
mod error_chain;
mod etcd;
mod handles;
pub mod metrics;
mod plan_check;
mod postgres_counters;
mod summary;
mod zones;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rota_actions::NodeActions;
use rota_agent::{Agent, AgentConfig, WindowMarker};
use rota_core::NodeName;
use rota_scheduler::SchedulerConfig;
use rota_store::{Millis, SqliteStore, Store, StoreExt, StoreUrl, now_millis};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::actions::SimulatedActions;
use crate::cluster::Cluster;
use crate::counters::StoreCounters;
pub use crate::error_chain::error_chain;
use crate::etcd::Etcd;
pub use crate::etcd::{EtcdPhase, EtcdSummary};
use crate::handles::{Handles, Opener};
pub use crate::handles::{PhaseTraffic, TrafficSummary};
pub use crate::plan_check::PlanCheck;
use crate::postgres_counters::{PgObserver, agents_url};
pub use crate::postgres_counters::{PostgresPhase, PostgresSummary};
use crate::summary::{Ended, outcome, summarize};
pub use crate::zones::{ZONE_LABEL, Zones, ideal_rounds};

/// Where simulated host roots go when it exists: like a real host's /run, a tmpfs.
const TMPFS: &str = "/dev/shm";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid simulation: {0}")]
    Invalid(String),
    #[error("preparing node {node}'s host root {path}: {source}")]
    HostRoot {
        node: usize,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("creating the temporary directory: {0}")]
    TempDir(#[source] std::io::Error),
    #[error("store: {0}")]
    Store(#[from] rota_store::Error),
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("preparing the cluster: {0}")]
    Cluster(String),
    #[error("--etcd-metrics {url}: {reason}")]
    EtcdMetrics { url: String, reason: String },
    #[error("PostgreSQL's statistics: {0}")]
    PgStatistics(String),
    #[error("agent of node {node} stopped: {source}")]
    Agent {
        node: String,
        #[source]
        source: rota_agent::Error,
    },
    #[error(
        "interrupted: the agents were stopped, and the run's store, host roots and (with \
         --store kube) Nodes, RotaNodes and namespace deleted"
    )]
    Interrupted,
    #[error("the rollout did not finish within {limit_s}s ({completed} of {nodes} nodes finished)")]
    TimedOut {
        limit_s: u64,
        completed: usize,
        nodes: usize,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    pub concurrency: u32,
    /// How long a simulated reboot keeps a node down.
    pub maintenance_time: Duration,
    pub store: StoreChoice,
    /// The agents' `--session-ttl`; the agent's default when `None`.
    pub session_ttl: Option<Duration>,
    /// Every agent opens a store handle of its own at each start, as on a real fleet, instead
    /// of sharing one (see `handles`); on Kubernetes, their requests are counted, and on
    /// PostgreSQL the server's own counts of their connections and statements are read.
    pub handle_per_agent: bool,
    /// How long every agent stays idle, once all have started, before the sentinels are
    /// written: a phase whose traffic is reported on its own.
    pub idle: Duration,
    /// etcd's metrics URL (`--etcd-metrics`, with a handle per agent on Kubernetes): what etcd
    /// wrote in each phase is reported.
    pub etcd_metrics: Option<String>,
    /// Makes `rota plan`'s forecast once every node asked for its turn, and reports how the
    /// rollout kept to it (see `plan_check`).
    pub plan: bool,
    /// The rollout's batches every agent configures (`--batches`); `None`: the whole
    /// concurrency at once.
    pub batches: Option<rota_core::Batches>,
    /// The nodes spread over zones, each zone a slot group (`--zones`).
    pub zones: Option<Zones>,
}

/// The store to run against.
#[derive(Clone, Debug)]
pub enum StoreChoice {
    /// SQLite in a temporary directory.
    Temporary,
    /// A SQL store (SQLite or PostgreSQL).
    Url(StoreUrl),
    /// A Kubernetes cluster whose nodes kwok simulates.
    Kube(KubeTarget),
}

/// Where `rota simulate --store kube` runs.
#[derive(Clone)]
pub struct KubeTarget {
    /// A client with kube's own retries off (`rota_kube_client::client`): the drain must see a
    /// PodDisruptionBudget's 429.
    pub client: kube::Client,
    /// The namespace to create for the run (it must not exist); `rota-simulate-<random>` when
    /// `None`. It is deleted at the end, with the run's Nodes and RotaNodes.
    pub namespace: Option<String>,
}

impl std::fmt::Debug for KubeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeTarget")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What the harness needs from a store's setup.
struct Fleet {
    store: Arc<dyn Store>,
    /// `store` of the summary.
    label: &'static str,
    names: Vec<NodeName>,
    /// Each node's real cordon, drain, uncordon and health, if it has any.
    actions: Vec<Option<Arc<dyn NodeActions>>>,
    /// The agents' re-read of the store.
    store_poll: Duration,
    /// The same with `--handle-per-agent`, where one agent's writes reach the others only as
    /// they would on a real fleet.
    own_handle_store_poll: Duration,
    /// The agents' look for new procedures, unless the agent's default.
    procedure_poll: Option<Duration>,
    /// How often the harness reads the store to see whether the rollout is over.
    check_every: Duration,
    /// How each agent opens a handle of its own, with `--handle-per-agent`.
    opener: Opener,
}

impl Fleet {
    /// A fleet without node actions on a SQL store of kind `label`: nodes `sim-0..n`.
    fn sql(
        store: Arc<dyn Store>,
        label: &'static str,
        opener: Opener,
        nodes: usize,
    ) -> Result<Fleet> {
        let width = nodes.to_string().len();
        let names = (0..nodes)
            .map(|i| {
                NodeName::new(format!("sim-{i:0width$}"))
                    .map_err(|e| Error::Invalid(format!("node name: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Fleet {
            label,
            store,
            names,
            actions: vec![None; nodes],
            // Every agent shares this process's store handle, whose change notifications
            // reach all of them: the slow re-read is only a safety net here.
            store_poll: Duration::from_secs(10),
            own_handle_store_poll: rota_agent::STORE_POLL,
            procedure_poll: None,
            check_every: Duration::from_millis(100),
            opener,
        })
    }
}

/// The JSON summary of `rota simulate --json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub store: &'static str,
    pub nodes: usize,
    pub concurrency: u32,
    pub completed: usize,
    pub failed: usize,
    /// Reboot commands the simulated nodes received: one per node in a clean rollout, more when
    /// a node rebooted twice.
    pub reboots: u32,
    /// Most nodes in a maintenance window at once, from the store's history.
    pub max_concurrent: usize,
    pub makespan_s: f64,
    /// ceil(nodes / concurrency) × maintenance time: the best any coordinator could do.
    pub ideal_s: f64,
    pub efficiency: f64,
    /// Sentinel written → request recorded (the node queued).
    pub detection_p50_ms: Millis,
    pub detection_p99_ms: Millis,
    /// Slot released → the next node's window opened.
    pub handoff_p50_ms: Millis,
    pub handoff_p99_ms: Millis,
    /// Sentinels written → the first window opened: what the start of a rollout costs once.
    pub first_window_ms: Millis,
    /// Window opened → its slot released, the maintenance time included: what each window
    /// adds to the maintenance (cordon, drain, the agent's restart, health check, uncordon).
    pub window_p50_ms: Millis,
    pub window_p99_ms: Millis,
    /// What the agents' own Kubernetes handles sent (`--handle-per-agent --store kube`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic: Option<TrafficSummary>,
    /// What etcd wrote, from its own counters (`--etcd-metrics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdSummary>,
    /// What PostgreSQL counted for the agents' own handles (`--handle-per-agent` on PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresSummary>,
    /// How the rollout kept to `rota plan`'s forecast (`--plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanCheck>,
    /// How the zones went (`--zones`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones: Option<ZonesSummary>,
}

/// The zones of a run, from the store's history.
#[derive(Clone, Debug, Serialize)]
pub struct ZonesSummary {
    pub count: u32,
    /// The groups' rules, as stored (`*=2`, `in-turn`).
    pub rules: String,
    /// Each zone's most windows open at once.
    pub max_concurrent: BTreeMap<String, usize>,
    /// The most zones with a window open at once.
    pub max_zones_at_once: usize,
}

struct Node {
    name: NodeName,
    /// Its zone, with `--zones`.
    zone: Option<String>,
    root: PathBuf,
    boots: u32,
    agent: Option<(CancellationToken, JoinHandle<rota_agent::Result<()>>)>,
}

fn node_config(node: &Node, options: &Options, fleet: &Fleet) -> AgentConfig {
    let mut config = AgentConfig::new(node.name.clone());
    config.host_root = node.root.clone();
    config.boot_id_file = node.root.join("boot_id");
    config.concurrency = Some(options.concurrency);
    config.batches.clone_from(&options.batches);
    if let (Some(zones), Some(zone)) = (&options.zones, &node.zone) {
        config.group_by = Some(ZONE_LABEL.to_owned());
        config
            .node_labels
            .insert(ZONE_LABEL.to_owned(), zone.clone());
        config.group_rules = Some(zones.rules.clone());
    }
    config.reboot_timeout = options.maintenance_time * 10 + Duration::from_secs(60);
    config.store_poll = if options.handle_per_agent {
        fleet.own_handle_store_poll
    } else {
        fleet.store_poll
    };
    if let Some(ttl) = options.session_ttl {
        config.session_ttl = ttl;
    }
    if let Some(poll) = fleet.procedure_poll {
        config.procedure_poll = poll;
    }
    // As `rota agent` on SQLite and PostgreSQL: an idle node renews its session seldom. Only
    // with handles of their own, whose idle traffic is counted; the shared handle's runs stay
    // as they were measured.
    if options.handle_per_agent && matches!(fleet.opener, Opener::Sqlite(_) | Opener::Url(_)) {
        config.idle_session_ttl = Some(rota_agent::IDLE_SESSION_TTL);
    }
    config
}

/// The error of an agent that stopped with one (only a reboot stops an agent on purpose, and
/// takes it out of its node first).
async fn stopped_agent(nodes: &mut [Node]) -> Option<Error> {
    for node in nodes {
        if node
            .agent
            .as_ref()
            .is_some_and(|(_, agent)| agent.is_finished())
            && let Some((_, agent)) = node.agent.take()
            && let Ok(Err(source)) = agent.await
        {
            return Some(Error::Agent {
                node: node.name.to_string(),
                source,
            });
        }
    }
    None
}

fn prepare_root(index: usize, root: &Path) -> Result<()> {
    let io = |source| Error::HostRoot {
        node: index,
        path: root.to_path_buf(),
        source,
    };
    for dir in ["run", "var/run"] {
        std::fs::create_dir_all(root.join(dir)).map_err(io)?;
    }
    write_boot_id(root, 0).map_err(io)
}

fn write_boot_id(root: &Path, boot: u32) -> std::io::Result<()> {
    std::fs::write(root.join("boot_id"), format!("sim-boot-{boot}\n"))
}

/// Empties `/run` like a reboot empties a tmpfs.
fn clear_run(root: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join("run"))? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Runs the simulation of `options`; `progress(completed, total)` is called as nodes finish.
/// `interrupt` stops it early with [`Error::Interrupted`], after stopping the agents and
/// deleting what the run created, as its normal end does.
pub async fn run(
    options: Options,
    interrupt: &CancellationToken,
    progress: impl Fn(usize, usize),
) -> Result<Summary> {
    if options.nodes == 0 {
        return Err(Error::Invalid("--nodes must be at least 1".into()));
    }
    if options.concurrency == 0 {
        return Err(Error::Invalid("--concurrency must be at least 1".into()));
    }
    if let Some(zones) = &options.zones {
        if zones.count as usize > options.nodes {
            return Err(Error::Invalid(format!(
                "--zones {}: more zones than the {} nodes; at most one zone per node",
                zones.count, options.nodes
            )));
        }
        zones
            .rules
            .check(options.concurrency)
            .map_err(|e| Error::Invalid(format!("--group-limit {e}")))?;
        if ideal_rounds(options.nodes, options.concurrency, Some(zones)) == usize::MAX {
            return Err(Error::Invalid(format!(
                "--group-limit with a limit of 0 holds a zone back for ever ({}); a zone's limit \
                 in a simulation is at least 1",
                zones.rules
            )));
        }
    }
    if let Some(url) = &options.etcd_metrics {
        if !matches!(options.store, StoreChoice::Kube(_)) {
            return Err(Error::Invalid(format!(
                "--etcd-metrics {url} needs --store kube: only a Kubernetes store writes to etcd"
            )));
        }
        if !options.handle_per_agent {
            return Err(Error::Invalid(format!(
                "--etcd-metrics {url} needs --handle-per-agent: the stores' own counters are \
                 reported for agents with handles of their own, as on a real fleet"
            )));
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("rota-simulate-")
        .tempdir()
        .map_err(Error::TempDir)?;
    match &options.store {
        StoreChoice::Temporary => {
            let path = dir.path().join("rota.db");
            let store = Arc::new(SqliteStore::open(&path).await?);
            simulate(
                Fleet::sql(store, "sqlite", Opener::Sqlite(path), options.nodes)?,
                StoreCounters::new(None, None),
                &options,
                dir.path(),
                interrupt,
                progress,
            )
            .await
        }
        StoreChoice::Url(url) => {
            let (opener, observer) = match url {
                StoreUrl::Postgres(location) if options.handle_per_agent => (
                    Opener::Url(agents_url(location).parse()?),
                    Some(PgObserver::connect(location).await?),
                ),
                _ => (Opener::Url(url.clone()), None),
            };
            let store = url.open_shared().await?;
            let fleet = Fleet::sql(store, url.kind(), opener, options.nodes)?;
            let counters = StoreCounters::new(None, observer);
            simulate(fleet, counters, &options, dir.path(), interrupt, progress).await
        }
        StoreChoice::Kube(target) => {
            // A wrong URL is refused before the cluster is touched.
            let etcd = match &options.etcd_metrics {
                Some(url) => Some(Etcd::connect(url).await?),
                None => None,
            };
            let mut cluster = Cluster::new(target.client.clone(), target.namespace.clone());
            // Creating a large fleet takes a while: an interrupted one is deleted as far as
            // it got.
            let prepared = tokio::select! {
                prepared = cluster.prepare(options.nodes, options.zones.as_ref()) => prepared,
                () = interrupt.cancelled() => Err(Error::Interrupted),
            };
            let result = match prepared {
                Ok(fleet) => {
                    // The scheduler runs in this process, as the chart's Deployment would.
                    let stop = CancellationToken::new();
                    let config = SchedulerConfig {
                        // The stores' own (cluster.rs): the Procedures' status of this run.
                        name_prefix: format!("{}-", cluster.namespace()),
                        ..SchedulerConfig::new(cluster.namespace(), "rota-simulate")
                    };
                    let scheduler = tokio::spawn(rota_scheduler::run(
                        target.client.clone(),
                        config,
                        stop.clone(),
                    ));
                    let counters = StoreCounters::new(etcd, None);
                    let result =
                        simulate(fleet, counters, &options, dir.path(), interrupt, progress).await;
                    stop.cancel();
                    if let Err(e) = scheduler.await {
                        warn!(error = %e, "the scheduler ended abnormally");
                    }
                    result
                }
                Err(e) => Err(e),
            };
            cluster.delete().await;
            result
        }
    }
}

/// The harness: starts one agent per node of `fleet`, writes every node's sentinel, plays the
/// reboots and waits until every node is done; `scratch` holds the host roots when there is no
/// tmpfs. Every agent is stopped when it returns, whatever the outcome.
async fn simulate(
    fleet: Fleet,
    mut counters: StoreCounters,
    options: &Options,
    scratch: &Path,
    interrupt: &CancellationToken,
    progress: impl Fn(usize, usize),
) -> Result<Summary> {
    // On a real host /run is a tmpfs; so are the simulated hosts' roots where one exists.
    let hosts = tempfile::Builder::new()
        .prefix("rota-simulate-hosts-")
        .tempdir_in(if Path::new(TMPFS).is_dir() {
            Path::new(TMPFS)
        } else {
            scratch
        })
        .map_err(Error::TempDir)?;
    let store = fleet.store.clone();
    store.set_concurrency(options.concurrency).await?;
    if let Some(zones) = &options.zones {
        store
            .set(rota_store::Setting::Groups(zones.rules.clone()))
            .await?;
    }
    let handles = options
        .handle_per_agent
        .then(|| Arc::new(Handles::new(fleet.opener.clone())));

    let mut nodes = Vec::with_capacity(options.nodes);
    for (i, name) in fleet.names.iter().enumerate() {
        let name = name.clone();
        let root = hosts.path().join(name.as_str());
        prepare_root(i, &root)?;
        nodes.push(Node {
            name,
            zone: options.zones.as_ref().map(|zones| zones.of(i)),
            root,
            boots: 0,
            agent: None,
        });
    }

    let (back_up_tx, mut back_up) = mpsc::unbounded_channel();
    let mut power_cycles: Vec<JoinHandle<Result<()>>> = Vec::new();
    let (reboots_tx, mut reboots) = mpsc::unbounded_channel();
    let start_agent = |node: &mut Node, index: usize| {
        let cancel = CancellationToken::new();
        let config = node_config(node, options, &fleet);
        let actions = Arc::new(SimulatedActions {
            node: index,
            reboots: reboots_tx.clone(),
            real: fleet.actions.get(index).cloned().flatten(),
        });
        // As `rota agent` does, an agent back in its window skips the store's start-up check.
        let returning = WindowMarker::new(&config.host_path(&config.state_dir)).present();
        let (shared, handles, token) = (store.clone(), handles.clone(), cancel.clone());
        let agent = async move {
            let store = match handles {
                Some(handles) => handles.open(index, returning).await?,
                None => shared,
            };
            Agent::new(config, store, actions, token).run().await
        };
        node.agent = Some((cancel, tokio::spawn(agent)));
    };
    let rounds = ideal_rounds(options.nodes, options.concurrency, options.zones.as_ref());
    let ideal = options.maintenance_time * u32::try_from(rounds).unwrap_or(u32::MAX);
    let harness_reads = Arc::new(AtomicU64::new(0));
    let rollout = async {
    counters.before_agents(options.idle, interrupt).await?;
    for (i, node) in nodes.iter_mut().enumerate() {
        start_agent(node, i);
    }
    // Every agent has its watcher armed once its session is open.
    while store.nodes().await?.len() < options.nodes {
        if let Some(stopped) = stopped_agent(&mut nodes).await {
            return Err(stopped);
        }
        tokio::select! {
            () = interrupt.cancelled() => return Err(Error::Interrupted),
            () = tokio::time::sleep(fleet.check_every / 10) => {}
        }
    }
    counters.after_start(interrupt).await?;
    let idle = match &handles {
        Some(handles) if !options.idle.is_zero() => {
            // The idle phase counts what idle agents send, not their start: it begins once
            // every agent's watches have listed (or after a minute).
            let settling = tokio::time::Instant::now() + Duration::from_secs(60);
            while !handles.settled() && tokio::time::Instant::now() < settling {
                tokio::select! {
                    () = interrupt.cancelled() => return Err(Error::Interrupted),
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            info!(nodes = options.nodes, idle = ?options.idle, "all agents started; idle");
            let before = handles.sent();
            let marks = counters.mark().await?;
            tokio::select! {
                () = interrupt.cancelled() => return Err(Error::Interrupted),
                () = tokio::time::sleep(options.idle) => {}
            }
            counters.end_idle(&marks, options.nodes).await?;
            let phase = before.zip(handles.sent()).map(|(before, after)| {
                PhaseTraffic::between(&before, &after, options.idle, options.nodes)
            });
            phase.map(|phase| (phase, handles.watches() as f64 / options.nodes as f64))
        }
        _ => None,
    };
    info!(
        nodes = options.nodes,
        "all agents started; writing sentinels"
    );

    let sent_before = handles.as_ref().and_then(|h| h.sent());
    let marks = counters.mark().await?;
    let started = now_millis();
    // Written from a blocking thread: file writes must not stall the runtime's workers, which
    // are busy running the agents that react to these very files.
    let sentinels: Vec<(NodeName, PathBuf)> = nodes
        .iter()
        .map(|n| (n.name.clone(), n.root.join("run/reboot-needed")))
        .collect();
    let written = tokio::task::spawn_blocking(move || {
        let mut written = BTreeMap::new();
        for (index, (name, sentinel)) in sentinels.into_iter().enumerate() {
            written.insert(name, now_millis());
            std::fs::write(&sentinel, b"").map_err(|source| Error::HostRoot {
                node: index,
                path: sentinel,
                source,
            })?;
        }
        Ok::<_, Error>(written)
    })
    .await
    .map_err(|e| Error::Invalid(format!("writing the sentinels: {e}")))??;

    let limit = ideal * 3 + Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + limit;
    // The store is read for the outcome in a task of its own: while this loop waited for it,
    // reboots and restarts would wait too, and lengthen every window.
    let (outcomes_tx, mut outcomes) = mpsc::channel(1);
    let forecast = Arc::new(std::sync::Mutex::new(None));
    let checker = {
        let (store, reads) = (store.clone(), harness_reads.clone());
        let every = fleet.check_every;
        let (wanted, forecast) = (options.plan, forecast.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if wanted && forecast.lock().is_ok_and(|f| f.is_none()) {
                    match plan_check::when_all_asked(&*store, started).await {
                        Ok(made) => *forecast.lock().unwrap_or_else(|e| e.into_inner()) = made,
                        Err(e) => warn!(error = %e, "could not make the forecast; trying again"),
                    }
                }
                let outcome = outcome(&*store, started, &reads).await;
                if outcomes_tx.send(outcome).await.is_err() {
                    return;
                }
            }
        })
    };
    let finished = 'rollout: loop {
        tokio::select! {
            () = interrupt.cancelled() => break 'rollout Err(Error::Interrupted),
            Some((index, commanded)) = reboots.recv() => {
                    let node = &mut nodes[index];
                    let Some((cancel, agent)) = node.agent.take() else { continue };
                    node.boots += 1;
                    let root = node.root.clone();
                    let boot = node.boots;
                    let name = node.name.to_string();
                    let back_up = back_up_tx.clone();
                    let down_for = options.maintenance_time;
                    let crashed = async move {
                        // The node is down for the maintenance time from the reboot command
                        // on: its agent stops while it goes down, as systemd stops services.
                        cancel.cancel();
                        let up = tokio::time::sleep_until(commanded + down_for);
                        let (stopped, ()) = tokio::join!(agent, up);
                        if let Ok(Err(source)) = stopped {
                            return Err(Error::Agent { node: name, source });
                        }
                        let io = |source| Error::HostRoot { node: index, path: root.clone(), source };
                        clear_run(&root).map_err(io)?;
                        write_boot_id(&root, boot).map_err(io)?;
                        back_up.send(index).ok();
                        Ok(())
                    };
                    power_cycles.push(tokio::spawn(crashed));
            }
            Some(index) = back_up.recv() => start_agent(&mut nodes[index], index),
            Some(checked) = outcomes.recv() => {
                let (completed, failed) = match checked {
                    Ok(outcome) => outcome,
                    // A database restart fails a read or two; the agents retry theirs, and so
                    // does this count, until the deadline.
                    Err(Error::Store(e))
                        if e.is_unavailable() && tokio::time::Instant::now() <= deadline =>
                    {
                        warn!(error = %e, "the store is unavailable; counting again");
                        continue;
                    }
                    Err(e) => break Err(e),
                };
                progress(completed, options.nodes);
                if completed + failed >= options.nodes {
                    break Ok((completed, failed));
                }
                if tokio::time::Instant::now() > deadline {
                    break Err(Error::TimedOut { limit_s: limit.as_secs(), completed, nodes: options.nodes });
                }
                for cycle in std::mem::take(&mut power_cycles) {
                    if !cycle.is_finished() {
                        power_cycles.push(cycle);
                    } else if let Ok(Err(e)) = cycle.await {
                        break 'rollout Err(e);
                    }
                }
                if let Some(stopped) = stopped_agent(&mut nodes).await {
                    break 'rollout Err(stopped);
                }
            }
        }
    };
    checker.abort();
    let (completed, failed) = finished?;
    let took = Duration::from_millis(u64::try_from(now_millis() - started).unwrap_or(0));
    let traffic = sent_before
        .zip(handles.as_ref().and_then(|h| h.sent()))
        .map(|(before, after)| TrafficSummary {
            idle_watches_per_agent: idle.as_ref().map(|(_, watches)| *watches),
            idle: idle.map(|(phase, _)| phase),
            rollout: PhaseTraffic::between(&before, &after, took, options.nodes),
        });
    let reads = harness_reads.load(Ordering::Relaxed);
    let counted = counters.end_rollout(&marks, reads, options.nodes, interrupt).await?;
    let forecast = forecast.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok::<_, Error>((started, written, completed, failed, deadline, traffic, counted, forecast))
    }
    .await;
    for node in &mut nodes {
        if let Some((cancel, agent)) = node.agent.take() {
            cancel.cancel();
            let _ = agent.await;
        }
    }
    // After a complete rollout every power cycle is over; after an interruption or an error, a
    // node still "down" for its maintenance time is not waited for.
    for cycle in power_cycles {
        cycle.abort();
        let _ = cycle.await;
    }
    let (started, written, completed, failed, deadline, traffic, counted, forecast) = rollout?;
    let ended = Ended {
        completed,
        failed,
        reboots: nodes.iter().map(|n| n.boots).sum(),
        traffic,
        counted,
        forecast,
    };
    // The rollout is over, but the store may be out of reach just now: its result is read
    // again, until the rollout's deadline, rather than lost.
    loop {
        match summarize(&fleet, options, started, &written, &ended, ideal).await {
            Err(Error::Store(e))
                if e.is_unavailable() && tokio::time::Instant::now() <= deadline =>
            {
                warn!(error = %e, "the store is unavailable; reading the summary again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            summary => return summary,
        }
    }
}

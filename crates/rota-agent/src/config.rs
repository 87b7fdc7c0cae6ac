use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::sentinel_command::{SentinelCommand, VERDICT_FILE};

use rota_core::{BackoffPolicy, Batches, FailureBudget, GroupRules, MaintenanceHours, NodeName};

/// The reboot sentinels watched by default (kured's and the reboot coordinator's).
pub const DEFAULT_REBOOT_SENTINELS: [&str; 2] = ["/run/reboot-needed", "/var/run/reboot-required"];
/// kustodian's protocol: a host script asks for maintenance with this file...
pub const MAINTENANCE_REQUIRED: &str = "/var/maintenance-required";
/// ...and rota answers with this one once the node is drained.
pub const MAINTENANCE_IN_PROGRESS: &str = "/var/maintenance-in-progress";
pub const DEFAULT_BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";
/// Where the agent keeps its procedure runs (host path).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/rota";
/// Where the seed's `<priority>.maintenance` markers live (host path).
pub const MARKER_DIR: &str = "/var";

// The defaults of the agent's timings, which the command line shows and uses too.
/// A drain that takes longer fails.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
/// The same boot id this long after the reboot started means the reboot failed.
pub const REBOOT_TIMEOUT: Duration = Duration::from_secs(900);
/// How long the health check may keep failing before the node fails.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(600);
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(5);
pub const RELEASE_DELAY: Duration = Duration::ZERO;
/// How long a cordoned node waits before its pods are evicted (kured's `--drain-delay`).
pub const DRAIN_DELAY: Duration = Duration::ZERO;
/// How long a drained node waits, once its procedures are done, before its reboot starts
/// (kured's `--reboot-delay`).
pub const REBOOT_DELAY: Duration = Duration::ZERO;
pub const SESSION_TTL: Duration = Duration::from_secs(30);
/// The slow re-check of the sentinels in case an inotify event was missed.
pub const SAFETY_RECHECK: Duration = Duration::from_secs(60);
/// How often a SQLite or PostgreSQL agent with work (waiting for a slot, in a window) re-reads
/// the store, for what no write announces (a holder's session running out).
pub const STORE_POLL: Duration = Duration::from_secs(1);
/// How often an idle SQLite or PostgreSQL agent looks for new procedures and re-reads its node:
/// a safety net, since every operator's command wakes the agents at once.
pub const PROCEDURE_POLL: Duration = Duration::from_secs(120);
/// The session TTL of an idle node on SQLite and PostgreSQL, renewed a third of it apart:
/// nobody waits on an idle node's session, and the node renews with `--session-ttl` before it
/// queues.
pub const IDLE_SESSION_TTL: Duration = Duration::from_secs(300);
/// The longest random delay before an agent on a shared store (PostgreSQL, Kubernetes) sends
/// its first request, unless it comes back in its window (see `WindowMarker`): a fleet started
/// together (an installation, a restart of every agent, a site's power coming back) then
/// reaches its store over this long instead of at one instant.
pub const START_JITTER: Duration = Duration::from_secs(30);
pub const BLOCKER_INTERVAL: Duration = Duration::from_secs(60);
/// How often the reboot sentinel command runs.
pub const SENTINEL_COMMAND_INTERVAL: Duration = Duration::from_secs(300);

/// Everything one agent needs to know about its node and its policies.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub node: NodeName,
    /// Where the host's filesystem is mounted (`/` on the host itself, `/host` in a pod).
    pub host_root: PathBuf,
    /// Host paths (absolute, as seen on the host) whose presence asks for a reboot.
    pub reboot_sentinels: Vec<PathBuf>,
    pub maintenance_required: PathBuf,
    pub maintenance_in_progress: PathBuf,
    /// Read as is, not under `host_root`: the kernel shows the same boot id in every namespace.
    pub boot_id_file: PathBuf,
    /// Sets the fleet-wide number of slots when given.
    pub concurrency: Option<u32>,
    pub drain_timeout: Duration,
    pub reboot_timeout: Duration,
    /// How long the health check may keep failing after maintenance before the node fails.
    pub verify_timeout: Duration,
    /// Pause between failed health checks.
    pub health_interval: Duration,
    /// How long a node stays healthy in `verifying`, still holding its slot, before it hands
    /// the slot on (time for the workloads it moved to settle).
    pub release_delay: Duration,
    /// How long the node stays cordoned before its pods are evicted, for workloads that
    /// notice the cordon and leave by themselves. Not persisted: a restart waits it again.
    pub drain_delay: Duration,
    /// How long the node waits after its drain and procedures before the reboot starts. Not
    /// persisted: a restart waits it again.
    pub reboot_delay: Duration,
    pub session_ttl: Duration,
    /// The longer TTL an idle node's session is renewed with (see [`IDLE_SESSION_TTL`]);
    /// `None`: always `session_ttl` (the Kubernetes store renews an idle session in memory).
    pub idle_session_ttl: Option<Duration>,
    pub backoff: BackoffPolicy,
    pub safety_recheck: Duration,
    /// How often a node with work re-reads the store in case another process changed it
    /// without telling this one; an idle node re-reads only every `procedure_poll`.
    pub store_poll: Duration,
    /// Host path of the agent's own state: procedure runs live in `runs/` below it.
    pub state_dir: PathBuf,
    /// Host path of the directory holding the `<priority>.maintenance` markers.
    pub marker_dir: PathBuf,
    /// The command words a procedure's script runs under (`nsenter … --` in a pod); empty runs
    /// it directly.
    pub exec_prefix: Vec<String>,
    /// This node's labels, for procedures' node selectors (standalone hosts; in Kubernetes the
    /// Node's labels are added).
    pub node_labels: BTreeMap<String, String>,
    /// How often an idle agent looks for new procedures and re-reads its node (jittered).
    pub procedure_poll: Duration,
    /// The maintenance hours: when the node may take a slot, drain, run a procedure or reboot;
    /// `None`: at any time.
    pub hours: Option<MaintenanceHours>,
    /// The fleet's rollout batches this agent configures. With neither these nor a failure
    /// budget the agent leaves the stored rollout; with either, the part not given is the
    /// default (`all`, no budget).
    pub batches: Option<Batches>,
    /// The fleet's failure budget this agent configures (see `batches`).
    pub failure_budget: Option<FailureBudget>,
    /// The node's slot group (`--group`), recorded as it queues.
    pub group: Option<String>,
    /// The label of the node whose value is its slot group (`--group-by`, on Kubernetes a
    /// Node label such as `topology.kubernetes.io/zone`).
    pub group_by: Option<String>,
    /// The fleet's slot groups' rules this agent configures (`None`: leaves them as stored).
    pub group_rules: Option<GroupRules>,
    /// How often a blocked node asks its blockers again (and how long an answer is reused).
    pub blocker_interval: Duration,
    /// A command whose success says the node needs a reboot, run every so often; its verdict
    /// is one more reboot sentinel (see [`crate::SentinelCommand`]).
    pub reboot_sentinel_command: Option<SentinelCommand>,
}

impl AgentConfig {
    /// The defaults for a node, as documented in README.md's configuration reference.
    pub fn new(node: NodeName) -> AgentConfig {
        AgentConfig {
            node,
            host_root: PathBuf::from("/"),
            reboot_sentinels: DEFAULT_REBOOT_SENTINELS.iter().map(PathBuf::from).collect(),
            maintenance_required: PathBuf::from(MAINTENANCE_REQUIRED),
            maintenance_in_progress: PathBuf::from(MAINTENANCE_IN_PROGRESS),
            boot_id_file: PathBuf::from(DEFAULT_BOOT_ID_FILE),
            concurrency: None,
            drain_timeout: DRAIN_TIMEOUT,
            reboot_timeout: REBOOT_TIMEOUT,
            verify_timeout: VERIFY_TIMEOUT,
            health_interval: HEALTH_INTERVAL,
            release_delay: RELEASE_DELAY,
            drain_delay: DRAIN_DELAY,
            reboot_delay: REBOOT_DELAY,
            session_ttl: SESSION_TTL,
            idle_session_ttl: None,
            backoff: BackoffPolicy::DEFAULT,
            safety_recheck: SAFETY_RECHECK,
            store_poll: STORE_POLL,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            marker_dir: PathBuf::from(MARKER_DIR),
            exec_prefix: Vec::new(),
            node_labels: BTreeMap::new(),
            procedure_poll: PROCEDURE_POLL,
            hours: None,
            batches: None,
            failure_budget: None,
            group: None,
            group_by: None,
            group_rules: None,
            blocker_interval: BLOCKER_INTERVAL,
            reboot_sentinel_command: None,
        }
    }

    /// The host paths whose presence asks for a reboot: the reboot sentinels, and the verdict
    /// of the reboot sentinel command when there is one.
    pub fn watched_reboot_sentinels(&self) -> Vec<PathBuf> {
        let mut paths = self.reboot_sentinels.clone();
        if self.reboot_sentinel_command.is_some() {
            paths.push(self.sentinel_command_verdict());
        }
        paths
    }

    /// The host path of the file that holds the reboot sentinel command's "needed".
    pub(crate) fn sentinel_command_verdict(&self) -> PathBuf {
        self.state_dir.join(VERDICT_FILE)
    }

    /// Where a host path is reachable from this process.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        let relative: PathBuf = path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        self.host_root.join(relative)
    }
}

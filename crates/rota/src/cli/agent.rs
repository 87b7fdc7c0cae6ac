//! `rota agent`'s arguments, in groups that its help shows under their own headings.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use humantime::Duration as HumanDuration;
use rota_core::{MaintenanceWindow, NodeName};
use rota_notify::{EventKind, Template, Webhook};

use super::parse::{
    NodeLabelArg, command_text, concurrency, duration, failure_budget, host_path, json_webhook,
    label, node_labels, notify_template, positive_duration, positive_span, slack_webhook, span,
    taint_key, window,
};
use super::{BackoffArgs, NodeActionsKind, StoreArgs};

#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// This node's name (its Kubernetes node name, or its hostname).
    #[arg(long, value_name = "NAME", env = "ROTA_NODE")]
    pub node: NodeName,
    /// Where the host's filesystem is mounted; sentinel paths are relative to it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// The fleet-wide number of slots: at most this many nodes are out at once. Sets the
    /// store's value when given; the store keeps the last value set (default 1).
    #[arg(long, value_name = "K", env = "ROTA_CONCURRENCY", value_parser = concurrency)]
    pub concurrency: Option<u32>,
    /// How the agent cordons, drains and uncordons its node.
    #[arg(long, value_enum, default_value = "command")]
    pub node_actions: NodeActionsKind,
    /// Host directory of the agent's own state (procedure runs and the reboot sentinel
    /// command's verdict survive restarts there).
    #[arg(long, value_name = "PATH", value_parser = host_path, default_value = rota_agent::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Command words procedure scripts run under, split at spaces (in a pod:
    /// "nsenter -t 1 -m -u -i -n -p --"); empty runs them directly.
    #[arg(long, value_name = "WORDS", default_value = "")]
    pub exec_prefix: String,
    /// A label of this node for procedures' selectors (repeatable; in Kubernetes the Node's
    /// labels count too).
    #[arg(long = "node-label", value_name = "KEY=VALUE", value_parser = label)]
    pub node_labels: Vec<(String, String)>,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address, such as
    /// 127.0.0.1:9746 or 0.0.0.0:9746 (default: off).
    #[arg(long, value_name = "IP:PORT", env = "ROTA_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// A maintenance window, "[DAYS] HH:MM[:SS]-HH:MM[:SS] [TIME ZONE]" such as
    /// "mon-fri 22:00-04:00 Europe/Berlin" (repeatable: any open window lets disruptive steps
    /// start). Checked before the slot, the drain, each procedure and the reboot; work whose
    /// window closes waits for the next one. Default: always open. ROTA_WINDOW holds one.
    #[arg(long = "window", value_name = "WINDOW", env = "ROTA_WINDOW", value_parser = window)]
    pub windows: Vec<MaintenanceWindow>,
    /// Pause the whole fleet before taking a slot once this many nodes failed since the last
    /// `rota resume` (or ever). Default: no budget.
    #[arg(long, value_name = "F", env = "ROTA_FAILURE_BUDGET", value_parser = failure_budget)]
    pub failure_budget: Option<u32>,
    #[command(flatten)]
    pub sentinels: SentinelArgs,
    #[command(flatten)]
    pub commands: CommandArgs,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub backoff: BackoffArgs,
    #[command(flatten)]
    pub kube_drain: KubeDrainArgs,
    #[command(flatten)]
    pub notify: NotifyArgs,
    #[command(flatten)]
    pub blockers: BlockerArgs,
}

/// What asks for maintenance, and what proves a reboot happened.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Sentinels")]
pub struct SentinelArgs {
    /// A file whose presence asks for a reboot (repeatable; replaces the defaults).
    #[arg(long = "reboot-sentinel", value_name = "PATH", value_parser = host_path,
          default_values = rota_agent::DEFAULT_REBOOT_SENTINELS)]
    pub reboot_sentinels: Vec<PathBuf>,
    /// A command whose success (exit status 0) says the node needs a reboot, for systems that
    /// leave no sentinel file, such as "! needs-restarting -r" (kured's
    /// --reboot-sentinel-command); run with sh -c under --exec-prefix.
    #[arg(long, value_name = "CMD", env = "ROTA_REBOOT_SENTINEL_COMMAND",
          value_parser = command_text)]
    pub reboot_sentinel_command: Option<String>,
    /// How often the --reboot-sentinel-command runs.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::SENTINEL_COMMAND_INTERVAL))]
    pub reboot_sentinel_command_interval: HumanDuration,
    /// kustodian's sentinel: a host script creates it to ask for maintenance and deletes it
    /// when done.
    #[arg(long, value_name = "PATH", value_parser = host_path,
          default_value = rota_agent::MAINTENANCE_REQUIRED)]
    pub maintenance_sentinel: PathBuf,
    /// Created once the node is drained, for kustodian's host scripts to start.
    #[arg(long, value_name = "PATH", value_parser = host_path,
          default_value = rota_agent::MAINTENANCE_IN_PROGRESS)]
    pub maintenance_in_progress: PathBuf,
    /// The kernel's boot id; a new one after a reboot proves it happened.
    #[arg(long, value_name = "PATH", default_value = rota_agent::DEFAULT_BOOT_ID_FILE)]
    pub boot_id_file: PathBuf,
}

/// The shell commands of `--node-actions command` (the reboot and health commands in both modes).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Node commands")]
pub struct CommandArgs {
    /// Cordons and drains the node (`sh -c`; ROTA_NODE is set). Empty: nothing to drain.
    #[arg(long, value_name = "CMD", env = "ROTA_DRAIN_COMMAND")]
    pub drain_command: Option<String>,
    /// Returns the node to service.
    #[arg(long, value_name = "CMD", env = "ROTA_UNCORDON_COMMAND")]
    pub uncordon_command: Option<String>,
    /// Reboots the host; run as a child process, never exec'd.
    #[arg(
        long,
        value_name = "CMD",
        env = "ROTA_REBOOT_COMMAND",
        default_value = "systemctl reboot"
    )]
    pub reboot_command: String,
    /// Must succeed before the slot is released.
    #[arg(long, value_name = "CMD", env = "ROTA_HEALTH_COMMAND")]
    pub health_command: Option<String>,
}

/// How long each step may take, and how often the agent looks again.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Timeouts and intervals")]
pub struct TimingArgs {
    /// A drain that takes longer fails: uncordon, release the slot, back off.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::DRAIN_TIMEOUT))]
    pub drain_timeout: HumanDuration,
    /// The same boot id this long after the reboot started means the reboot failed.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::REBOOT_TIMEOUT))]
    pub reboot_timeout: HumanDuration,
    /// How long the health command may keep failing before the node fails.
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(rota_agent::VERIFY_TIMEOUT))]
    pub verify_timeout: HumanDuration,
    /// Pause between health checks.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::HEALTH_INTERVAL))]
    pub health_interval: HumanDuration,
    /// Once the node is healthy, keep its slot this long before handing it on; health checks
    /// go on meanwhile, and a failed one starts the delay again.
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(rota_agent::RELEASE_DELAY))]
    pub release_delay: HumanDuration,
    /// A session not renewed for this long is expired and its writes are refused.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::SESSION_TTL))]
    pub session_ttl: HumanDuration,
    /// With SQLite and PostgreSQL: the session TTL of an idle node, renewed a third of it
    /// apart (nobody waits on an idle node's session; it renews with --session-ttl before it
    /// queues). A dead idle agent shows as live for up to this long.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::IDLE_SESSION_TTL))]
    pub idle_session_ttl: HumanDuration,
    /// Slow re-check of the sentinels in case an inotify event was missed.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::SAFETY_RECHECK))]
    pub safety_recheck: HumanDuration,
    /// How often a node with work re-reads the store for changes made by other processes
    /// (default 1s; 5m with --store kube, whose watch reports releases). An idle node re-reads
    /// only every --procedure-poll.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub store_poll: Option<Duration>,
    /// Before the first request to the store, wait a random part of this long, so that a
    /// fleet started together spreads its first contact; an agent whose node is in its window
    /// (back from its own reboot) starts at once. 0: no delay (default 30s with PostgreSQL and
    /// --store kube; 0 with SQLite, one host's own store).
    #[arg(long, value_name = "DURATION", env = "ROTA_START_JITTER", value_parser = duration)]
    pub start_jitter: Option<Duration>,
    /// How often, give or take a fifth, to look for new procedures and re-read the node: a
    /// safety net, since `rota request`, `rota mop submit`, `rota retry` and `rota unlock`
    /// wake the agents they concern at once (default 2m; 1m with --store kube).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub procedure_poll: Option<Duration>,
}

/// How the agent cordons, drains and labels its Node through the Kubernetes API.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes drain (--node-actions kube)")]
pub struct KubeDrainArgs {
    /// With --node-actions kube: evictions in progress at once (default 5).
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
    pub drain_concurrency: Option<usize>,
    /// With --node-actions kube: also evict pods no controller manages (nothing recreates them).
    #[arg(long)]
    pub drain_force: bool,
    /// With --node-actions kube: also evict pods with emptyDir volumes (their data is lost).
    #[arg(long)]
    pub drain_delete_emptydir_data: bool,
    /// With --node-actions kube: override the pods' termination grace period.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub drain_grace_period: Option<Duration>,
    /// With --node-actions kube: a pod still terminating this long after its grace period
    /// ended is not waited for (kubectl drain's --skip-wait-for-delete-timeout; default: wait
    /// for every pod).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub drain_skip_wait_for_delete_timeout: Option<Duration>,
    /// With --node-actions kube: a label set on the Node in rota's cordon, such as
    /// rota.dev/maintenance=true (repeatable, or several separated by commas; kured's
    /// --pre-reboot-node-labels).
    #[arg(long = "cordon-label", value_name = "KEY=VALUE", value_parser = node_labels)]
    pub cordon_labels: Vec<NodeLabelArg>,
    /// With --node-actions kube: a label set on the Node in rota's uncordon, which also removes
    /// the --cordon-label keys not given here (repeatable, or several separated by commas;
    /// kured's --post-reboot-node-labels).
    #[arg(long = "uncordon-label", value_name = "KEY=VALUE", value_parser = node_labels)]
    pub uncordon_labels: Vec<NodeLabelArg>,
    /// With --node-actions kube: while the node waits for maintenance (or is in its window) it
    /// carries the taint KEY:PreferNoSchedule, so that new and evicted pods prefer nodes that
    /// will not be drained soon (kured's --prefer-no-schedule-taint).
    #[arg(long, value_name = "KEY", value_parser = taint_key)]
    pub prefer_no_schedule_taint: Option<String>,
    /// With --node-actions kube: also wait, before the slot goes back, until every
    /// PodDisruptionBudget in the cluster is satisfied again.
    #[arg(long)]
    pub health_pdbs: bool,
}

/// Where the agent tells people about its windows.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Notifications")]
pub struct NotifyArgs {
    /// POST each notification (drain started, reboot, finished, failed) as a JSON object to
    /// this http(s) URL (repeatable).
    #[arg(long = "notify-webhook", value_name = "URL", value_parser = json_webhook)]
    pub notify_webhooks: Vec<Webhook>,
    /// POST each notification as a Slack-compatible {"text": …} message to this incoming
    /// webhook URL (repeatable).
    #[arg(long = "notify-slack", value_name = "URL", value_parser = slack_webhook)]
    pub notify_slack: Vec<Webhook>,
    /// The message of one event (drain-started, reboot, finished, failed or postponed), with {node},
    /// {process}, {event}, {cause}, {slot} and {at} filled in (repeatable, one per event).
    #[arg(long = "notify-template", value_name = "EVENT=TEMPLATE", value_parser = notify_template)]
    pub notify_templates: Vec<(EventKind, Template)>,
}

/// What holds the node back before it takes a slot and before its reboot.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Blockers")]
pub struct BlockerArgs {
    /// A pod running on this node that matches this label selector (such as `app=backup`)
    /// holds the node back before it takes a slot and before its reboot (repeatable; any
    /// match blocks). Needs --node-actions kube.
    #[arg(long = "blocking-pod-selector", value_name = "SELECTOR")]
    pub blocking_pod_selectors: Vec<String>,
    /// While this Prometheus (http(s) base URL) reports active alerts, the node holds back
    /// before it takes a slot and before its reboot; an unreachable Prometheus holds it back too.
    #[arg(long, value_name = "URL", env = "ROTA_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// Alerts whose name matches this regular expression do not hold the node back (with
    /// --alert-filter-match-only: only they do).
    #[arg(long, value_name = "REGEXP")]
    pub alert_filter_regexp: Option<String>,
    /// Only alerts matching --alert-filter-regexp hold the node back.
    #[arg(long)]
    pub alert_filter_match_only: bool,
    /// Only firing alerts hold the node back, not pending ones.
    #[arg(long)]
    pub alert_firing_only: bool,
    /// How often a blocked node asks its blockers again (a resume of the fleet is seen at once).
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::BLOCKER_INTERVAL))]
    pub blocker_interval: HumanDuration,
}

impl AgentArgs {
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        self.node_labels.iter().cloned().collect()
    }
}

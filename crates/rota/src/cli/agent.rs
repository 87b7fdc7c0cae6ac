//! `rota agent`'s arguments, in groups that its help shows under their own headings.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use humantime::Duration as HumanDuration;
use rota_core::{Batches, FailureBudget, Hours, NodeName};
use rota_notify::{EventKind, Template, Webhook};

use super::parse::{
    batches, command_text, concurrency, duration, failure_budget, group_by, group_limit,
    group_name, host_path, hours, json_webhook, label, notify_template, positive_duration,
    positive_span, slack_webhook, span,
};
use super::{BackoffArgs, KubeDrainArgs, NodeActionsKind, StoreArgs};

#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// This node's name (its Kubernetes node name, or its hostname).
    ///
    /// `[A-Za-z0-9._-]`, 1 to 253 characters, starting and ending with a letter or digit.
    #[arg(long, value_name = "NAME", env = "ROTA_NODE")]
    pub node: NodeName,
    /// Where the host's filesystem is mounted; sentinel paths are relative to it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// The fleet-wide number of slots: at most this many nodes are out at once.
    ///
    /// 1 to 1000. Given, it sets the store's value, for every agent; the store keeps the last value
    /// set (default 1).
    #[arg(long, value_name = "K", env = "ROTA_CONCURRENCY", value_parser = concurrency)]
    pub concurrency: Option<u32>,
    /// How the agent cordons, drains and uncordons its node.
    #[arg(long, value_enum, default_value = "command")]
    pub node_actions: NodeActionsKind,
    /// Host directory of the agent's own state, which survives restarts.
    ///
    /// Each procedure attempt has a run directory `runs/REQUEST-ATTEMPT` there (script, pid,
    /// stdout, stderr, exit status); `reboot-started` names the last reboot whose command ran on
    /// this host; `in-window` is there while the node holds a slot (see --start-jitter); and
    /// `reboot-required-by-command` holds the --reboot-sentinel-command's verdict.
    #[arg(long, value_name = "PATH", value_parser = host_path, default_value = rota_agent::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Command words procedure scripts run under, split at spaces; empty runs them directly.
    ///
    /// The chart sets "nsenter -t 1 -m -u -i -n -p --", so that scripts run in the host's
    /// namespaces.
    #[arg(long, value_name = "WORDS", default_value = "")]
    pub exec_prefix: String,
    /// A label of this node for procedures' selectors (repeatable; in Kubernetes the Node's
    /// labels count too).
    #[arg(long = "node-label", value_name = "KEY=VALUE", value_parser = label)]
    pub node_labels: Vec<(String, String)>,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address, such as 127.0.0.1:9746 or
    /// 0.0.0.0:9746 (default: off).
    ///
    /// A port already taken or a malformed address stops the agent at start.
    #[arg(long, value_name = "IP:PORT", env = "ROTA_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Maintenance hours, when nodes may be disrupted, such as "mon-fri 22:00-04:00
    /// Europe/Berlin" (repeatable).
    ///
    /// The form is "[DAYS] HH:MM[:SS]-HH:MM[:SS] [TIME ZONE]". A node takes its slot, drains, runs
    /// each procedure and reboots only within the maintenance hours (within any of them, when
    /// several are given); work whose hours end gives its slot back and waits until they start
    /// again. Default: any time. ROTA_HOURS holds one.
    #[arg(long = "hours", value_name = "HOURS", env = "ROTA_HOURS", value_parser = hours)]
    pub hours: Vec<Hours>,
    /// The rollout's failure budget: pause the whole fleet once this many nodes failed (a
    /// number, like 2, or a share of the fleet, like 10%; default: no budget).
    ///
    /// A setting of the fleet, like the concurrency: the agent stores it as it starts. Checked
    /// before a node takes a slot: once F nodes have failed since the last `rota resume` (or
    /// ever), the fleet pauses, and `rota status` says why.
    #[arg(long, value_name = "F", env = "ROTA_FAILURE_BUDGET", value_parser = failure_budget)]
    pub failure_budget: Option<FailureBudget>,
    /// How the rollout widens: `all` (the whole concurrency at once), `exponential` (1, 2, 4,
    /// …), `linear:S` (S, 2S, 3S, …) or widths like `1,5,10` (Ansible's `serial`; the last
    /// repeats).
    ///
    /// A setting of the fleet, like the concurrency: the agent stores it as it starts. A width
    /// holds until as many nodes ended their windows healthy at it; every width is capped by
    /// the concurrency. `rota resume` starts a new rollout, narrow again.
    #[arg(long, value_name = "BATCHES", env = "ROTA_BATCHES", value_parser = batches)]
    pub batches: Option<Batches>,
    /// This node's slot group (a rack, a pool), for `--group-limit` and `--groups-in-turn`.
    #[arg(long, value_name = "NAME", env = "ROTA_GROUP", value_parser = group_name, conflicts_with = "group_by")]
    pub group: Option<String>,
    /// The label whose value is this node's slot group: on Kubernetes a label of its Node,
    /// such as topology.kubernetes.io/zone or a node pool's; elsewhere one of --node-label.
    #[arg(long, value_name = "LABEL", env = "ROTA_GROUP_BY", value_parser = group_by)]
    pub group_by: Option<String>,
    /// A limit of the slot groups (repeatable): `N` for every group, `NAME=N` for one group.
    /// A node takes a turn only when both the concurrency and its group's limit allow it.
    ///
    /// A setting of the fleet, like the concurrency: the agent stores the groups' rules (these
    /// and --groups-in-turn) as it starts.
    #[arg(long, value_name = "[NAME=]N", value_parser = group_limit)]
    pub group_limit: Vec<String>,
    /// One slot group at a time: the group that holds slots goes on until it holds none, then
    /// the next group by name (finish zone-a before zone-b starts).
    #[arg(long)]
    pub groups_in_turn: bool,
    #[command(flatten)]
    pub sentinels: SentinelArgs,
    #[command(flatten)]
    pub commands: CommandArgs,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub backoff: BackoffArgs,
    #[command(flatten, next_help_heading = "Kubernetes drain (--node-actions kube)")]
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
    /// A command whose success (exit status 0) says the node needs a reboot (kured's
    /// --reboot-sentinel-command).
    ///
    /// For systems that leave no sentinel file, such as "! needs-restarting -r" on RHEL and its
    /// kin. It runs with sh -c under --exec-prefix (in the chart: in the host's namespaces) every
    /// --reboot-sentinel-command-interval.
    ///
    /// Its verdict is kept as the file `reboot-required-by-command` in --state-dir, watched as one
    /// more reboot sentinel: "needed" asks for one reboot; a verdict older than the node's last
    /// reboot asks for nothing (so a command that still says "needed" after the reboot cannot
    /// loop); "not needed" withdraws a request still pending. A run that cannot start, or takes
    /// over 2 minutes, keeps the last verdict.
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
    /// Created once the node is drained, for kustodian's host scripts to start; removed when the
    /// --maintenance-sentinel is gone.
    #[arg(long, value_name = "PATH", value_parser = host_path,
          default_value = rota_agent::MAINTENANCE_IN_PROGRESS)]
    pub maintenance_in_progress: PathBuf,
    /// The kernel's boot id; a new one after a reboot proves it happened.
    ///
    /// Read as is, not under --host-root.
    #[arg(long, value_name = "PATH", default_value = rota_agent::DEFAULT_BOOT_ID_FILE)]
    pub boot_id_file: PathBuf,
}

/// The shell commands of `--node-actions command` (the reboot and health commands in both modes).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Node commands")]
pub struct CommandArgs {
    /// Cordons and drains the node (`sh -c`; ROTA_NODE is set). Empty: nothing to drain.
    ///
    /// It must be idempotent: it runs again after an agent restart in the middle of a drain.
    #[arg(long, value_name = "CMD", env = "ROTA_DRAIN_COMMAND")]
    pub drain_command: Option<String>,
    /// Returns the node to service.
    #[arg(long, value_name = "CMD", env = "ROTA_UNCORDON_COMMAND")]
    pub uncordon_command: Option<String>,
    /// Reboots the host; run as a child process, never exec'd.
    ///
    /// rota never runs it twice for one request: a restarted agent whose recorded reboot's command
    /// already ran on this boot waits for the reboot instead.
    #[arg(
        long,
        value_name = "CMD",
        env = "ROTA_REBOOT_COMMAND",
        default_value = "systemctl reboot"
    )]
    pub reboot_command: String,
    /// How the reboot starts: `command` runs --reboot-command; `signal` sends systemd's reboot
    /// signal to PID 1 (kured's --reboot-signal).
    ///
    /// The signal is SIGRTMIN+5 as systemd numbers it (signal 39, kured's default --reboot-signal),
    /// on which systemd reboots as `systemctl reboot` asks it to. It goes to PID 1 of the agent's
    /// PID namespace: the host's systemd on the host, and in a pod with hostPID: true (as the
    /// chart's); no nsenter is needed in the image.
    ///
    /// The reboot counts as started once the signal is sent; a signal that cannot be sent fails the
    /// reboot with the cause.
    #[arg(
        long,
        value_enum,
        value_name = "METHOD",
        env = "ROTA_REBOOT_METHOD",
        default_value = "command"
    )]
    pub reboot_method: RebootMethod,
    /// Must succeed before the slot is released.
    #[arg(long, value_name = "CMD", env = "ROTA_HEALTH_COMMAND")]
    pub health_command: Option<String>,
}

/// How `rota agent` starts its node's reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RebootMethod {
    /// Run --reboot-command.
    Command,
    /// Send systemd's reboot signal (SIGRTMIN+5) to PID 1.
    Signal,
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
    /// How long the health check may keep failing before the node fails.
    ///
    /// The health check is the --health-command and, with --node-actions kube, the Node's Ready
    /// condition and the health gate (the workloads the drain evicted whole again, and with
    /// --health-pdbs every PodDisruptionBudget satisfied).
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(rota_agent::VERIFY_TIMEOUT))]
    pub verify_timeout: HumanDuration,
    /// Pause between health checks.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::HEALTH_INTERVAL))]
    pub health_interval: HumanDuration,
    /// Once the node is healthy, keep its slot this long before handing it on.
    ///
    /// Health checks go on meanwhile, and a failed one starts the delay again (so does an agent
    /// restart).
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(rota_agent::RELEASE_DELAY))]
    pub release_delay: HumanDuration,
    /// Once rota has cordoned the node, wait this long before its pods are evicted (kured's
    /// --drain-delay).
    ///
    /// For workloads that see the cordon and move by themselves. Shutdown (SIGTERM) ends the wait
    /// at once; the end of the maintenance hours postpones the work (uncordon, slot back); the
    /// eviction after it proves the slot again; --drain-timeout counts from its end. The wait is
    /// not persisted: a restarted agent waits it again. With --node-actions command nothing
    /// cordons before the --drain-command, which runs after the delay.
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(rota_agent::DRAIN_DELAY))]
    pub drain_delay: HumanDuration,
    /// Once the node is drained and its procedures are done, wait this long before the reboot
    /// (kured's --reboot-delay).
    ///
    /// Shutdown (SIGTERM) ends the wait at once; after it the maintenance hours, the blockers and
    /// the slot are checked before the reboot starts. The wait is not persisted: a restarted agent
    /// waits it again.
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(rota_agent::REBOOT_DELAY))]
    pub reboot_delay: HumanDuration,
    /// A session not renewed for this long is expired and its writes are refused.
    ///
    /// An agent that finds its own session expired (the store out of reach, or the process frozen,
    /// for longer) opens a new one and carries on, unless another agent took the node over.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::SESSION_TTL))]
    pub session_ttl: HumanDuration,
    /// With SQLite and PostgreSQL: the session TTL of an idle node, renewed a third of it apart.
    ///
    /// With the default, one statement every 100 s. Nobody waits on an idle node's session, and the
    /// node renews with --session-ttl before it queues or works. The price: `rota status` shows a
    /// dead idle agent's session as live for up to this long, and an idle agent superseded by a
    /// second one for its node (whose writes are refused at once) exits only at its next renewal.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::IDLE_SESSION_TTL))]
    pub idle_session_ttl: HumanDuration,
    /// Slow re-check of the sentinels in case an inotify event was missed.
    #[arg(long, value_name = "DURATION", value_parser = positive_span,
          default_value_t = HumanDuration::from(rota_agent::SAFETY_RECHECK))]
    pub safety_recheck: HumanDuration,
    /// How often a node with work re-reads the store for changes made by other processes (default
    /// 1s; 5m with --store kube).
    ///
    /// A node has work while it is queued, in a window, or failed. PostgreSQL and Kubernetes also
    /// notify (--store kube's watch reports releases); this is the safety net, and it finds a slot
    /// holder whose session ran out. An idle node re-reads only every --procedure-poll.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub store_poll: Option<Duration>,
    /// Before the first request to the store, wait a random part of this long, so that a fleet
    /// started together spreads its first contact.
    ///
    /// The first request is the cluster's checks or the store's opening. An agent whose node is in
    /// its window (it holds a slot: back from its own reboot, or restarted while it drains or
    /// verifies) starts at once: the file `in-window` in --state-dir says so before it asks the
    /// store anything. SIGTERM during the wait ends the agent at once, with status 0. 0: no delay.
    /// Default 30s with PostgreSQL and --store kube; 0 with SQLite, one host's own store, where
    /// there is nothing to spread.
    #[arg(long, value_name = "DURATION", env = "ROTA_START_JITTER", value_parser = duration)]
    pub start_jitter: Option<Duration>,
    /// How often, give or take a fifth, to look for new procedures and re-read the node: a safety
    /// net (default 2m; 1m with --store kube).
    ///
    /// The fifth spreads out a fleet started together. In Kubernetes an idle agent also looks at
    /// its own RotaNode, for changes made with kubectl; both are answered from the agent's watches,
    /// without a request, while they stand. `rota request`, `cancel`, `retry`, `unlock` and `mop
    /// submit` wake the agents they concern at once, on SQLite too when they run in another
    /// process: every operator write moves the `wake` setting, and each process watches the
    /// database's write-ahead log with inotify.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub procedure_poll: Option<Duration>,
}

/// Where the agent tells people about its windows.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Notifications")]
pub struct NotifyArgs {
    /// POST each notification (drain started, reboot, finished, failed) as a JSON object to this
    /// http(s) URL (repeatable).
    ///
    /// The object's fields: event, node, process, cause, slot, at and message.
    #[arg(long = "notify-webhook", value_name = "URL", value_parser = json_webhook)]
    pub notify_webhooks: Vec<Webhook>,
    /// POST each notification as a Slack-compatible {"text": …} message to this incoming webhook
    /// URL (repeatable).
    ///
    /// Mattermost and Rocket.Chat accept it too.
    #[arg(long = "notify-slack", value_name = "URL", value_parser = slack_webhook)]
    pub notify_slack: Vec<Webhook>,
    /// The message of one event (repeatable, one per event).
    ///
    /// EVENT is drain-started, reboot, finished, failed or postponed; {node}, {process}, {event},
    /// {cause}, {slot} and {at} in TEMPLATE are filled in, and {{ and }} stand for literal braces.
    /// Needs --notify-webhook or --notify-slack. The defaults are in the guide's Notifications.
    #[arg(long = "notify-template", value_name = "EVENT=TEMPLATE", value_parser = notify_template)]
    pub notify_templates: Vec<(EventKind, Template)>,
}

/// What holds the node back before it takes a slot and before its reboot.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Blockers")]
pub struct BlockerArgs {
    /// A pod running on this node that matches this label selector holds the node back before it
    /// takes a slot and before its reboot (kured's --blocking-pod-selector).
    ///
    /// Such as `app=backup`, `tier in (db,cache)` or `!drain-ok`. Repeatable; any match blocks.
    /// Needs --node-actions kube.
    #[arg(long = "blocking-pod-selector", value_name = "SELECTOR")]
    pub blocking_pod_selectors: Vec<String>,
    /// While this Prometheus (http(s) base URL) reports active alerts, the node holds back before
    /// it takes a slot and before its reboot.
    ///
    /// An unreachable or erroring Prometheus holds it back too, and says so.
    #[arg(long, value_name = "URL", env = "ROTA_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// With --prometheus-url: alerts whose name matches this regular expression do not hold the
    /// node back (with --alert-filter-match-only: only they do).
    #[arg(long, value_name = "REGEXP")]
    pub alert_filter_regexp: Option<String>,
    /// Only alerts matching --alert-filter-regexp hold the node back.
    #[arg(long)]
    pub alert_filter_match_only: bool,
    /// With --prometheus-url: only firing alerts hold the node back, not pending ones.
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

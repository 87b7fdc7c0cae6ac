//! The command line: clap types only. Each subcommand's behaviour lives in its own module.
//!
//! [`Command`] is one enum of subcommands, each with its own `Args` struct, so that further
//! subcommands (`agent`, `simulate`) are added as one variant and one module each. Commands that
//! talk to the store flatten [`StoreArgs`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use rota_core::{HistoryEvent, MaintenanceWindow, NodeName, Priority, Process};
use rota_notify::{EventKind, Template, Webhook};
use rota_store::{Millis, StoreUrl};

use crate::store::StoreLocation;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The store used when neither `--store` nor `ROTA_STORE` is given.
pub const DEFAULT_STORE: &str = "sqlite:///var/lib/rota/rota.db";

/// rota lets the nodes of a fleet take turns for disruptive maintenance.
#[derive(Debug, Parser)]
#[command(
    name = "rota",
    version,
    about,
    after_help = "Exit status: 0 on success, 1 when the command failed, 2 for invalid usage.\n\
                  Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more."
)]
pub struct Cli {
    /// How log lines on stderr look: text for people, json (one object a line) for log
    /// collectors.
    #[arg(long, value_enum, global = true, env = "ROTA_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with timestamp, level, fields and target.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent of one node: watch its sentinels, take turns for a slot, drain, maintain,
    /// reboot, verify, and hand the slot on.
    Agent(Box<AgentArgs>),
    /// Run N real agents in this process against a real store, with simulated reboots, and
    /// report how the rollout went.
    Simulate(SimulateArgs),
    /// Show every node: state, slot, process, queue, backoff, last result.
    Status(StatusArgs),
    /// Show the history of work events (started, finished, failed, canceled, postponed), oldest
    /// first.
    History(HistoryArgs),
    /// Release a node's slot and return it to idle, canceling its window.
    ///
    /// For a failed node that was repaired (or given up on) by hand. Its open requests are
    /// canceled with the reason in history; the node stays cordoned until its agent uncordons
    /// it.
    Unlock(UnlockArgs),
    /// Let a failed node try its window's work again.
    ///
    /// The node keeps its slot and stays cordoned; its agent resumes the window's work.
    Retry(RetryArgs),
    /// Ask for maintenance on a node as an operator: a reboot or a procedure, in its next window.
    Request(RequestArgs),
    /// Withdraw a node's pending request (work already in a window is given up with unlock).
    Cancel(RequestArgs),
    /// Pause the whole fleet: no node takes a slot or starts a reboot until `rota resume`.
    /// Windows already open finish their other steps.
    Pause(PauseArgs),
    /// Lift the fleet's pause.
    Resume(ResumeArgs),
    /// Maintenance procedures (MOPs): submit one to run once on every matching node, list them.
    #[command(subcommand)]
    Mop(MopCommand),
    /// Measure a store's throughput with many concurrent sessions, and count afterwards that no
    /// slot was granted twice and no history row was lost. Needs a store of its own.
    Bench(BenchArgs),
}

impl Command {
    /// The log level used when `RUST_LOG` is not set: operator commands log only warnings, so
    /// their stderr stays quiet.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Command::Agent(_) => "info",
            Command::Simulate(_)
            | Command::Status(_)
            | Command::History(_)
            | Command::Unlock(_)
            | Command::Retry(_)
            | Command::Request(_)
            | Command::Cancel(_)
            | Command::Pause(_)
            | Command::Resume(_)
            | Command::Mop(_)
            | Command::Bench(_) => "warn",
        }
    }
}

/// Where state lives.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The store: sqlite://PATH (relative) or sqlite:///PATH (absolute), postgres://…, or kube
    /// (in a cluster: slot Leases and RotaNode resources).
    #[arg(long, value_name = "URL", env = "ROTA_STORE", default_value = DEFAULT_STORE)]
    pub store: StoreLocation,
    /// With --store kube: the kubeconfig (default: in-cluster config, KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// With --store kube: the namespace of the slot Leases and rota's configuration.
    #[arg(
        long,
        value_name = "NAME",
        env = "ROTA_NAMESPACE",
        default_value = "rota-system"
    )]
    pub namespace: String,
}

/// How the agent acts on its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum NodeActionsKind {
    /// Shell commands (--drain-command, --uncordon-command): standalone hosts.
    #[default]
    Command,
    /// The Kubernetes API: cordon, evictions that respect PodDisruptionBudgets, uncordon.
    Kube,
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for people.
    #[default]
    Table,
    /// One JSON document for programs.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Keep the table live, with the rollout's progress and an ETA, until interrupted.
    #[arg(long, conflicts_with = "output")]
    pub watch: bool,
    /// With --watch: time between refreshes.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "2s")]
    pub interval: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this node's entries.
    #[arg(value_name = "NODE")]
    pub node: Option<NodeName>,
    /// Only entries of this process: reboot, maintenance or mop/<name>.
    #[arg(long, value_name = "PROCESS")]
    pub process: Option<Process>,
    /// Only entries of this event: started, finished, failed, canceled, released or postponed.
    #[arg(long, value_name = "EVENT")]
    pub event: Option<HistoryEvent>,
    /// Only entries at or after TIME: an RFC 3339 timestamp or a duration ago (30m, 2h, 1d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<TimeArg>,
    /// Only entries at or before TIME: an RFC 3339 timestamp or a duration ago (30m, 2h, 1d).
    #[arg(long, value_name = "TIME")]
    pub until: Option<TimeArg>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Also draw the entries as a rollout timeline (one lane per node) into this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The node to unlock.
    #[arg(value_name = "NODE")]
    pub node: NodeName,
    /// Why: recorded in the node's history with the cancellation.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: String,
}

#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["reboot", "procedure"])))]
pub struct RequestArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The node.
    #[arg(value_name = "NODE")]
    pub node: NodeName,
    /// A reboot.
    #[arg(long)]
    pub reboot: bool,
    /// A procedure, by name (it runs at most once per node).
    #[arg(long, value_name = "NAME")]
    pub procedure: Option<String>,
}

impl RequestArgs {
    /// The process asked for; an invalid procedure name is an error naming it.
    pub fn process(&self) -> Result<Process, rota_core::NameError> {
        match &self.procedure {
            Some(name) => Process::mop(name.clone()),
            None => Ok(Process::Reboot),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Why: shown by `rota status` while the pause lasts.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: String,
}

#[derive(Debug, Clone, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The failed node to retry.
    #[arg(value_name = "NODE")]
    pub node: NodeName,
}

fn non_empty_reason(value: &str) -> Result<String, String> {
    let reason = value.trim();
    if reason.is_empty() {
        Err("the reason must not be empty: say why the node's window is canceled".to_owned())
    } else {
        Ok(reason.to_owned())
    }
}

/// A point in time on the command line: an RFC 3339 timestamp, or a duration meaning "that long
/// before now".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    At(Millis),
    Ago(Duration),
}

impl TimeArg {
    /// The point in time as unix milliseconds, relative durations counted back from `now`.
    pub fn resolve(self, now: Millis) -> Millis {
        match self {
            TimeArg::At(at) => at,
            TimeArg::Ago(ago) => {
                let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
                now.saturating_sub(ago)
            }
        }
    }
}

impl FromStr for TimeArg {
    type Err = String;

    fn from_str(s: &str) -> Result<TimeArg, String> {
        let s = s.trim();
        if let Ok(at) = OffsetDateTime::parse(s, &Rfc3339) {
            let millis = at.unix_timestamp_nanos() / 1_000_000;
            return i64::try_from(millis)
                .map(TimeArg::At)
                .map_err(|_| format!("time {s:?} is out of range"));
        }
        humantime::parse_duration(s).map(TimeArg::Ago).map_err(|_| {
            format!(
                "invalid time {s:?}: expected an RFC 3339 timestamp (2024-05-01T10:00:00Z) \
                 or a duration ago (30m, 2h, 1d)"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn times_parse_as_timestamps_or_durations_ago() {
        assert_eq!(
            "2024-05-01T10:00:00Z".parse::<TimeArg>(),
            Ok(TimeArg::At(1_714_557_600_000))
        );
        assert_eq!(
            "2024-05-01T12:00:00.5+02:00".parse::<TimeArg>(),
            Ok(TimeArg::At(1_714_557_600_500))
        );
        assert_eq!(
            "2h".parse::<TimeArg>(),
            Ok(TimeArg::Ago(Duration::from_secs(7200)))
        );
        assert_eq!(
            "1h 30m".parse::<TimeArg>(),
            Ok(TimeArg::Ago(Duration::from_secs(5400)))
        );
        assert_eq!(
            TimeArg::Ago(Duration::from_secs(60)).resolve(100_000),
            40_000
        );
        assert_eq!(TimeArg::At(5).resolve(100_000), 5);
        for bad in ["yesterdayish", "", "2024-13-01T00:00:00Z", "-5m"] {
            let err = bad.parse::<TimeArg>().expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(err.contains("RFC 3339"), "{err}");
        }
    }

    #[test]
    fn reasons_must_say_something() {
        assert_eq!(
            non_empty_reason(" disk swapped "),
            Ok("disk swapped".into())
        );
        assert!(non_empty_reason("").is_err());
        assert!(non_empty_reason("  \t").is_err());
    }
}

/// A duration such as `90s`, `10m`, `1h 30m` or `500ms`.
fn duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{e}: expected a duration such as 30s, 10m, 1h30m or 500ms"))
}

fn positive_duration(value: &str) -> Result<Duration, String> {
    match duration(value)? {
        d if d.is_zero() => Err("expected a duration above zero, such as 30s".into()),
        d => Ok(d),
    }
}

fn concurrency(value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(k) if (1..=1000).contains(&k) => Ok(k),
        _ => Err("expected an integer 1..=1000".into()),
    }
}

fn exponent(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 1.0 => Ok(x),
        _ => Err("expected a number ≥ 1, such as 2 or 1.5".into()),
    }
}

/// An absolute host path such as `/run/reboot-needed`.
fn host_path(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err("expected an absolute path as seen on the host, such as /run/reboot-needed".into())
    }
}

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
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "5m")]
    pub reboot_sentinel_command_interval: Duration,
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
    /// A drain that takes longer fails: uncordon, release the slot, back off.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "10m")]
    pub drain_timeout: Duration,
    /// The same boot id this long after the reboot started means the reboot failed.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "15m")]
    pub reboot_timeout: Duration,
    /// How long the health command may keep failing before the node fails.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10m")]
    pub verify_timeout: Duration,
    /// Pause between health checks.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "5s")]
    pub health_interval: Duration,
    /// Once the node is healthy, keep its slot this long before handing it on; health checks
    /// go on meanwhile, and a failed one starts the delay again.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "0s")]
    pub release_delay: Duration,
    /// With --node-actions kube: also wait, before the slot goes back, until every
    /// PodDisruptionBudget in the cluster is satisfied again.
    #[arg(long)]
    pub health_pdbs: bool,
    /// A session not renewed for this long is expired and its writes are refused.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "30s")]
    pub session_ttl: Duration,
    /// Backoff after the first failure of a process on this node.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1m")]
    pub backoff_initial: Duration,
    /// The longest backoff.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1h")]
    pub backoff_max: Duration,
    /// Each further failure multiplies the backoff by this.
    #[arg(long, value_name = "X", value_parser = exponent, default_value = "2")]
    pub backoff_exponent: f64,
    /// Slow re-check of the sentinels in case an inotify event was missed.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "60s")]
    pub safety_recheck: Duration,
    /// How often to re-read the store for changes made by other processes (default 1s; 5m
    /// with --store kube, whose watch reports releases).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub store_poll: Option<Duration>,
    /// How the agent cordons, drains and uncordons its node.
    #[arg(long, value_enum, default_value = "command")]
    pub node_actions: NodeActionsKind,
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
    /// How often to look for new procedures, and in Kubernetes at the node's own RotaNode
    /// (default 5s; 1m with --store kube, where `rota request`, `rota mop submit`, `rota
    /// retry` and `rota unlock` wake the agents they concern at once).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub procedure_poll: Option<Duration>,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address, such as
    /// 127.0.0.1:9746 or 0.0.0.0:9746 (default: off).
    #[arg(long, value_name = "IP:PORT", env = "ROTA_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
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
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "1m")]
    pub blocker_interval: Duration,
}

/// One maintenance window; the error names the value and what is allowed.
fn window(value: &str) -> Result<MaintenanceWindow, String> {
    value.parse().map_err(|e: rota_core::WindowError| {
        format!(
            "{e}; the syntax is [DAYS] HH:MM[:SS]-HH:MM[:SS] [TIME ZONE], like \"mon-fri 22:00-04:00 Europe/Berlin\""
        )
    })
}

fn failure_budget(value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(f) if f >= 1 => Ok(f),
        _ => Err("expected a whole number of failed nodes ≥ 1, such as 1 or 3".into()),
    }
}

fn json_webhook(value: &str) -> Result<Webhook, String> {
    Webhook::json(value).map_err(|e| e.to_string())
}

fn slack_webhook(value: &str) -> Result<Webhook, String> {
    Webhook::slack(value).map_err(|e| e.to_string())
}

/// `EVENT=TEMPLATE`, such as `failed=:x: {node}: {cause}`.
fn notify_template(value: &str) -> Result<(EventKind, Template), String> {
    let Some((event, template)) = value.split_once('=') else {
        return Err(format!(
            "expected EVENT=TEMPLATE, such as failed=\"{{node}} failed: {{cause}}\", not {value:?}"
        ));
    };
    let event = event.parse::<EventKind>().map_err(|e| e.to_string())?;
    let template = template.parse::<Template>().map_err(|e| e.to_string())?;
    Ok((event, template))
}

impl AgentArgs {
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        self.node_labels.iter().cloned().collect()
    }
}

#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// How many nodes (each with its own real agent).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub nodes: u32,
    /// How many may be out at once.
    #[arg(long, value_name = "K", value_parser = concurrency)]
    pub concurrency: u32,
    /// How long a simulated reboot keeps a node down.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1s")]
    pub maintenance_time: Duration,
    /// The store to run against (default: SQLite in a temporary directory): sqlite://…,
    /// postgres://…, or kube (kwok nodes in a cluster, with real cordon, drain and uncordon).
    #[arg(long, value_name = "URL")]
    pub store: Option<StoreLocation>,
    /// With --store kube: the kubeconfig (default: in-cluster config, KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// With --store kube: the namespace to create for the run, deleted at the end; it must not
    /// exist (default: rota-simulate-<random>).
    #[arg(long, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Print one JSON object with the rollout's numbers instead of a summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum MopCommand {
    /// Record a procedure; every matching node's agent runs it once, in priority order, inside
    /// its next maintenance window. Procedures are immutable: the same spec again is a no-op,
    /// a changed one needs a new name.
    Submit(MopSubmitArgs),
    /// Show every procedure with its per-node counts.
    List(MopListArgs),
}

#[derive(Debug, Clone, Args)]
pub struct MopSubmitArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The procedure's name, a DNS-1123 label; its process is mop/<NAME>.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// 00..99; lower runs first and may overlap less important ones (design.md §5).
    #[arg(long, value_name = "PP", default_value = "99", value_parser = priority, allow_hyphen_values = true)]
    pub priority: Priority,
    /// The script, run with `sh -s` on the host (`-` reads stdin).
    #[arg(long, value_name = "FILE")]
    pub script: PathBuf,
    /// Only these nodes (comma-separated; default: every node).
    #[arg(long, value_name = "NODE,...", value_delimiter = ',')]
    pub nodes: Vec<NodeName>,
    /// Only nodes with this label (repeatable; all must match).
    #[arg(long = "selector", value_name = "KEY=VALUE", value_parser = label)]
    pub selector: Vec<(String, String)>,
    /// Reboot the node once after the window's procedures.
    #[arg(long)]
    pub reboot: bool,
    /// Run without cordoning and draining the node.
    #[arg(long)]
    pub no_drain: bool,
    /// A script running longer is stopped and fails.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "1h")]
    pub timeout: Duration,
    /// The script's sha256 (64 hex digits): agents refuse to run another script.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Never run beside another procedure on the node.
    #[arg(long)]
    pub exclusive: bool,
    /// Run again after an attempt that an agent restart interrupted (for idempotent scripts).
    #[arg(long)]
    pub retry: bool,
    /// Backoff after the first failure on a node.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1m")]
    pub backoff_initial: Duration,
    /// The longest backoff.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1h")]
    pub backoff_max: Duration,
    /// Each further failure multiplies the backoff by this.
    #[arg(long, value_name = "X", value_parser = exponent, default_value = "2")]
    pub backoff_exponent: f64,
}

#[derive(Debug, Clone, Args)]
pub struct MopListArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

fn priority(value: &str) -> Result<Priority, String> {
    value.parse::<Priority>().map_err(|e| e.to_string())
}

/// A `KEY=VALUE` label.
fn label(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((key, val)) if !key.is_empty() => Ok((key.to_string(), val.to_string())),
        _ => Err(format!(
            "expected KEY=VALUE, such as pool=gpu, not {value:?}"
        )),
    }
}

/// The labels of one `--cordon-label` or `--uncordon-label`.
#[derive(Debug, Clone)]
pub struct NodeLabelArg(pub Vec<(String, String)>);

/// Node labels as Kubernetes takes them: checked here, so that the API server never refuses
/// a drain's cordon for them.
fn node_labels(value: &str) -> Result<NodeLabelArg, String> {
    rota_drain::parse_labels(value)
        .map(NodeLabelArg)
        .map_err(|e| e.to_string())
}

/// A shell command that says something.
fn command_text(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Err(
            "the command is empty; give a shell command, such as \"! needs-restarting -r\"".into(),
        );
    }
    Ok(value.to_owned())
}

/// A taint's key, checked by the rules of label keys.
fn taint_key(value: &str) -> Result<String, String> {
    rota_drain::parse_taint_key(value).map_err(|e| e.to_string())
}

/// What `rota bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Slot acquire+release cycles, then history appends.
    All,
    /// Slot cycles: request, queue, wait for a slot, open the window, finish it.
    Slots,
    /// History appends: windows that fail closed and are retried.
    History,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The store to measure; it must hold no fleet's nodes (e.g. a new database).
    #[arg(long, value_name = "URL")]
    pub store: StoreUrl,
    /// Concurrent sessions (one node each).
    #[arg(long, value_name = "N", default_value = "32",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub sessions: usize,
    /// How long each workload runs.
    #[arg(long, value_name = "S", default_value = "10",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub seconds: u64,
    /// Which workload to run.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: Workload,
    /// Slots the sessions of the slot workload compete for.
    #[arg(long, value_name = "K", value_parser = concurrency, default_value = "4")]
    pub concurrency: u32,
    /// Store handles the sessions are spread over (as agents in separate processes would be).
    #[arg(long, value_name = "N", default_value = "1",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub handles: usize,
}

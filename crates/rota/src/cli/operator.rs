//! The operator commands' arguments: status, history, unlock, retry, request, cancel, pause
//! and resume.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rota_core::{HistoryEvent, NodeName, Process};

use super::parse::{TimeArg, non_empty_reason, positive_duration};
use super::{Format, StoreArgs};

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
pub struct PlanArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Also draw the forecast as a timeline (one lane per node: its wait, then its window,
    /// as `rota history --svg` draws what happened) into this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also write the forecast's timeline as a self-contained HTML page into this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this node's entries.
    #[arg(value_name = "NODE")]
    pub node: Option<NodeName>,
    /// Only entries of this process: reboot, maintenance, fleetlock or mop/<name>.
    #[arg(long, value_name = "PROCESS")]
    pub process: Option<Process>,
    /// Only entries of this event: started, finished, failed, canceled, released or postponed
    /// (the operators' audit records are then left out).
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
    /// Also draw the entries as a rollout timeline (one lane per node, a strip of the slots in
    /// use, failures and postponements with their causes) into this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also write the timeline as a self-contained HTML page (the SVG inline, then a table of
    /// every window with its duration and of every failure, cancellation and postponement
    /// with its cause) into this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Show each node's steps instead of the entries: every state it entered (queued, draining,
    /// maintaining, rebooting, verifying, failed, idle), when, and how long it stayed; each
    /// procedure's run inside its node's maintenance; then where the time went: wait, drain,
    /// maintenance, reboot and verify as p50 and p99 across the nodes, with the slowest ones.
    ///
    /// With `-o json`: `{"steps": [...], "procedures": [...], "summary": [...]}`. Only --since, --until and NODE
    /// filter steps. Steps are kept for about as many windows as the history (the last 500
    /// per node in the SQL stores, the last --kept-windows windows in Kubernetes).
    #[arg(long)]
    pub steps: bool,
}

#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The node to unlock.
    #[arg(value_name = "NODE")]
    pub node: NodeName,
    /// Why (required): recorded in the node's history with the cancellation, and with who did
    /// it in the audit trail that `rota history` shows.
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
    /// Why: recorded with who did it in the audit trail that `rota history` shows.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: Option<String>,
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
    /// Why (required): shown by `rota status` while the pause lasts, and recorded with who
    /// did it in the audit trail that `rota history` shows.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: String,
}

#[derive(Debug, Clone, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Why: recorded with who did it in the audit trail that `rota history` shows.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The failed node to retry.
    #[arg(value_name = "NODE")]
    pub node: NodeName,
    /// Why: recorded with who did it in the audit trail that `rota history` shows.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: Option<String>,
}

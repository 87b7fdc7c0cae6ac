//! The command line: clap types only. Each subcommand's behaviour lives in its own module.
//!
//! [`Command`] is one enum of subcommands, each with its own `Args` struct, so that further
//! subcommands (`agent`, `simulate`) are added as one variant and one module each. Commands that
//! talk to the store flatten [`StoreArgs`].
//!
//! - `agent`: `rota agent`'s arguments, in groups (sentinels, node commands, timing, the
//!   Kubernetes drain, notifications, blockers);
//! - `backoff`: the backoff flags that `rota agent` and `rota mop submit` share;
//! - `operator`: status, history, unlock, retry, request, cancel, pause, resume;
//! - `mop`, `simulate`, `bench`, `fleetlock`: those commands' arguments;
//! - `parse`: the value parsers, whose errors name the value and what is allowed.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::store::StoreLocation;

mod agent;
mod backoff;
mod bench;
pub mod fleetlock;
mod kube_drain;
mod mop;
mod operator;
pub(crate) mod parse;
pub mod scheduler;
mod simulate;

pub use agent::{AgentArgs, RebootMethod};
pub use backoff::BackoffArgs;
pub use bench::{BenchArgs, Workload};
pub use fleetlock::FleetlockArgs;
pub use kube_drain::KubeDrainArgs;
pub use mop::{MopCommand, MopListArgs, MopSubmitArgs};
pub use operator::{
    HistoryArgs, PauseArgs, PlanArgs, RequestArgs, ResumeArgs, RetryArgs, StatusArgs, UnlockArgs,
};
pub use parse::NodeLabelArg;
pub use scheduler::SchedulerArgs;
pub use simulate::SimulateArgs;

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
    /// How log lines on stderr look: text for people, json (one object a line) for log collectors.
    ///
    /// A JSON line holds timestamp, level, message, the event's fields and target.
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
    /// Run the scheduler of a Kubernetes installation: the elected leader among its replicas
    /// grants the slots to the queued nodes, in queue order.
    Scheduler(SchedulerArgs),
    /// Serve FleetLock, the reboot lock protocol of Fedora CoreOS's Zincati: hosts that ask to
    /// reboot take their turns like nodes with an agent (queue, slot, drain, verify).
    Fleetlock(Box<FleetlockArgs>),
    /// Run N real agents in this process against a real store, with simulated reboots, and
    /// report how the rollout went.
    Simulate(SimulateArgs),
    /// Show every node: state, slot, process, queue, backoff, last result.
    Status(StatusArgs),
    /// Forecast the turns to come, writing nothing: the order the waiting nodes take their
    /// windows in, about when each starts and ends, and the nodes held back now.
    Plan(PlanArgs),
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
    /// Windows already open go on to their end.
    Pause(PauseArgs),
    /// Lift the fleet's pause.
    Resume(ResumeArgs),
    /// Maintenance procedures (MOPs): submit one to run once on every matching node, list them.
    #[command(subcommand)]
    Mop(MopCommand),
    /// Measure a store's throughput with many concurrent sessions, and count afterwards that no
    /// slot was granted twice and no history row was lost; or (--workload fleetlock) a FleetLock
    /// server's answers to many hosts. Needs a store of its own.
    Bench(BenchArgs),
}

impl Command {
    /// The log level used when `RUST_LOG` is not set: operator commands log only warnings, so
    /// their stderr stays quiet.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Command::Agent(_) | Command::Scheduler(_) | Command::Fleetlock(_) => "info",
            Command::Simulate(_)
            | Command::Status(_)
            | Command::Plan(_)
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
    /// With --store kube (and, for rota agent, --node-actions kube): the kubeconfig (default:
    /// in-cluster config, KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// With --store kube: the namespace of the slot Leases (rota-slot-0, rota-slot-1, …) and of
    /// rota's configuration (the ConfigMap rota-config).
    #[arg(
        long,
        value_name = "NAME",
        env = "ROTA_NAMESPACE",
        default_value = "rota-system"
    )]
    pub namespace: String,
    /// With --store kube: how many ended maintenance windows each node keeps as RotaWindow
    /// objects (the oldest are deleted).
    #[arg(
        long,
        value_name = "N",
        env = "ROTA_KEPT_WINDOWS",
        default_value = "20",
        value_parser = clap::value_parser!(u16).range(1..=1000)
    )]
    pub kept_windows: u16,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}

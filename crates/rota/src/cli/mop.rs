//! `rota mop`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use rota_core::{NodeName, Priority};

use super::parse::{label, non_empty_reason, positive_duration, priority};
use super::{BackoffArgs, Format, StoreArgs};

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
    /// 00..99; lower runs first and may overlap less important ones (docs/design.md §5).
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
    #[command(flatten)]
    pub backoff: BackoffArgs,
    /// Why: recorded with who submitted it in the audit trail that `rota history` shows.
    #[arg(long, value_name = "TEXT", value_parser = non_empty_reason)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct MopListArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

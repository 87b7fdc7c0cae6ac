//! `rota`: the command-line tool. Thin: parse, set up logging and the runtime, dispatch to one
//! module per concern, and turn every error into one `error: ...` line on stderr.

mod agent;
mod audit;
mod bench;
mod cli;
mod fleetlock;
mod history;
mod kube_drain;
mod mop;
mod notify;
mod operator;
mod output;
mod plan;
#[cfg(test)]
mod reference;
mod report_file;
mod scheduler;
mod signals;
mod simulate;
mod status;
mod steps;
mod store;
mod systemd;
mod watch;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use clap::error::ErrorKind;
use rota_store::Store;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, LogFormat, StoreArgs};

/// Exit status for a command that failed.
const EXIT_FAILURE: u8 = 1;
/// Exit status for invalid usage (clap's convention).
const EXIT_USAGE: u8 = 2;

/// The name under which kubectl finds rota as its plugin (`kubectl rota …`).
const KUBECTL_PLUGIN: &str = "kubectl-rota";

/// The command line, with `--store kube` added when rota runs as kubectl's plugin and no store
/// was named (neither `--store` nor `ROTA_STORE`): as a plugin it talks to the cluster kubectl
/// talks to.
fn arguments() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let plugin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == KUBECTL_PLUGIN);
    let named = args
        .iter()
        .any(|a| a == "--store" || a.to_string_lossy().starts_with("--store="))
        || std::env::var_os("ROTA_STORE").is_some();
    let takes_a_store = args.get(1).is_some_and(|command| command != "bench");
    if plugin && !named && takes_a_store {
        args.push("--store".into());
        args.push("kube".into());
    }
    args
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(arguments()) {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    init_tracing(cli.command.default_log_level(), cli.log_format);
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| runtime.block_on(run(cli.command)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", output::one_line(&chain(&err)));
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn run(command: Command) -> Result<()> {
    match command {
        Command::Agent(args) => agent::run(*args).await,
        Command::Scheduler(args) => scheduler::run(args).await,
        Command::Fleetlock(args) => fleetlock::run(*args).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Status(args) if args.watch => watch::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Plan(args) => plan::run(args).await,
        Command::History(args) => history::run(args).await,
        Command::Unlock(args) => operator::unlock(args).await,
        Command::Retry(args) => operator::retry(args).await,
        Command::Request(args) => operator::request(args).await,
        Command::Cancel(args) => operator::cancel(args).await,
        Command::Pause(args) => operator::pause(args).await,
        Command::Resume(args) => operator::resume(args).await,
        Command::Mop(command) => mop::run(command).await,
        Command::Bench(args) => bench::run(args).await,
    }
}

/// Opens the store an operator command reads or changes (never creating a new one).
pub async fn open_store(args: &StoreArgs) -> Result<Arc<dyn Store>> {
    store::open(args, false).await
}

/// The error and its causes, leaving out a cause whose text the message already contains
/// (library errors often quote their source in their own message).
fn chain(err: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !message.contains(&text) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&text);
        }
    }
    message
}

/// Help and version go to stdout with status 0; usage errors become one `error: ...` line.
fn usage_error(err: &clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Printing help can only fail on a closed stdout; there is nothing left to report.
            let _ = err.print();
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // clap renders "error: ...", then a blank line and hints; keep the first paragraph.
            let rendered = err.render().to_string();
            let first = rendered.split("\n\n").next().unwrap_or_default();
            let message = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("error: {}", output::one_line(message));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Logs to stderr; `RUST_LOG` overrides the command's default level.
fn init_tracing(default_level: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Either fails only when a subscriber is already set, which then keeps logging.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        // Fields at the top level, as log collectors index them; no colour codes.
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_become_one_line() {
        assert_eq!(
            output::one_line(
                "the following required arguments were not provided:\n  --reason <TEXT>\n"
            ),
            "the following required arguments were not provided: --reason <TEXT>"
        );
    }
}

//! `rota agent`: one node's agent, with shell commands as its node actions.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rota_agent::{Agent, AgentConfig, CommandActions};
use rota_core::BackoffPolicy;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::AgentArgs;

fn config(args: AgentArgs) -> AgentConfig {
    let mut config = AgentConfig::new(args.node);
    config.host_root = args.host_root;
    config.reboot_sentinels = args.reboot_sentinels;
    config.maintenance_required = args.maintenance_sentinel;
    config.maintenance_in_progress = args.maintenance_in_progress;
    config.boot_id_file = args.boot_id_file;
    config.concurrency = args.concurrency;
    config.drain_timeout = args.drain_timeout;
    config.reboot_timeout = args.reboot_timeout;
    config.verify_timeout = args.verify_timeout;
    config.health_interval = args.health_interval;
    config.session_ttl = args.session_ttl;
    config.backoff = BackoffPolicy {
        initial: args.backoff_initial,
        maximum: args.backoff_max,
        exponent: args.backoff_exponent,
    };
    config.safety_recheck = args.safety_recheck;
    config.store_poll = args.store_poll;
    config
}

/// Cancels `cancel` on SIGTERM or SIGINT: the agent stops between steps and keeps its state.
fn stop_on_signals(cancel: CancellationToken) -> Result<()> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: shutting down"),
            _ = int.recv() => info!("SIGINT: shutting down"),
        }
        cancel.cancel();
    });
    Ok(())
}

pub async fn run(args: AgentArgs) -> Result<()> {
    if !args.host_root.is_dir() {
        bail!(
            "--host-root {}: not a directory (give where the host's filesystem is mounted)",
            args.host_root.display()
        );
    }
    let actions = CommandActions {
        node: Some(args.node.clone()),
        drain: args.drain_command.clone().filter(|c| !c.trim().is_empty()),
        uncordon: args
            .uncordon_command
            .clone()
            .filter(|c| !c.trim().is_empty()),
        reboot: Some(args.reboot_command.clone()).filter(|c| !c.trim().is_empty()),
        health: args.health_command.clone().filter(|c| !c.trim().is_empty()),
    };
    let store = args
        .store
        .store
        .open()
        .await
        .with_context(|| format!("opening the store {}", args.store.store))?;
    let cancel = CancellationToken::new();
    stop_on_signals(cancel.clone())?;
    let agent = Agent::new(config(args), store, Arc::new(actions), cancel);
    agent.run().await?;
    Ok(())
}

//! `rota scheduler`: the leader-elected scheduler of a Kubernetes installation
//! (rota-scheduler), until SIGTERM.

use anyhow::{Result, bail};
use rota_scheduler::SchedulerConfig;
use tokio_util::sync::CancellationToken;

use crate::cli::scheduler::SchedulerArgs;

pub async fn run(args: SchedulerArgs) -> Result<()> {
    if args.lease_duration.as_secs() < 3 {
        bail!(
            "--lease-duration {:?}: expected at least 3s (the leader renews every third of it)",
            args.lease_duration
        );
    }
    if args.take_up.is_zero() {
        bail!(
            "--take-up 0s: expected a duration above zero (the time an agent has to take its grant up)"
        );
    }
    let identity = match args.identity {
        Some(identity) if !identity.is_empty() => identity,
        _ => hostname(),
    };
    let client = crate::store::client(args.kubeconfig.as_ref()).await?;
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone())?;
    let config = SchedulerConfig {
        lease_duration: args.lease_duration,
        take_up: args.take_up,
        ..SchedulerConfig::new(args.namespace, identity)
    };
    rota_scheduler::run(client, config, cancel).await;
    Ok(())
}

/// The host's name (a Pod's name in a cluster), or `rota-scheduler`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "rota-scheduler".into())
}

//! Graceful shutdown of the long-running commands on SIGTERM (systemd, the kubelet) and SIGINT
//! (Ctrl-C).

use anyhow::{Context, Result};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Cancels `cancel` on the first SIGTERM or SIGINT.
pub fn cancel_on_signals(cancel: CancellationToken) -> Result<()> {
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

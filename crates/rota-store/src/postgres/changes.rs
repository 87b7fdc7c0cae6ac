//! Waking waiters on every host: `NOTIFY rota_changes` inside every wake-worthy write, and
//! the LISTEN loop that moves each handle's change counter.

use std::sync::Arc;

use sqlx::{Postgres, Transaction};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::PostgresStore;
use super::connections::{Connections, Heard};
use crate::error::{Context, Result};
use crate::retry_pauses::RetryPauses;
use crate::store::WAKE_ALL;

/// How far an operator's request, cancel or new procedure moves every agent's counter. Such a
/// change lets no waiter go on, but an idle agent would otherwise find it only at its next
/// `--store-poll` or `--procedure-poll`: it wakes every agent, which re-reads its node and
/// lists the procedures.
pub(super) const OPERATOR_WAKES: u64 = WAKE_ALL;

/// The channel every wake-worthy write notifies; the payload is `ORIGIN:WAKES`.
pub(super) const CHANNEL: &str = "rota_changes";

impl PostgresStore {
    /// Notifies every listener of `wakes` inside the transaction (delivered only if it commits),
    /// commits, and counts the wakes for this handle's own waiters.
    pub(super) async fn commit(
        &self,
        mut tx: Transaction<'_, Postgres>,
        wakes: u64,
        context: &'static str,
    ) -> Result<()> {
        if let Some(payload) = self.payload(wakes) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload)
                .execute(&mut *tx)
                .await
                .context(context)?;
        }
        tx.commit().await.context(context)?;
        self.woke(wakes);
        Ok(())
    }

    /// The notification of `wakes` from this handle, if any.
    pub(super) fn payload(&self, wakes: u64) -> Option<String> {
        (wakes > 0).then(|| format!("{}:{wakes}", self.origin))
    }

    pub(super) fn woke(&self, wakes: u64) {
        if wakes > 0 {
            self.changes.send_modify(|n| *n = n.wrapping_add(wakes));
        }
    }
}

/// Moves the change counter by every other handle's notifications. Notifications sent while
/// the connection was down are lost, so a connection opened again wakes every waiter to re-read
/// the store (see [`Connections`]).
pub(super) async fn follow_changes(
    connections: Arc<Connections>,
    origin: u64,
    changes: Arc<watch::Sender<u64>>,
) {
    let mut pauses = RetryPauses::new();
    loop {
        match connections.hear().await {
            Heard::Notification(notification) => {
                pauses.reset();
                let payload = notification.payload();
                let parsed = payload.split_once(':').and_then(|(from, wakes)| {
                    Some((from.parse::<u64>().ok()?, wakes.parse().ok()?))
                });
                match parsed {
                    Some((from, _)) if from == origin => {}
                    Some((_, wakes)) => changes.send_modify(|n| *n = n.wrapping_add(wakes)),
                    None => debug!(payload, "ignoring a malformed change notification"),
                }
            }
            Heard::HandedOver => pauses.reset(),
            Heard::Lost(error) => {
                warn!(
                    error = error.map(|e| e.to_string()),
                    "the change listener lost its connection; opening another"
                );
            }
            Heard::Unavailable(e) => {
                let pause = pauses.next_pause();
                warn!(error = %e, pause = ?pause, "the change listener cannot reconnect; retrying");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

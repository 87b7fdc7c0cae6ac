//! Waiting between the agent's passes: for a change in the store, a sentinel, a procedure's exit or a
//! deadline, and the pauses while the store is out of reach.

use std::time::Duration;

use rota_store::WAKE_ALL;
use tokio::time::Instant;
use tracing::warn;

use super::{Agent, RETRY_PAUSE, Running};
use crate::error::{Error, Result};

impl Agent {
    /// Reports a store that cannot be reached for now; the caller tries again after `pause`.
    pub(super) fn unavailable(&self, e: &rota_store::Error, pause: Duration) {
        let cause = e.to_string();
        self.tell(|o| {
            o.store_access(false);
            o.store_unavailable(&cause);
        });
        warn!(node = %self.config.node, error = %e, pause = ?pause, "the store is unavailable; retrying");
    }

    pub(super) async fn pause(&self, running: &mut Running) -> Result<()> {
        self.wait(running, Some(Instant::now() + RETRY_PAUSE), None)
            .await
    }

    /// Waits before asking a store that is unavailable again, longer after each failure in a row.
    /// Only shutdown ends the pause early: a wake (a sentinel's events, a change the handle's
    /// watches report as they list again) would only send the next refused request at once,
    /// and a burst of them is the retry storm the pauses are there to prevent (test
    /// three_agents_ask_an_api_server_that_rejects_them_less_and_less_often). What woke it is
    /// still there after the pause.
    pub(super) async fn pause_unavailable(
        &self,
        running: &mut Running,
        e: &rota_store::Error,
    ) -> Result<()> {
        let pause = running.unavailable.next_pause();
        self.unavailable(e, pause);
        tokio::select! {
            () = running.cancel.cancelled() => {}
            () = tokio::time::sleep(pause) => {}
        }
        Ok(())
    }

    /// Waits for anything that may change what the next pass does: a sentinel, the deadline,
    /// the store re-read (slow for an idle node), shutdown, and the store's change counter reaching
    /// `store_changes`, or without it, jumping by [`WAKE_ALL`] since the node was read.
    pub(super) async fn wait(
        &self,
        running: &mut Running,
        until: Option<Instant>,
        store_changes: Option<u64>,
    ) -> Result<()> {
        running.fenced = None;
        running.health_ahead = None;
        // A look at the procedures already due ends no wait: the idle and queued handlers look
        // before they wait, so it is due only when a handler failed before its look, or in a state
        // that never looks. A wait ended by it would end at once, again and again: after a
        // failure, a retry storm instead of a pause (test
        // three_agents_ask_an_api_server_that_rejects_them_less_and_less_often).
        let now = Instant::now();
        let procedures = running
            .procedures_due
            .filter(|due| *due > now)
            .unwrap_or_else(|| now + self.config.procedure_poll);
        // An idle node waits for a request, and every way one comes wakes it (a sentinel, an
        // operator's command, a new procedure): it re-reads the store only with the procedures'
        // slow safety poll. A node with work also re-reads for what no write announces.
        let poll = if running.idle {
            procedures
        } else {
            procedures.min(Instant::now() + self.config.store_poll)
        };
        let until = until.map_or(poll, |u| u.min(poll));
        let exits = running.procedure_exits.clone();
        let cancel = running.cancel.clone();
        let target =
            store_changes.unwrap_or_else(|| running.changes_at_read.saturating_add(WAKE_ALL));
        let changes = &mut running.changes;
        let store_changed = async move {
            if changes.wait_for(|n| *n >= target).await.is_err() {
                // A store whose counter is gone wakes nobody again.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = cancel.cancelled() => Ok(()),
            changed = running.sentinels.changed() => {
                running.sentinels_dirty = true;
                // The watcher ends with the agent's token; only an early end is an error.
                if changed.is_err() && !self.cancel.is_cancelled() {
                    return Err(Error::WatcherStopped {
                        node: self.config.node.clone(),
                    });
                }
                Ok(())
            }
            () = store_changed => Ok(()),
            () = exits.notified() => Ok(()),
            () = tokio::time::sleep_until(until) => Ok(()),
        }
    }
}

//! The state handlers: one module per lifecycle state, each doing the next thing its state
//! calls for, from the node's persisted record.

use rota_core::{Event, Failure, NodeState};
use rota_store::{NodeRecord, StoreExt, WAKE_ALL};
use tracing::{info, warn};

use super::{Agent, Running};
use crate::error::{Error, Result};

mod draining;
mod idle;
mod maintaining;
mod queued;
mod rebooting;
mod verifying;

impl Agent {
    /// Reads the node's record and runs its state's handler, over and over, until the
    /// incarnation ends.
    pub(super) async fn run_handlers(&self, running: &mut Running) -> Result<()> {
        while !running.cancel.is_cancelled() {
            let changes = *running.changes.borrow();
            if changes >= running.changes_at_read.saturating_add(WAKE_ALL) {
                // Everyone looks again, also for procedures: a new one may be what woke us.
                running.procedures_due = None;
            }
            running.changes_at_read = changes;
            running.idle = false;
            let record = match self.store.node(&self.config.node).await {
                Ok(record) => record.ok_or_else(|| rota_store::Error::NoSuchNode {
                    node: self.config.node.clone(),
                })?,
                Err(e) if e.is_unavailable() => {
                    self.pause_unavailable(running, &e).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            self.tell(|o| {
                o.store_access(true);
                o.record(&record);
            });
            self.mark_window(running, &record);
            // The node's read may come from the store's memory (Kubernetes): only a handler
            // that went through shows the store answers again.
            match self.handle(running, &record).await {
                Ok(()) => {
                    running.unavailable.reset();
                    if record.state != NodeState::Failed {
                        self.tell(|o| o.host_error(None));
                    }
                }
                Err(e @ Error::HostFile { .. }) => self.host_failed(running, &record, &e).await?,
                Err(Error::Store(e)) if e.is_unavailable() => {
                    self.pause_unavailable(running, &e).await?;
                }
                Err(Error::Store(rota_store::Error::Refused(
                    rota_core::RecordError::Conflict { .. },
                ))) => {
                    info!(node = %self.config.node, "state changed under this agent; re-reading");
                }
                Err(Error::Store(rota_store::Error::Fenced { .. })) => {
                    // The slot or the session is gone: disrupt nothing more, re-read.
                    warn!(node = %self.config.node, "fenced: this agent no longer holds the node's slot or session");
                    self.pause(running).await?;
                }
                Err(Error::Store(e)) => {
                    self.tell(|o| o.store_access(false));
                    warn!(node = %self.config.node, error = %e, "store error; retrying");
                    self.pause(running).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A handler that could not read or write the host's files (a missing directory, a
    /// read-only or full filesystem). Inside maintenance the window fails closed with that cause
    /// in history: the node keeps its slot and cordon, as after a failed script. Elsewhere the
    /// handler runs again after a pause. The agent stays up either way, and `/readyz` names the
    /// cause until a handler succeeds outside `failed`.
    async fn host_failed(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        error: &Error,
    ) -> Result<()> {
        let cause = error.to_string();
        self.tell(|o| o.host_error(Some(&cause)));
        if record.state == NodeState::Maintaining {
            warn!(node = %self.config.node, cause, "an access to the host's files failed; the window fails closed");
            let failed = Event::WorkFailed(Failure::new(cause, self.config.backoff));
            self.commit(running, record, failed).await?;
            return Ok(());
        }
        warn!(node = %self.config.node, state = %record.state, cause, "an access to the host's files failed; trying again");
        self.pause(running).await
    }

    /// Runs the handler of the record's state, after what the states share: the busy session's
    /// renewal (outside idle), the pending mark, and a stale block cleared instead.
    async fn handle(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if record.state != NodeState::Idle {
            // An operator's command may have queued the node while its session ran long.
            self.renew_busy(running).await?;
        }
        self.mark_pending(running, record).await;
        if record.blocked.is_some()
            && !matches!(record.state, NodeState::Queued | NodeState::Maintaining)
        {
            // Blocks are asked about only in those two states: one left behind is stale.
            self.tell(|o| o.blocked(None));
            return self.unblock(running, record).await;
        }
        match record.state {
            NodeState::Idle => self.idle(running, record).await,
            NodeState::Queued => self.queued(running, record).await,
            NodeState::Draining => self.draining(running, record).await,
            NodeState::Maintaining => self.maintaining(running, record).await,
            NodeState::Rebooting => self.rebooting(running, record).await,
            NodeState::Verifying => self.verifying(running, record).await,
            NodeState::Failed => {
                // Fail closed: keep slot and cordon until an operator retries or unlocks.
                self.wait(running, None, None).await
            }
        }
    }
}

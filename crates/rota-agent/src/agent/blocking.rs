//! The blockers (pause, pods, annotations, Prometheus alerts) asked before the slot and again
//! right before the reboot, and the store's record of what blocks the node.

use rota_blockers::{Block, BlockKind};
use rota_core::NodeState;
use rota_store::{Blocked, NodeRecord, Pause, StoreExt, now_millis};
use tokio::time::Instant;
use tracing::info;

use super::{Agent, Checked, Running};
use crate::error::Result;

impl Agent {
    /// Whether anything holds the node back before it is disrupted: the fleet's `pause` (as the
    /// caller just read it) or a blocker. If so, records the reasons (a write only when they change, logged once each
    /// time), and waits for the next check: `blocker_interval`, or a store change (a resume).
    /// If not, clears a recorded reason first, so that the node holds the queue again.
    pub(super) async fn blocked(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        seen: u64,
        pause: Option<Pause>,
    ) -> Result<bool> {
        let mut blocks = Vec::new();
        if let Some(pause) = pause {
            blocks.push(Block {
                kind: BlockKind::Paused,
                reason: format!("the fleet is paused: {}", pause.reason),
            });
        }
        blocks.extend(self.ask_blockers(running, record.state).await);
        let Some(first) = blocks.first() else {
            self.tell(|o| o.blocked(None));
            self.unblock(running, record).await?;
            return Ok(false);
        };
        let block = Block {
            kind: first.kind,
            reason: blocks
                .iter()
                .map(|b| b.reason.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        };
        self.tell(|o| o.blocked(Some(&block)));
        if record.blocked.as_ref().map(|b| &b.reason) != Some(&block.reason) {
            let blocked = Blocked {
                reason: block.reason.clone(),
                since: now_millis(),
            };
            self.store
                .set_blocked(&running.session, Some(&blocked))
                .await?;
            info!(node = %self.config.node, state = %record.state, kind = block.kind.as_str(), reason = block.reason, "blocked; waiting");
        }
        let next = running.checked.as_ref().map_or_else(Instant::now, |c| c.at)
            + self.config.blocker_interval;
        self.wait(running, Some(next), Some(seen.saturating_add(1)))
            .await?;
        Ok(true)
    }

    /// The blockers' answer: asked again after `blocker_interval` or in another state, else
    /// the last one (the handlers run far more often than blockers need asking).
    pub(super) async fn ask_blockers(&self, running: &mut Running, state: NodeState) -> Vec<Block> {
        if let Some(checked) = &running.checked
            && checked.state == state
            && checked.at.elapsed() < self.config.blocker_interval
        {
            return checked.blocks.clone();
        }
        let answers =
            futures::future::join_all(self.blockers.iter().map(|blocker| blocker.blocks())).await;
        let blocks: Vec<Block> = answers.into_iter().flatten().collect();
        running.checked = Some(Checked {
            at: Instant::now(),
            state,
            blocks: blocks.clone(),
        });
        blocks
    }

    /// Clears the node's recorded blocked reason, if it has one.
    pub(super) async fn unblock(&self, running: &Running, record: &NodeRecord) -> Result<()> {
        if record.blocked.is_some() {
            self.store.set_blocked(&running.session, None).await?;
            info!(node = %self.config.node, state = %record.state, "no longer blocked");
        }
        Ok(())
    }
}

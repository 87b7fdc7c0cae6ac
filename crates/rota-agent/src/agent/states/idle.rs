//! `idle`: wait for a request; record one as it arrives.

use rota_core::{Event, NodeState, Process};
use rota_store::{NodeRecord, Transition};
use tracing::{info, warn};

use crate::agent::{Agent, Running};
use crate::error::Result;

impl Agent {
    pub(super) async fn idle(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if record.cordoned_by_rota {
            // An operator unlocked the node mid-window: undo our cordon.
            if let Err(e) = self.actions.uncordon().await {
                warn!(node = %self.config.node, error = %e, "uncordon after unlock failed");
                return self.pause(running).await;
            }
            self.write(
                running,
                Transition::new(NodeState::Idle, NodeState::Idle),
                false,
            )
            .await?;
            return Ok(());
        }
        // New sentinels' requests are recorded by the write that queues the node: one write
        // per node when a whole fleet finds its sentinels at once.
        let (open, new) = self.read_requests(running, record).await?;
        self.tell(|o| o.requests(&open));
        if open.is_empty() && new.is_empty() {
            running.sentinels_dirty = false;
            running.idle = true;
            running.renewal.set_idle(true);
            return self.wait(running, None, None).await;
        }
        self.renew_busy(running).await?;
        let processes: Vec<&Process> = open
            .iter()
            .map(|r| &r.process)
            .chain(new.iter().map(|(process, _)| process))
            .collect();
        let queued_at = self.eligible_at(&processes).await?;
        let requested = Event::Requested {
            eligible_at: queued_at,
        };
        let group = self.group().await;
        self.commit_with(running, record, requested, |queue| {
            for (process, source) in &new {
                queue.requests.push((process.clone(), source.clone()));
            }
            queue.fields.group = group;
        })
        .await?;
        for (process, source) in &new {
            info!(node = %self.config.node, %process, source, "request recorded");
        }
        // Only now: a failed write above leaves the flag set, so the next pass tries again.
        running.sentinels_dirty = false;
        Ok(())
    }
}

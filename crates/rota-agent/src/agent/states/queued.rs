//! `queued`: wait for the node's turn and a free slot, then take it.

use rota_core::{Event, NodeState, Process};
use rota_store::{Acquire, NodeRecord, RequestState, Transition, WindowChange, now_millis};
use tracing::warn;

use crate::agent::{Agent, Running, drained, instant_at, needs_drain};
use crate::error::Result;

impl Agent {
    pub(super) async fn queued(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let open = self.sync_requests(running, record).await?;
        if open.is_empty() {
            // A slot taken just before a restart, for requests withdrawn since, goes back.
            let canceled = Event::Canceled {
                granted: record.slot.is_some(),
            };
            self.commit(running, record, canceled).await?;
            return Ok(());
        }
        let Some(queued_at) = record.queued_at else {
            let processes: Vec<&Process> = open.iter().map(|r| &r.process).collect();
            let queued_at = self.eligible_at(&processes).await?;
            self.write(
                running,
                Transition::new(NodeState::Queued, NodeState::Queued).window(WindowChange::Queue {
                    queued_at: Some(queued_at),
                }),
                false,
            )
            .await?;
            return Ok(());
        };
        if queued_at > now_millis() {
            return self.wait(running, Some(instant_at(queued_at)), None).await;
        }
        if !self.within_hours(running) {
            if record.slot.is_some() {
                // Granted just before a restart, never cordoned: the slot goes back at once.
                return self.postpone_grant(running).await;
            }
            return self.wait_for_hours(running, record).await;
        }
        // Read the counter before asking: a change in between then wakes this waiter at once.
        let seen = *running.changes.borrow_and_update();
        // A failure budget that is used up pauses the fleet; a blocked node (a paused fleet
        // included) takes no slot, so the blockers are asked first.
        let pause = self.enforce_failure_budget().await?;
        if self.blocked(running, record, seen, pause).await? {
            return Ok(());
        }
        // When the turn may have come (the changes the last answer named have happened), the
        // cordon is read along with the request for a slot, so that a grant goes on to open the
        // window without another round trip; a node's first ask after it queued, and a waiter
        // woken for anything else (a timer), read it only after a grant: when a fleet queues at
        // once, most of them are told to wait.
        let acquire = self.store.try_acquire_slot(&running.session);
        let (acquired, cordoned) = if running.turn_at.is_some_and(|turn| seen >= turn) {
            let (acquired, cordoned) = tokio::join!(acquire, self.actions.is_cordoned());
            (acquired?, Some(cordoned))
        } else {
            (acquire.await?, None)
        };
        if let Acquire::Wait { changes } = acquired {
            let target = seen.saturating_add(changes);
            running.turn_at = Some(target);
            return self.wait(running, None, Some(target)).await;
        }
        running.turn_at = None;
        let cordoned = match cordoned {
            Some(cordoned) => cordoned,
            None => self.actions.is_cordoned().await,
        };
        let pre_cordoned = match cordoned {
            Ok(cordoned) => cordoned,
            Err(e) => {
                warn!(node = %self.config.node, error = %e, "cannot tell whether the node is cordoned");
                return self.pause(running).await;
            }
        };
        let process = open.first().map(|r| r.process.clone());
        self.commit_fenced(
            running,
            record,
            Event::SlotAcquired { pre_cordoned },
            |open| open.process = process,
        )
        .await?;
        Ok(())
    }

    /// Lets requests that arrived during the window join it (one drain serves them all).
    pub(super) async fn join_pending(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<NodeRecord> {
        let open = self.sync_requests(running, record).await?;
        // Outside the maintenance hours, new work waits for the next window.
        if !open.iter().any(|r| r.state == RequestState::Pending) || !self.within_hours(running) {
            return Ok(record.clone());
        }
        if record.state != NodeState::Draining && !drained(record) {
            // The window skipped the drain: work that needs one waits for the next window.
            let procedures = self.procedure_map().await?;
            if open
                .iter()
                .any(|r| r.state == RequestState::Pending && needs_drain(r, &procedures))
            {
                return Ok(record.clone());
            }
        }
        self.commit(running, record, Event::Joined).await
    }
}

//! Maintenance hours, checked before the slot, the drain, each procedure and the reboot: any of
//! them that would start outside the hours is postponed until they start again, without backoff.

use jiff::Timestamp;
use rota_core::{Event, NodeState};
use rota_store::{Millis, NodeRecord, Transition, WindowChange, now_millis};
use tracing::info;

use super::{Agent, Running, instant_at};
use crate::error::Result;

/// An instant in store time as the maintenance hours see it.
pub(super) fn timestamp(at: Millis) -> Timestamp {
    Timestamp::from_millisecond(at).unwrap_or(Timestamp::MAX)
}

impl Agent {
    /// Whether now is within the maintenance hours (always, without configured hours). Tells
    /// the observers each time, and logs only when the answer changes.
    pub(super) fn within_hours(&self, running: &mut Running) -> bool {
        let Some(hours) = &self.config.hours else {
            self.tell(|o| o.within_hours(true));
            return true;
        };
        let now = timestamp(now_millis());
        let within = hours.contains(now);
        if running.within_hours_seen != Some(within) {
            if within {
                let ends_at = hours.ends_at(now).map(|t| t.to_string());
                info!(node = %self.config.node, ends_at, "within the maintenance hours");
            } else {
                let next_start = hours.next_start(now).map(|t| t.to_string());
                info!(node = %self.config.node, next_start, "outside the maintenance hours");
            }
            running.within_hours_seen = Some(within);
        }
        self.tell(|o| o.within_hours(within));
        within
    }

    /// When the maintenance hours next start, in store time; `None` without configured hours
    /// or when they start past the end of time.
    fn next_hours(&self, after: Millis) -> Option<Millis> {
        self.config.hours.as_ref()?.next_start_millis(after)
    }

    /// A queued node outside its maintenance hours: moves its place in the queue to the next
    /// start of the hours (one write each time they end) and waits; nothing else is written and
    /// no slot is taken.
    pub(super) async fn wait_for_hours(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<()> {
        let starts = self.next_hours(now_millis());
        if let Some(starts) = starts
            && record.queued_at.is_none_or(|q| q < starts)
        {
            self.write(
                running,
                Transition::new(NodeState::Queued, NodeState::Queued).window(WindowChange::Queue {
                    queued_at: Some(starts),
                }),
                false,
            )
            .await?;
        }
        self.wait(running, starts.map(instant_at), None).await
    }

    /// The maintenance hours ended while the node holds its slot, before `next` could
    /// start: the node is uncordoned (if rota cordoned it), gives its slot back and queues until
    /// the hours start again. Nothing failed, so nothing backs off.
    pub(super) async fn postpone(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        next: &str,
    ) -> Result<()> {
        let starts = self
            .next_hours(now_millis())
            .map_or_else(|| "never".to_string(), |at| timestamp(at).to_string());
        let reason = format!(
            "the maintenance hours ended before {next}; the work waits until they start again ({starts})"
        );
        info!(node = %self.config.node, reason, "postponing the window's work");
        self.commit(running, record, Event::HoursEnded { reason })
            .await?;
        Ok(())
    }

    /// A queued node that was granted a slot just before a restart, outside its maintenance
    /// hours: the node was never cordoned, so the slot goes back at once and the node waits its
    /// turn.
    pub(super) async fn postpone_grant(&self, running: &mut Running) -> Result<()> {
        self.write(
            running,
            Transition::new(NodeState::Queued, NodeState::Queued).window(WindowChange::Postpone {
                reason: "the maintenance hours ended before the drain".into(),
            }),
            false,
        )
        .await?;
        Ok(())
    }
}

//! Maintenance windows, checked before the slot, the drain, each procedure and the reboot: a
//! step that would start outside them is postponed to the next window, without backoff.

use jiff::Timestamp;
use rota_core::{Event, NodeState};
use rota_store::{Millis, NodeRecord, Transition, WindowChange, now_millis};
use tracing::info;

use super::{Agent, Running, instant_at};
use crate::error::Result;

/// An instant in store time as the windows see it.
pub(super) fn timestamp(at: Millis) -> Timestamp {
    Timestamp::from_millisecond(at).unwrap_or(Timestamp::MAX)
}

fn millis(at: Timestamp) -> Millis {
    at.as_millisecond()
}

impl Agent {
    /// Whether a maintenance window is open now (always, without configured windows). Tells
    /// the observers each time, and logs only when the answer changes.
    pub(super) fn window_open(&self, running: &mut Running) -> bool {
        let Some(windows) = &self.config.windows else {
            self.tell(|o| o.window_open(true));
            return true;
        };
        let now = timestamp(now_millis());
        let open = windows.is_open(now);
        if running.window_seen != Some(open) {
            if open {
                let closes = windows.closes_at(now).map(|t| t.to_string());
                info!(node = %self.config.node, closes_at = closes, "maintenance window open");
            } else {
                let opens = windows.next_open(now).map(|t| t.to_string());
                info!(node = %self.config.node, next_open = opens, "maintenance window closed");
            }
            running.window_seen = Some(open);
        }
        self.tell(|o| o.window_open(open));
        open
    }

    /// When the next window opens, in store time; `None` without windows or when it opens
    /// past the end of time.
    fn next_window(&self, after: Millis) -> Option<Millis> {
        let windows = self.config.windows.as_ref()?;
        windows.next_open(timestamp(after)).map(millis)
    }

    /// When a node eligible at `at` (backoff over) may take a slot: at once when a window is
    /// open then, else when the next one opens. A node waiting for its window is not yet in
    /// the queue, so that it holds up no node whose window is open.
    pub(super) fn window_eligible(&self, at: Millis) -> Millis {
        self.next_window(at).map_or(at, |open| open.max(at))
    }

    /// A queued node outside its windows: moves its place in the queue to the next opening
    /// (one write per closing) and waits; nothing else is written and no slot is taken.
    pub(super) async fn wait_for_window(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<()> {
        let opens = self.next_window(now_millis());
        if let Some(opens) = opens
            && record.queued_at.is_none_or(|q| q < opens)
        {
            self.write(
                running,
                Transition::new(NodeState::Queued, NodeState::Queued).window(WindowChange::Queue {
                    queued_at: Some(opens),
                }),
                false,
            )
            .await?;
        }
        self.wait(running, opens.map(instant_at), None).await
    }

    /// The window closed while the node holds its slot, before `next_step` could start: the
    /// node is uncordoned (if rota cordoned it), gives its slot back and queues for the next
    /// window. Nothing failed, so nothing backs off.
    pub(super) async fn postpone(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        next_step: &str,
    ) -> Result<()> {
        let opens = self
            .next_window(now_millis())
            .map_or_else(|| "never".to_string(), |at| timestamp(at).to_string());
        let reason = format!(
            "the maintenance window closed before {next_step}; the work waits for the next window (opens {opens})"
        );
        info!(node = %self.config.node, reason, "postponing the window's work");
        self.commit(running, record, Event::WindowClosed { reason })
            .await?;
        Ok(())
    }

    /// A queued node that was granted a slot just before a restart, outside its windows: the
    /// node was never cordoned, so the slot goes back at once and the node waits its turn.
    pub(super) async fn postpone_grant(&self, running: &mut Running) -> Result<()> {
        self.write(
            running,
            Transition::new(NodeState::Queued, NodeState::Queued).window(WindowChange::Postpone {
                reason: "the maintenance window closed before the drain".into(),
            }),
            false,
        )
        .await?;
        Ok(())
    }
}

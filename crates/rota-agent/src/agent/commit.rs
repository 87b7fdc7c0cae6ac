//! Every persisted transition goes through here: the lifecycle check, the fenced write, the
//! observers, and the effects (uncordon, the pending mark) that follow a write.

use rota_actions::ActionError;
use rota_core::{Event, NodeState, Process};
use rota_observer::{StoreWrite, WorkOutcome};
use rota_store::{NodeRecord, RetryPauses, StoreExt, Transition, WindowChange};
use tracing::{info, warn};

use super::{Agent, Running};
use crate::crash_points;
use crate::error::Result;

impl Agent {
    /// Marks the node as waiting for maintenance from the moment it has work until it is idle
    /// again. Best effort: a mark that cannot be set only costs the scheduler's hint, and the
    /// agent's next pass tries again.
    pub(super) async fn mark_pending(&self, running: &mut Running, record: &NodeRecord) {
        let pending = record.state != NodeState::Idle;
        if running.pending == Some(pending) {
            return;
        }
        match self.actions.mark_pending(pending).await {
            Ok(()) => running.pending = Some(pending),
            Err(e) => {
                warn!(node = %self.config.node, error = %e, pending, "cannot mark the node as waiting for maintenance; trying again on the agent's next pass");
            }
        }
    }

    /// Keeps the host's window marker as the store says: present while the node holds a slot.
    /// Best effort: a marker that cannot be written costs only a delayed start (see
    /// `window_marker`), and the agent's next pass tries again.
    pub(super) fn mark_window(&self, running: &mut Running, record: &NodeRecord) {
        let in_window = record.slot.is_some();
        if running.in_window == Some(in_window) {
            return;
        }
        match self.window_marker.set(in_window) {
            Ok(()) => running.in_window = Some(in_window),
            Err(e) => {
                warn!(node = %self.config.node, error = %e, in_window, "cannot record on the host whether the node is in its window; a restart may wait --start-jitter; trying again on the agent's next pass");
            }
        }
    }

    /// Applies `event` to the node's lifecycle through the pure core and persists the
    /// decision. The uncordon it asks for comes first, while the node still holds its slot.
    pub(super) async fn commit(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
    ) -> Result<NodeRecord> {
        self.commit_as(running, record, event, |_| {}, false).await
    }

    /// [`Agent::commit`], with what the core cannot know added to the write by `with` (the
    /// requests it records, the process, the reboot's fields).
    pub(super) async fn commit_with(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
        with: impl FnOnce(&mut Transition) + Send,
    ) -> Result<NodeRecord> {
        self.commit_as(running, record, event, with, false).await
    }

    /// [`Agent::commit_with`] for a transition that something disruptive follows at once: it
    /// carries the fence (see [`StoreExt::fenced_transition`]).
    pub(super) async fn commit_fenced(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
        with: impl FnOnce(&mut Transition) + Send,
    ) -> Result<NodeRecord> {
        let updated = self.commit_as(running, record, event, with, true).await?;
        running.fenced = Some((updated.state, updated.since));
        Ok(updated)
    }

    /// Proves right before anything disruptive that this session still holds the node's slot,
    /// unless the transition that led to `record` just proved it.
    pub(super) async fn fence(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if running.fenced.take() == Some((record.state, record.since)) {
            return Ok(());
        }
        self.prove_slot(running).await
    }

    /// The store's fence: this session still holds the node's slot.
    pub(super) async fn prove_slot(&self, running: &Running) -> Result<()> {
        self.tell(|o| o.store_write(StoreWrite::Fence));
        self.store
            .fence(&running.session, self.config.session_ttl)
            .await?;
        Ok(())
    }

    /// Writes `transition` as is. Lifecycle transitions come through [`Agent::commit`], which checks
    /// them against the lifecycle first; only bookkeeping that changes no state (the queue
    /// time, the cordon flags after an unlock) comes here directly.
    pub(super) async fn write(
        &self,
        running: &Running,
        transition: Transition,
        fenced: bool,
    ) -> Result<NodeRecord> {
        let (from, to) = (transition.from, transition.to);
        self.tell(|o| o.store_write(StoreWrite::Transition { from, to, fenced }));
        let updated = if fenced {
            self.store
                .fenced_transition(&running.session, transition, self.config.session_ttl)
                .await?
        } else {
            self.store.transition(&running.session, transition).await?
        };
        crash_points::after_write(from, to);
        Ok(updated)
    }

    pub(super) async fn commit_as(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
        with: impl FnOnce(&mut Transition) + Send,
        fenced: bool,
    ) -> Result<NodeRecord> {
        let decision = record.lifecycle().apply(&event)?;
        if matches!(event, Event::Healthy) {
            self.return_to_service(running, record, decision.uncordon)
                .await?;
        } else if decision.uncordon {
            self.uncordon(running, record).await?;
        }
        let mut transition = Transition::of(decision);
        with(&mut transition);
        let ending = match &transition.window {
            WindowChange::Finish => Some((WorkOutcome::Finished, None)),
            WindowChange::Fail { cause, .. } => Some((WorkOutcome::Failed, Some(cause.clone()))),
            WindowChange::Cancel { reason } => Some((WorkOutcome::Canceled, Some(reason.clone()))),
            WindowChange::Postpone { reason } => {
                Some((WorkOutcome::Postponed, Some(reason.clone())))
            }
            _ => None,
        };
        // The store ends the window's active requests in the transition; read them first so
        // that observers learn which work ended.
        let ended: Vec<Process> = match ending {
            Some(_) if !self.observers.is_empty() => self
                .active_requests()
                .await?
                .into_iter()
                .map(|r| r.process)
                .collect(),
            _ => Vec::new(),
        };
        let updated = self.write(running, transition, fenced).await?;
        info!(node = %self.config.node, event = %event, from = %record.state, to = %updated.state, "transition");
        self.tell(|o| o.transition(record, &updated, &event));
        if let Some((outcome, cause)) = ending {
            for process in &ended {
                self.tell(|o| o.work_ended(process, outcome, cause.as_deref()));
            }
        }
        // Last: observers see the work end while the node still holds the window's slot.
        self.tell(|o| o.record(&updated));
        Ok(updated)
    }

    /// Uncordons the node, retrying until it works: releasing the slot of a node that is
    /// still cordoned would let one more node out than `concurrency` allows. Each attempt is
    /// fenced, the first by the transition that led to `record` if that one proved the slot.
    pub(super) async fn uncordon(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        self.until_done(running, record, true, "uncordon", || {
            self.actions.uncordon()
        })
        .await
    }

    /// Returns the node to service at the end of a window it passed, retrying until it works
    /// as [`Agent::uncordon`] does; fenced only when it uncordons (the platform's record of the
    /// reboot alone disrupts nothing).
    async fn return_to_service(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        uncordon: bool,
    ) -> Result<()> {
        self.until_done(
            running,
            record,
            uncordon,
            "returning the node to service",
            || self.actions.return_to_service(uncordon),
        )
        .await
    }

    /// Runs `action` until it succeeds or the agent stops, pausing between attempts; with
    /// `fenced`, each attempt proves the slot first.
    async fn until_done<'a, F>(
        &'a self,
        running: &mut Running,
        record: &NodeRecord,
        fenced: bool,
        what: &str,
        action: impl Fn() -> F,
    ) -> Result<()>
    where
        F: Future<Output = std::result::Result<(), ActionError>> + 'a,
    {
        let mut pauses = RetryPauses::new();
        loop {
            if fenced {
                self.fence(running, record).await?;
            }
            let pause = match action().await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let pause = pauses.next_pause();
                    warn!(node = %self.config.node, error = %e, pause = ?pause, "{what} failed; retrying");
                    pause
                }
            };
            tokio::select! {
                () = running.cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

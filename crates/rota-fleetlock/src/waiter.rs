//! The waiter of a queued FleetLock host: it takes the host's slot as soon as its turn comes,
//! between the host's requests, so that the drain starts at once.

use std::sync::Arc;

use rota_core::NodeName;
use rota_core::NodeState;
use rota_core::fleetlock::{self, Lock};
use rota_store::instant_at;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::Result;
use crate::hosts::{Host, Inner, Window};

impl Inner {
    /// Starts the task that waits for the node's turn unless it runs.
    pub(crate) fn ensure_waiter(self: &Arc<Inner>, host: &mut Host, node: &NodeName) {
        if host.waiter.as_ref().is_some_and(|w| !w.is_finished()) {
            return;
        }
        host.waiter = Some(tokio::spawn(self.clone().wait_turn(node.clone())));
    }

    /// Takes the queued node's slot as soon as its turn comes, between its client's requests:
    /// on Kubernetes the scheduler withdraws a grant not taken up within its `--take-up` (60 s),
    /// long before Zincati asks again (every 5 minutes), and on every store the drain starts
    /// as soon as the slot is free. It looks again at each change of the store, and ends once
    /// the node no longer waits. It never renews the node's session: a host that stops asking
    /// leaves the queue when its session runs out, with a write that wakes the waiters behind
    /// it (an expired session alone changes nothing they would look again for). The waiter
    /// next in line also looks every `--health-interval`: a waiter ahead whose session ran out
    /// elsewhere (an agent's) moves it up with no change to wake it.
    async fn wait_turn(self: Arc<Inner>, node: NodeName) {
        let mut changes = self.store.changes();
        loop {
            let (wake_at, expires, turn_at) = {
                let host = self.host(&node);
                let host = host.lock().await;
                let expires = host.session.as_ref().map(|(_, until)| *until);
                (host.wake_at, expires, host.turn_at)
            };
            let next_in_line = turn_at
                .is_some_and(|turn| turn <= changes.borrow().saturating_add(1))
                .then(|| Instant::now() + self.config.health_interval);
            let timer = async {
                let wake = wake_at.map(instant_at);
                match wake.into_iter().chain(expires).chain(next_in_line).min() {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let timed_out = tokio::select! {
                () = self.cancel.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return } else { false },
                () = timer => true,
            };
            let host = self.host(&node);
            let mut host = host.lock().await;
            if timed_out {
                // Whatever woke it by time, the next look reads the queue.
                host.turn_at = None;
            }
            match self.take_turn(&mut host, &node).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    warn!(%node, error = %e, "FleetLock host waiting for its turn: looking again");
                    drop(host);
                    tokio::time::sleep(self.config.health_interval).await;
                    changes.mark_changed();
                }
            }
        }
    }

    /// One look of [`Inner::wait_turn`]: takes the slot if it is the node's turn; whether the
    /// node still waits.
    async fn take_turn(self: &Arc<Inner>, host: &mut Host, node: &NodeName) -> Result<bool> {
        let session = match &host.session {
            Some((session, until)) if *until > Instant::now() => session.clone(),
            _ => {
                self.leave(host, node).await?;
                return Ok(false);
            }
        };
        if host
            .turn_at
            .is_some_and(|turn| *self.store.changes().borrow() < turn)
        {
            return Ok(true);
        }
        let (overview, settings) = self.look_up(node).await?;
        let record = &overview.record;
        let lock = fleetlock::pre_reboot(&self.look(&overview, settings.pause.is_some(), None));
        Ok(match lock {
            Lock::TakeSlot => {
                host.wake_at = None;
                // Its client learns of the grant at its next request: the node drains.
                let _ = self.take_slot(host, record, session).await?;
                // Granted, its window's task runs; told to wait (or held by a spent failure
                // budget), it waits on.
                !host.window.as_ref().is_some_and(Window::running)
            }
            // Paused, blocked, outside the hours or backing off: that may change.
            Lock::Refused(refusal) if record.state == NodeState::Queued => {
                self.hold(host, record, refusal).await?;
                true
            }
            _ => false,
        })
    }

    /// A waiting host whose session ran out (it stopped asking for `--client-ttl`) leaves the
    /// queue: its request is withdrawn, a change that wakes the waiters behind it.
    async fn leave(self: &Arc<Inner>, host: &mut Host, node: &NodeName) -> Result<()> {
        host.session = None;
        host.turn_at = None;
        let (overview, _) = self.look_up(node).await?;
        let record = &overview.record;
        if record.state != NodeState::Queued {
            return Ok(());
        }
        let session = self.session(host, node).await?;
        self.withdraw(&session, record).await?;
        self.store.close_session(&session).await?;
        host.session = None;
        info!(%node, "FleetLock host stopped asking: it left the queue");
        Ok(())
    }
}

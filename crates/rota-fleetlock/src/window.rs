//! The task of a FleetLock host's window: what its agent would do while the node holds a
//! slot. It drains the node, waits for the host to take its lock, watches for the new boot
//! and verifies the node, each step written through the core's lifecycle. Every pass starts
//! from the stored record, so a restarted server carries on where the last one stopped.

use std::sync::Arc;
use std::time::Duration;

use rota_core::{Blocked, Event, Failure, NodeState, Process};
use rota_store::{NodeRecord, Session, StoreExt, Transition, millis_of, now_millis};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::hosts::Inner;

/// Pause after a failed store access or node action.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How often a failed window is looked at for an operator's retry or unlock.
const FAILED_LOOK: Duration = Duration::from_secs(5);
/// How often a drain under way is asked what holds it back.
const DRAIN_HELD_EVERY: Duration = Duration::from_secs(2);

impl Inner {
    /// Runs the window's steps until it ends, another session takes the node over, or `stop`
    /// (the server's shutdown, or the host's steady-state before its reboot); `stop` ends it
    /// only while it waits, never in the middle of a store call.
    pub(crate) async fn window(self: Arc<Inner>, session: Session, stop: CancellationToken) {
        let node = session.node.clone();
        let mut renewed = Instant::now();
        loop {
            if stop.is_cancelled() {
                return;
            }
            let pass = async {
                if renewed.elapsed() > self.config.client_ttl / 3 {
                    self.store
                        .heartbeat(&session, self.config.client_ttl)
                        .await?;
                    renewed = Instant::now();
                }
                let Some(record) = self.store.node(&node).await? else {
                    return Ok(None);
                };
                self.metrics.observed(&record);
                if record.state == NodeState::Idle && record.cordoned_by_rota {
                    self.unlocked(&session, &record).await?;
                    return Ok(None);
                }
                if record.process != Some(Process::FleetLock) || !record.state.holds_slot() {
                    return Ok(None);
                }
                let pause = match record.state {
                    NodeState::Draining => self.drain(&session, &record, &stop).await?,
                    NodeState::Maintaining => self.await_lock(&session, &record).await?,
                    NodeState::Rebooting => self.await_boot(&session, &record).await?,
                    NodeState::Verifying => self.verify(&session, &record).await?,
                    // Failed closed: the node keeps its slot and cordon until an operator's
                    // `rota retry` (back to maintaining) or `rota unlock` (its cordon undone
                    // here), which the task looks for.
                    NodeState::Failed => FAILED_LOOK,
                    _ => return Ok(None),
                };
                Ok::<_, Error>(Some(pause))
            };
            let pause = match pass.await {
                Ok(None) => return,
                Ok(Some(pause)) => pause,
                Err(Error::Store(
                    rota_store::Error::Fenced { .. } | rota_store::Error::Expired { .. },
                )) => {
                    // Another session took the node over: its window goes on there.
                    return;
                }
                Err(e) => {
                    warn!(%node, error = %e, "FleetLock window: retrying");
                    RETRY_PAUSE
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Drains the node, within the drain timeout and the maintenance hours.
    async fn drain(
        &self,
        session: &Session,
        record: &NodeRecord,
        stop: &CancellationToken,
    ) -> Result<Duration> {
        let within_hours = self
            .config
            .hours
            .as_ref()
            .is_none_or(|hours| hours.contains_millis(now_millis()));
        if !within_hours {
            let event = Event::HoursEnded {
                reason: "the maintenance hours ended before the drain".to_owned(),
            };
            self.commit(session, record, event, false, |_| {}).await?;
            return Ok(Duration::ZERO);
        }
        let actions = self.platform.actions(&record.node);
        self.store.fence(session, self.config.client_ttl).await?;
        let left = record
            .since
            .saturating_add(millis_of(self.config.drain_timeout))
            .saturating_sub(now_millis());
        let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
        let drain = tokio::time::timeout(left, actions.drain());
        tokio::pin!(drain);
        // What holds the drain back, as `rota status` shows it (BLOCKED), written when it
        // changes and cleared when the drain ends: as an agent shows its own.
        let mut shown: Option<String> = None;
        let mut renewed = Instant::now();
        let mut look =
            tokio::time::interval_at(Instant::now() + DRAIN_HELD_EVERY, DRAIN_HELD_EVERY);
        let drained = loop {
            tokio::select! {
                // The drain (a command killed with it, or API calls) may stop anywhere; the
                // next drain starts it again.
                () = stop.cancelled() => return Ok(Duration::ZERO),
                drained = &mut drain => break drained,
                _ = look.tick() => {
                    let held = actions.drain_held();
                    if held != shown {
                        self.show_held(session, held.as_deref()).await;
                        shown = held;
                    }
                    // A drain may outlast the session: it is renewed as the window's steps
                    // renew it.
                    if renewed.elapsed() > self.config.client_ttl / 3 {
                        self.store.heartbeat(session, self.config.client_ttl).await?;
                        renewed = Instant::now();
                    }
                }
            }
        };
        if shown.is_some() {
            self.show_held(session, None).await;
        }
        let event = match drained {
            Ok(Ok(())) => Event::Drained,
            Ok(Err(e)) => Event::DrainFailed(Failure::new(
                format!("drain failed: {e}"),
                self.config.backoff,
            )),
            Err(_) => Event::DrainFailed(Failure::new(
                format!(
                    "drain not done within {}s",
                    self.config.drain_timeout.as_secs()
                ),
                self.config.backoff,
            )),
        };
        self.commit(session, record, event, false, |_| {}).await?;
        Ok(Duration::ZERO)
    }

    /// An operator unlocked the window (`rota unlock`): the node is idle but still cordoned,
    /// and its cordon is undone here, as a node's agent undoes its own.
    async fn unlocked(&self, session: &Session, record: &NodeRecord) -> Result<()> {
        self.platform.actions(&record.node).uncordon().await?;
        let returned = self
            .store
            .transition(session, Transition::new(NodeState::Idle, NodeState::Idle))
            .await?;
        self.metrics.observed(&returned);
        info!(node = %record.node, "the window was unlocked: node returned to service");
        Ok(())
    }

    /// Records what holds the drain back (or, with `None`, that nothing does). A courtesy for
    /// `rota status`: a write that fails is logged, and the drain goes on.
    async fn show_held(&self, session: &Session, held: Option<&str>) {
        let blocked = held.map(|reason| Blocked {
            reason: reason.to_owned(),
            since: now_millis(),
        });
        if let Err(e) = self.store.set_blocked(session, blocked.as_ref()).await {
            warn!(node = %session.node, error = %e, "could not record what holds the drain back");
        }
    }

    /// Drained: the host takes its lock at its next `pre-reboot`; one that does not come
    /// within `--lock-wait` ends the window, and its node goes back into service.
    async fn await_lock(&self, session: &Session, record: &NodeRecord) -> Result<Duration> {
        let until = record
            .since
            .saturating_add(millis_of(self.config.lock_wait));
        let now = now_millis();
        if now < until {
            let left = Duration::from_millis(u64::try_from(until - now).unwrap_or(0));
            return Ok(left.min(self.config.health_interval));
        }
        let reason = format!(
            "the FleetLock host did not ask for its lock within {}s of its drain",
            self.config.lock_wait.as_secs()
        );
        warn!(node = %record.node, reason, "ending the window");
        self.commit(session, record, Event::Unlock { reason }, false, |_| {})
            .await?;
        Ok(Duration::ZERO)
    }

    /// The host reboots: a new boot id starts the verification, the same one past the
    /// deadline fails the window closed. Where the platform knows no boot id, only the
    /// host's `steady-state` says it is back.
    async fn await_boot(&self, session: &Session, record: &NodeRecord) -> Result<Duration> {
        let boot_id = self.platform.boot_id(&record.node).await?;
        if let Some(now) = &boot_id
            && record.boot_id.as_ref() != Some(now)
        {
            info!(node = %record.node, boot_id = now, "FleetLock host came back with a new boot id");
            self.commit(session, record, Event::BootChanged, true, |_| {})
                .await?;
            return Ok(Duration::ZERO);
        }
        let deadline = record.reboot_deadline.unwrap_or(i64::MAX);
        if now_millis() >= deadline {
            let cause = format!(
                "the host did not come back {}s after its lock was granted (boot id {} unchanged)",
                self.config.reboot_timeout.as_secs(),
                record.boot_id.as_deref().unwrap_or("unknown")
            );
            warn!(node = %record.node, cause, "reboot failed; the node keeps its slot and cordon");
            let failed = Event::RebootTimedOut(Failure::new(cause, self.config.backoff));
            self.commit(session, record, failed, false, |_| {}).await?;
            return Ok(Duration::ZERO);
        }
        Ok(self.config.health_interval)
    }

    /// The health gate after the reboot: healthy ends the window (uncordon, slot back),
    /// unhealthy past the verify timeout fails it closed.
    async fn verify(&self, session: &Session, record: &NodeRecord) -> Result<Duration> {
        match self.platform.actions(&record.node).health().await {
            Ok(()) => {
                self.commit(session, record, Event::Healthy, false, |_| {})
                    .await?;
                info!(node = %record.node, "FleetLock host healthy; window finished");
                Ok(Duration::ZERO)
            }
            Err(e)
                if now_millis()
                    >= record
                        .since
                        .saturating_add(millis_of(self.config.verify_timeout)) =>
            {
                let cause = format!(
                    "not healthy {}s after its reboot: {e}",
                    self.config.verify_timeout.as_secs()
                );
                let failed = Event::Unhealthy(Failure::new(cause, self.config.backoff));
                self.commit(session, record, failed, false, |_| {}).await?;
                Ok(Duration::ZERO)
            }
            Err(e) => {
                info!(node = %record.node, error = %e, "not healthy yet");
                Ok(self.config.health_interval)
            }
        }
    }
}

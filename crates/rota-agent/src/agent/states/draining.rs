//! `draining`: cordon the node and evict its pods (or skip that for work that needs no drain),
//! after the drain delay when there is one.

use std::time::Duration;

use rota_core::{Event, Failure, Process};
use rota_store::{Blocked, NodeRecord, RequestRecord, StoreExt, now_millis};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::agent::{Agent, Running, needs_drain};
use crate::error::Result;

/// How often a drain under way is asked what holds it back.
const DRAIN_HELD_EVERY: Duration = Duration::from_secs(2);

impl Agent {
    pub(super) async fn draining(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if !self.within_hours(running) {
            return self.postpone(running, record, "the drain").await;
        }
        let record = self.join_pending(running, record).await?;
        let delayed = running
            .drain_delay
            .filter(|(since, _)| *since == record.since)
            .map(|(_, until)| until);
        match delayed {
            // Cordoned by this incarnation; the delay still runs.
            Some(until) if Instant::now() < until => {
                return self.wait(running, Some(until), None).await;
            }
            // The delay is over. The wait dropped the fence; the eviction needs it again.
            Some(_) => self.fence(running, &record).await?,
            None => {
                // A node cordoned beforehand is always drained: afterwards, rota could not
                // tell whether its window drained it.
                if !record.pre_cordoned && self.drain_skippable().await? {
                    info!(node = %self.config.node, "no work of this window needs a drain");
                    self.commit(running, &record, Event::DrainSkipped).await?;
                    return Ok(());
                }
                self.fence(running, &record).await?;
                self.tell(|o| o.drain_started(&record));
                if !self.config.drain_delay.is_zero() {
                    return self.cordon_for_delay(running, &record).await;
                }
            }
        }
        let drain = tokio::time::timeout(self.config.drain_timeout, self.actions.drain());
        tokio::pin!(drain);
        // What holds the drain back, as `rota status` shows it (BLOCKED), written when it
        // changes and cleared when the drain ends.
        let mut shown: Option<String> = None;
        let mut look =
            tokio::time::interval_at(Instant::now() + DRAIN_HELD_EVERY, DRAIN_HELD_EVERY);
        let drained = loop {
            tokio::select! {
                () = running.cancel.cancelled() => return Ok(()),
                drained = &mut drain => break drained,
                _ = look.tick() => {
                    let held = self.actions.drain_held();
                    if held != shown {
                        self.show_held(running, held.as_deref()).await;
                        shown = held;
                    }
                }
            }
        };
        if shown.is_some() {
            self.show_held(running, None).await;
        }
        let cause = match drained {
            Ok(Ok(())) => {
                self.commit(running, &record, Event::Drained).await?;
                return Ok(());
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "drain did not finish within the drain timeout of {}s",
                self.config.drain_timeout.as_secs()
            ),
        };
        self.drain_failed(running, &record, cause).await
    }

    /// Records what holds the drain back (or, with `None`, that nothing does). A courtesy for
    /// `rota status`: a write that fails is logged, and the drain goes on.
    async fn show_held(&self, running: &Running, held: Option<&str>) {
        let blocked = held.map(|reason| Blocked {
            reason: reason.to_owned(),
            since: now_millis(),
        });
        if let Err(e) = self
            .store
            .set_blocked(&running.session, blocked.as_ref())
            .await
        {
            warn!(node = %self.config.node, error = %e, "could not record what holds the drain back");
        }
        if let Some(held) = held {
            info!(node = %self.config.node, held, "the drain waits");
        }
    }

    /// Cordons the node and starts the drain delay (kured's `--drain-delay`): its pods are
    /// evicted once the delay has passed, a wait that shutdown, the window's end and the loss
    /// of the slot end like any other.
    async fn cordon_for_delay(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let cordoned = tokio::select! {
            () = running.cancel.cancelled() => return Ok(()),
            cordoned = tokio::time::timeout(self.config.drain_timeout, self.actions.cordon()) => cordoned,
        };
        let cause = match cordoned {
            Ok(Ok(())) => {
                let delay = self.config.drain_delay;
                let until = Instant::now() + delay;
                running.drain_delay = Some((record.since, until));
                info!(node = %self.config.node, delay_s = delay.as_secs_f64(), "cordoned; the pods are evicted after the drain delay");
                return self.wait(running, Some(until), None).await;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "the cordon did not finish within the drain timeout of {}s",
                self.config.drain_timeout.as_secs()
            ),
        };
        self.drain_failed(running, record, cause).await
    }

    async fn drain_failed(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        cause: String,
    ) -> Result<()> {
        warn!(node = %self.config.node, cause, "drain failed; giving the slot back");
        let failed = Event::DrainFailed(Failure::new(cause, self.config.backoff));
        self.commit(running, record, failed).await?;
        Ok(())
    }

    /// Whether every active request of the window is a procedure that needs no drain. The
    /// procedures are read only when the window has nothing but procedures: a reboot window
    /// pays nothing for the question.
    pub(super) async fn drain_skippable(&self) -> Result<bool> {
        let active: Vec<RequestRecord> = self.active_requests().await?;
        if active.is_empty() || active.iter().any(|r| !matches!(r.process, Process::Mop(_))) {
            return Ok(false);
        }
        let procedures = self.procedure_map().await?;
        Ok(!active.iter().any(|r| needs_drain(r, &procedures)))
    }
}

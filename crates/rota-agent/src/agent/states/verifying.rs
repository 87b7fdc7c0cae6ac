//! `verifying`: the health gate after the work; uncordon and release the slot once healthy.

use rota_actions::ActionError;
use rota_core::{Event, Failure};
use rota_store::{NodeRecord, now_millis};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::agent::{Agent, Running, ms};
use crate::error::Result;

impl Agent {
    pub(super) async fn verifying(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let deadline = record.since.saturating_add(ms(self.config.verify_timeout));
        let health = match running.health_ahead.take() {
            Some((since, health)) if since == record.since => health,
            _ => self.actions.health().await,
        };
        match health {
            Ok(()) => {
                if let Some(until) = self.release_delayed(running, record) {
                    let next = until.min(Instant::now() + self.config.health_interval);
                    return self.wait(running, Some(next), None).await;
                }
                self.commit(running, record, Event::Healthy).await?;
                Ok(())
            }
            Err(e) if now_millis() >= deadline => self.unhealthy(running, record, &e).await,
            Err(e) => {
                running.healthy_since = None;
                info!(node = %self.config.node, error = %e, "not healthy yet");
                let next = Instant::now() + self.config.health_interval;
                self.wait(running, Some(next), None).await
            }
        }
    }

    /// While the release delay runs, when it ends: from the first of an unbroken series of
    /// passed health checks in this verification. `None` once it has passed, or without one.
    pub(super) fn release_delayed(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Option<Instant> {
        let delay = self.config.release_delay;
        if delay.is_zero() {
            return None;
        }
        let since = match running.healthy_since {
            Some((verification, since)) if verification == record.since => since,
            _ => {
                info!(node = %self.config.node, delay_s = delay.as_secs_f64(), "healthy; the slot goes back after the release delay");
                let now = Instant::now();
                running.healthy_since = Some((record.since, now));
                now
            }
        };
        let until = since + delay;
        (Instant::now() < until).then_some(until)
    }

    pub(super) async fn unhealthy(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        error: &ActionError,
    ) -> Result<()> {
        let cause = format!(
            "not healthy {}s after maintenance: {error}",
            self.config.verify_timeout.as_secs()
        );
        warn!(node = %self.config.node, cause, "node failed verification; it keeps its slot and cordon");
        let failed = Event::Unhealthy(Failure::new(cause, self.config.backoff));
        self.commit(running, record, failed).await?;
        Ok(())
    }
}

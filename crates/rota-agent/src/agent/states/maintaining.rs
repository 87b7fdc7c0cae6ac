//! `maintaining`: run the window's procedures and kustodian's maintenance, then start the
//! reboot when one was requested.

use rota_core::{Event, NodeFields, Process};
use rota_store::{NodeRecord, RequestRecord, StoreExt, now_millis};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::agent::{Agent, Running, ms};
use crate::crash_points;
use crate::error::Result;

impl Agent {
    pub(super) async fn maintaining(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<()> {
        let record = self.join_pending(running, record).await?;
        let active: Vec<RequestRecord> = self.active_requests().await?;
        let procedures: Vec<&RequestRecord> = active
            .iter()
            .filter(|r| matches!(r.process, Process::Mop(_)))
            .collect();
        if !procedures.is_empty() {
            self.actions.maintenance_started().await;
            return self.run_procedures(running, &record, &procedures).await;
        }
        let active: Vec<Process> = active.into_iter().map(|r| r.process).collect();
        if active.contains(&Process::Maintenance)
            && self.kustodian_starting(running)
            && !self.within_hours(running)
        {
            return self
                .postpone(running, &record, "kustodian's maintenance")
                .await;
        }
        if active.contains(&Process::Maintenance) && !self.kustodian_done(running).await? {
            return self.wait(running, None, None).await;
        }
        if !active.contains(&Process::Reboot) {
            self.commit(running, &record, Event::WorkDone).await?;
            return Ok(());
        }
        if let Some(until) = self.reboot_delayed(running, &record) {
            return self.wait(running, Some(until), None).await;
        }
        if !self.within_hours(running) {
            return self.postpone(running, &record, "the reboot").await;
        }
        // Like kured holding its lock: a blocked node keeps its slot and cordon, and waits.
        let seen = *running.changes.borrow_and_update();
        let pause = self.store.paused().await?;
        if self.blocked(running, &record, seen, pause).await? {
            return Ok(());
        }
        // The boot id goes to the store before the reboot starts: after it, only a different
        // boot id proves that the reboot happened.
        let now = now_millis();
        let boot_id = running.boot_id.clone();
        let deadline = now.saturating_add(ms(self.config.reboot_timeout));
        let record = self
            .commit_fenced(running, &record, Event::RebootStarted, |reboot| {
                reboot.process = Some(Process::Reboot);
                reboot.fields = NodeFields::reboot_started(boot_id, now, deadline);
            })
            .await?;
        self.start_reboot(running, &record).await
    }

    /// While the reboot delay (kured's `--reboot-delay`) runs, when it ends: from the first
    /// time this incarnation found the window's work done but its reboot. `None` once it has
    /// passed, or without one. The window check, the blockers and the fenced write of the
    /// reboot's start come after it.
    fn reboot_delayed(&self, running: &mut Running, record: &NodeRecord) -> Option<Instant> {
        let delay = self.config.reboot_delay;
        if delay.is_zero() {
            return None;
        }
        let until = match running.reboot_delay {
            Some((since, until)) if since == record.since => until,
            _ => {
                info!(node = %self.config.node, delay_s = delay.as_secs_f64(), "drained and done; the reboot starts after the reboot delay");
                let until = Instant::now() + delay;
                running.reboot_delay = Some((record.since, until));
                until
            }
        };
        (Instant::now() < until).then_some(until)
    }

    /// Starts the reboot that `record` (in `rebooting`) recorded, once it has proven the slot.
    pub(super) async fn start_reboot(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<()> {
        self.fence(running, record).await?;
        let started_at = record.reboot_started_at.unwrap_or_else(now_millis);
        if let Err(e) = self.actions.reboot_starting(started_at).await {
            // The start repeats: a restarted agent, too, finds the reboot's command not run.
            warn!(node = %self.config.node, error = %e, "cannot record the reboot's start on the node; the reboot waits, trying again");
            return self.pause(running).await;
        }
        crash_points::reached(crash_points::BEFORE_REBOOT_COMMAND);
        info!(node = %self.config.node, "rebooting");
        self.tell(|o| o.reboot_started(record));
        match self.actions.reboot().await {
            Ok(handle) => running.reboot = Some(handle),
            Err(e) => self.reboot_failed(running, record, &e).await?,
        }
        Ok(())
    }
}

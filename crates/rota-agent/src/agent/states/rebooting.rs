//! `rebooting`: wait for the new boot id, or fail the window when it does not come in time.

use rota_core::{Event, Failure};
use rota_store::{Millis, NodeRecord, now_millis};
use tracing::{info, warn};

use crate::agent::{Agent, Running, instant_at, ms};
use crate::crash_points;
use crate::error::Result;

impl Agent {
    pub(super) async fn reboot_failed(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        cause: &(dyn std::fmt::Display + Sync),
    ) -> Result<()> {
        warn!(node = %self.config.node, %cause, "reboot failed; the node keeps its slot and cordon");
        let failed = Event::RebootTimedOut(Failure::new(cause.to_string(), self.config.backoff));
        self.commit(running, record, failed).await?;
        Ok(())
    }

    /// Records on the host that the reboot command `record` recorded has run to its end, so
    /// that an agent restarted on this boot waits for the reboot instead of starting it again.
    /// A marker that cannot be written only costs that restart a second run of the command.
    fn reboot_command_ran(&self, running: &mut Running, record: &NodeRecord) {
        crash_points::reached(crash_points::AFTER_REBOOT_COMMAND);
        running.reboot_ran = record.reboot_started_at;
        if let Some(started_at) = record.reboot_started_at
            && let Err(e) = self.reboot_marker.record(&running.boot_id, started_at)
        {
            warn!(node = %self.config.node, error = %e, "cannot record that the reboot command ran; an agent restarted before the reboot runs it again");
        }
        crash_points::reached(crash_points::AFTER_REBOOT_MARKER);
    }

    /// Whether the command of the reboot recorded at `started_at` ran on this boot. A marker
    /// that cannot be read counts as no marker: running the command again is harmless.
    fn reboot_command_done(&self, running: &Running, started_at: Millis) -> bool {
        running.reboot_ran == Some(started_at)
            || self
                .reboot_marker
            .started(&running.boot_id, started_at)
            .unwrap_or_else(|e| {
                warn!(node = %self.config.node, error = %e, "cannot read whether the reboot command ran; running it again");
                false
            })
    }

    pub(super) async fn rebooting(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if record.boot_id.as_deref() != Some(running.boot_id.as_str()) {
            info!(node = %self.config.node, boot_id = running.boot_id, "node came back with a new boot id");
            // The verification's first health check goes with the write that starts it, and
            // the write carries the fence, so that a node healthy at once uncordons right
            // after: one round trip where there were three.
            let (updated, health) = tokio::join!(
                self.commit_fenced(running, record, Event::BootChanged, |_| {}),
                self.actions.health()
            );
            running.health_ahead = Some((updated?.since, health));
            return Ok(());
        }
        let deadline = record
            .reboot_deadline
            .unwrap_or_else(|| now_millis().saturating_add(ms(self.config.reboot_timeout)));
        if now_millis() >= deadline {
            let cause = format!(
                "boot id {} unchanged {}s after the reboot started",
                running.boot_id,
                self.config.reboot_timeout.as_secs()
            );
            return self.reboot_failed(running, record, &cause).await;
        }
        let Some(handle) = running.reboot.as_mut() else {
            if let Some(started_at) = record.reboot_started_at
                && !self.reboot_command_done(running, started_at)
            {
                warn!(
                    node = %self.config.node,
                    started_at,
                    "the recorded reboot's command did not run to its end on this boot (the agent stopped, or its store call failed, before it had); running it now"
                );
                return self.start_reboot(running, record).await;
            }
            // The command ran: a restarted agent only waits for the outcome.
            return self.wait(running, Some(instant_at(deadline)), None).await;
        };
        let exited = tokio::select! {
            () = running.cancel.cancelled() => return Ok(()),
            () = tokio::time::sleep_until(instant_at(deadline)) => return Ok(()),
            exited = handle => exited,
        };
        running.reboot = None;
        match exited {
            Ok(Ok(())) => {
                self.reboot_command_ran(running, record);
                Ok(())
            }
            // The command's waiter stopped with the runtime: the agent is stopping too.
            Err(_) => Ok(()),
            Ok(Err(e)) => self.reboot_failed(running, record, &e).await,
        }
    }
}

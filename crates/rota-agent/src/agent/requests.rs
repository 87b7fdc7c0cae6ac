//! Keeping the node's requests in line with its sentinels and the procedures that target it:
//! recording new ones, withdrawing those whose sentinel went away.

use std::collections::BTreeMap;

use rota_core::Process;
use rota_observer::WorkOutcome;
use rota_store::{
    Millis, NodeRecord, ProcedureRecord, RequestRecord, RequestState, StoreExt, now_millis,
};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Agent, Procedures, Running, jittered, millis};
use crate::error::Result;

impl Agent {
    /// The work of the node's open window: its active requests, oldest first.
    pub(super) async fn active_requests(&self) -> Result<Vec<RequestRecord>> {
        Ok(self
            .store
            .open_requests(&self.config.node)
            .await?
            .into_iter()
            .filter(|r| r.state == RequestState::Active)
            .collect())
    }

    /// Turns present sentinels into requests and withdraws pending sentinel requests whose
    /// files are gone (see `wanted`).
    pub(super) async fn sync_requests(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<Vec<RequestRecord>> {
        let (mut open, missing) = self.read_requests(running, record).await?;
        // Recording is idempotent: a request another writer made since the read is returned
        // as it is, so `open` never holds one twice.
        for (process, source) in &missing {
            let (request, created) = self
                .store
                .add_request(&running.session, process, source)
                .await?;
            if created {
                info!(node = %self.config.node, %process, source, "request recorded");
            }
            open.push(request);
        }
        self.tell(|o| o.requests(&open));
        // Only now: a failed write above leaves the flag set, so the next pass tries again.
        running.sentinels_dirty = false;
        Ok(open)
    }

    /// The node's open requests, with the pending sentinel requests whose sentinel is gone
    /// withdrawn, and what the sentinels ask for that no open request covers yet (the
    /// sentinels are looked at only when they changed). Procedures' requests are made here.
    pub(super) async fn read_requests(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<(Vec<RequestRecord>, Vec<(Process, String)>)> {
        let procedures = self.enqueue_procedures(running).await?;
        let dirty = running.sentinels_dirty;
        let wanted = if dirty {
            self.wanted(running, record)
        } else {
            Vec::new()
        };
        let mut open = self.store.open_requests(&self.config.node).await?;
        if let Some(procedures) = procedures {
            self.cancel_deleted(running, &mut open, &procedures).await?;
        }
        if dirty {
            self.withdraw(running, &mut open, &wanted).await?;
        }
        let missing = wanted
            .into_iter()
            .filter(|(process, _)| !open.iter().any(|r| &r.process == process))
            .collect();
        Ok((open, missing))
    }

    /// The requests the sentinels ask for now. A reboot sentinel older than the node's last
    /// reboot was satisfied by it and asks for nothing (so a sentinel that survives the reboot
    /// cannot loop).
    pub(super) fn wanted(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Vec<(Process, String)> {
        let snapshot = running.sentinels.borrow_and_update().clone();
        let mut wanted: Vec<(Process, String)> = Vec::new();
        for path in &self.config.watched_reboot_sentinels() {
            let present = snapshot
                .get(&self.config.host_path(path))
                .and_then(|s| s.present);
            if let Some(mtime) = present
                && record
                    .last_reboot_at
                    .is_none_or(|last| millis(mtime) > last)
            {
                wanted.push((Process::Reboot, path.display().to_string()));
            }
        }
        let maintenance = &self.config.maintenance_required;
        if snapshot
            .get(&self.config.host_path(maintenance))
            .is_some_and(|s| s.present.is_some())
        {
            wanted.push((Process::Maintenance, maintenance.display().to_string()));
        }
        wanted
    }

    /// Cancels the pending sentinel requests whose sentinel is gone, and drops them from `open`.
    pub(super) async fn withdraw(
        &self,
        running: &Running,
        open: &mut Vec<RequestRecord>,
        wanted: &[(Process, String)],
    ) -> Result<()> {
        let mut withdrawn = Vec::new();
        for request in open.iter() {
            let from_sentinel = self.sentinel_source(&request.source);
            let still_wanted = wanted.iter().any(|(p, _)| p == &request.process);
            if request.state == RequestState::Pending && from_sentinel && !still_wanted {
                self.store
                    .cancel_request(&running.session, &request.process)
                    .await?;
                info!(node = %self.config.node, process = %request.process, "sentinel withdrawn");
                self.tell(|o| {
                    o.work_ended(
                        &request.process,
                        WorkOutcome::Canceled,
                        Some("sentinel withdrawn"),
                    );
                });
                withdrawn.push(request.id);
            }
        }
        open.retain(|r| !withdrawn.contains(&r.id));
        Ok(())
    }

    /// Every `procedure_poll`: makes this node's request for each procedure that matches it
    /// (once ever per node: the store refuses a second one), and returns the procedures, so
    /// that [`Agent::cancel_deleted`] cancels the pending requests of the deleted ones.
    pub(super) async fn enqueue_procedures(
        &self,
        running: &mut Running,
    ) -> Result<Option<Vec<ProcedureRecord>>> {
        if running
            .procedures_due
            .is_some_and(|due| Instant::now() < due)
        {
            return Ok(None);
        }
        let procedures = self.store.procedures().await?;
        let mut labels: Option<BTreeMap<String, String>> = None;
        for procedure in &procedures {
            let spec = &procedure.spec;
            if running.ensured.contains(&spec.name)
                || !(spec.nodes.is_empty() || spec.nodes.contains(&self.config.node))
            {
                continue;
            }
            let matches = if spec.node_selector.is_empty() {
                spec.matches(&self.config.node, &BTreeMap::new())
            } else {
                if labels.is_none() {
                    labels = self.labels().await;
                }
                labels
                    .as_ref()
                    .is_some_and(|labels| spec.matches(&self.config.node, labels))
            };
            if !matches {
                continue;
            }
            let process = spec.process().map_err(rota_store::Error::from)?;
            let (_, created) = self
                .store
                .add_request(&running.session, &process, "procedure")
                .await?;
            if created {
                info!(node = %self.config.node, %process, priority = %spec.priority, "procedure requested");
            }
            running.ensured.insert(spec.name.clone());
        }
        running.procedures_due = Some(Instant::now() + jittered(self.config.procedure_poll));
        Ok(Some(procedures))
    }

    /// Cancels the pending requests of procedures that were deleted, and drops them from `open`.
    pub(super) async fn cancel_deleted(
        &self,
        running: &Running,
        open: &mut Vec<RequestRecord>,
        procedures: &[ProcedureRecord],
    ) -> Result<()> {
        let mut canceled = Vec::new();
        for request in open.iter() {
            if let Process::Mop(name) = &request.process
                && request.state == RequestState::Pending
                && !procedures.iter().any(|p| &p.spec.name == name)
            {
                self.store
                    .cancel_request(&running.session, &request.process)
                    .await?;
                info!(node = %self.config.node, process = %request.process, "procedure deleted; its pending request is canceled");
                self.tell(|o| {
                    o.work_ended(
                        &request.process,
                        WorkOutcome::Canceled,
                        Some("procedure deleted"),
                    );
                });
                canceled.push(request.id);
            }
        }
        open.retain(|r| !canceled.contains(&r.id));
        Ok(())
    }

    /// The node's labels: the configured ones, and the platform's (a Node's) over them; `None`
    /// when the platform's cannot be read now (selectors are then tried again later).
    pub(super) async fn labels(&self) -> Option<BTreeMap<String, String>> {
        let mut labels = self.config.node_labels.clone();
        match self.actions.labels().await {
            Ok(platform) => labels.extend(platform),
            Err(e) => {
                warn!(node = %self.config.node, error = %e, "cannot read the node's labels");
                return None;
            }
        }
        Some(labels)
    }

    /// The node's slot group as it queues: `--group`, or the value of its `--group-by` label
    /// (no value: no group). `None` leaves the recorded group: no group is configured, or the
    /// labels cannot be read now.
    pub(super) async fn group(&self) -> Option<Option<String>> {
        if let Some(group) = &self.config.group {
            return Some(Some(group.clone()));
        }
        let key = self.config.group_by.as_ref()?;
        Some(self.labels().await?.get(key).cloned())
    }

    pub(super) async fn procedure_map(&self) -> Result<Procedures> {
        Ok(self
            .store
            .procedures()
            .await?
            .into_iter()
            .map(|p| (p.spec.name.clone(), p))
            .collect())
    }

    pub(super) fn sentinel_source(&self, source: &str) -> bool {
        self.config
            .watched_reboot_sentinels()
            .iter()
            .chain(std::iter::once(&self.config.maintenance_required))
            .any(|p| p.as_os_str() == source)
    }

    /// When the node may take a slot: now, or when the backoff of its requests ends, or, with
    /// maintenance hours, when they next start after that.
    pub(super) async fn eligible_at(&self, processes: &[&Process]) -> Result<Millis> {
        let backoffs = self.store.backoffs(&self.config.node).await?;
        Ok(rota_core::eligible_at(
            &backoffs,
            processes,
            now_millis(),
            self.config.hours.as_ref(),
        ))
    }
}

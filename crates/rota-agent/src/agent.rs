//! The agent loop: read the node's record from the store, take the one step its state calls
//! for, persist the result, repeat. Every step starts from persisted state, so an agent killed
//! at any point continues where it stopped when it starts again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rota_core::{Effect, Event, NodeState, Process};
use rota_sentinel::{SentinelWatcher, Snapshot, WatcherOptions};
use rota_store::{
    Acquire, Millis, NodeFields, NodeRecord, RequestRecord, RequestState, Session, Store,
    Transition, WindowChange, now_millis,
};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::actions::{NodeActions, RebootHandle};
use crate::config::AgentConfig;
use crate::error::{ActionError, Error, Result};

/// Pause before retrying a step whose store write or node action failed transiently.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub struct Agent {
    config: AgentConfig,
    store: Arc<dyn Store>,
    actions: Arc<dyn NodeActions>,
    cancel: CancellationToken,
}

/// What one agent incarnation needs while it runs.
struct Running {
    session: Session,
    boot_id: String,
    sentinels: watch::Receiver<Snapshot>,
    changes: watch::Receiver<u64>,
    /// The reboot command this incarnation started, until it exits.
    reboot: Option<RebootHandle>,
    /// The sentinels changed since requests were last synced with them.
    sentinels_dirty: bool,
}

fn millis(time: SystemTime) -> Millis {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn instant_at(at: Millis) -> Instant {
    let wait = u64::try_from(at.saturating_sub(now_millis())).unwrap_or(0);
    Instant::now() + Duration::from_millis(wait)
}

fn ms(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Reads the kernel's boot id (or the file standing in for it).
pub fn read_boot_id(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::BootId {
        path: path.to_path_buf(),
        source,
    })?;
    let id = text.trim();
    if id.is_empty() {
        return Err(Error::EmptyBootId {
            path: path.to_path_buf(),
        });
    }
    Ok(id.to_string())
}

impl Agent {
    pub fn new(
        config: AgentConfig,
        store: Arc<dyn Store>,
        actions: Arc<dyn NodeActions>,
        cancel: CancellationToken,
    ) -> Agent {
        Agent {
            config,
            store,
            actions,
            cancel,
        }
    }

    fn sentinel_paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self
            .config
            .reboot_sentinels
            .iter()
            .map(|p| self.config.host_path(p))
            .collect();
        paths.push(self.config.host_path(&self.config.maintenance_required));
        paths
    }

    /// Runs until canceled (graceful shutdown) or until a fatal error.
    pub async fn run(self) -> Result<()> {
        let watcher = SentinelWatcher::spawn(
            self.sentinel_paths(),
            WatcherOptions {
                safety_recheck: self.config.safety_recheck,
            },
            self.cancel.child_token(),
        )?;
        let boot_id = read_boot_id(&self.config.boot_id_file)?;
        // Independent: a restart after a reboot waits for neither before the other.
        let (configured, session) = tokio::join!(
            self.configure_concurrency(),
            self.store
                .open_session(&self.config.node, self.config.session_ttl)
        );
        configured?;
        let session = session?;
        info!(node = %self.config.node, session = session.id, boot_id, "agent started");
        let superseded = Arc::new(Mutex::new(false));
        let heartbeat = tokio::spawn(heartbeat(
            self.store.clone(),
            session.clone(),
            self.config.session_ttl,
            self.cancel.clone(),
            superseded.clone(),
        ));
        let mut running = Running {
            session,
            boot_id,
            sentinels: watcher.subscribe(),
            changes: self.store.changes(),
            reboot: None,
            sentinels_dirty: true,
        };
        let result = self.run_steps(&mut running).await;
        self.cancel.cancel();
        let _ = heartbeat.await;
        if *superseded.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(Error::Superseded {
                node: self.config.node.clone(),
            });
        }
        if let Err(e) = watcher.join().await {
            warn!(error = %e, "sentinel watcher ended with an error");
        }
        if let Err(e) = self.store.close_session(&running.session).await {
            warn!(error = %e, "could not close the session");
        }
        result
    }

    /// Sets the fleet's concurrency if this agent is configured with one that differs.
    async fn configure_concurrency(&self) -> Result<()> {
        let Some(concurrency) = self.config.concurrency else {
            return Ok(());
        };
        let current = self.store.concurrency().await?;
        if current != Some(concurrency) {
            if let Some(current) = current {
                warn!(
                    from = current,
                    to = concurrency,
                    "changing the fleet's concurrency"
                );
            }
            self.store.set_concurrency(concurrency).await?;
        }
        Ok(())
    }

    async fn run_steps(&self, running: &mut Running) -> Result<()> {
        while !self.cancel.is_cancelled() {
            let record = self.store.node(&self.config.node).await?.ok_or_else(|| {
                rota_store::Error::NoSuchNode {
                    node: self.config.node.clone(),
                }
            })?;
            match self.step(running, &record).await {
                Ok(()) => {}
                Err(Error::Store(rota_store::Error::Conflict { .. })) => {
                    info!(node = %self.config.node, "state changed under this agent; re-reading");
                }
                Err(Error::Store(rota_store::Error::Fenced { .. })) => {
                    // The slot or the session is gone: take no disruptive step, re-read.
                    warn!(node = %self.config.node, "fenced: this agent no longer owns the step");
                    self.pause(running).await?;
                }
                Err(Error::Store(e)) => {
                    warn!(node = %self.config.node, error = %e, "store error; retrying");
                    self.pause(running).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn pause(&self, running: &mut Running) -> Result<()> {
        self.wait(running, Some(Instant::now() + RETRY_PAUSE), None)
            .await
    }

    /// Waits for anything that may change what the next step is: a sentinel, the deadline,
    /// the slow store re-read, shutdown, and, when `store_changes` is given, the store's change
    /// counter reaching that value.
    async fn wait(
        &self,
        running: &mut Running,
        until: Option<Instant>,
        store_changes: Option<u64>,
    ) -> Result<()> {
        let poll = Instant::now() + self.config.store_poll;
        let until = until.map_or(poll, |u| u.min(poll));
        let changes = &mut running.changes;
        let store_changed = async move {
            match store_changes {
                Some(target) => {
                    let _ = changes.wait_for(|n| *n >= target).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.cancel.cancelled() => Ok(()),
            changed = running.sentinels.changed() => {
                running.sentinels_dirty = true;
                // The watcher ends with the agent's token; only an early end is an error.
                if changed.is_err() && !self.cancel.is_cancelled() {
                    return Err(Error::WatcherStopped {
                        node: self.config.node.clone(),
                    });
                }
                Ok(())
            }
            () = store_changed => Ok(()),
            () = tokio::time::sleep_until(until) => Ok(()),
        }
    }

    async fn step(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        match record.state {
            NodeState::Idle => self.idle(running, record).await,
            NodeState::Queued => self.queued(running, record).await,
            NodeState::Draining => self.draining(running, record).await,
            NodeState::Maintaining => self.maintaining(running, record).await,
            NodeState::Rebooting => self.rebooting(running, record).await,
            NodeState::Verifying => self.verifying(running, record).await,
            NodeState::Failed => {
                // Fail closed: keep slot and cordon until an operator retries or unlocks.
                self.wait(running, None, None).await
            }
        }
    }

    /// Applies `event` to the node's lifecycle through the pure core and persists the result.
    /// An `Uncordon` effect is carried out first, while the node still holds its slot.
    async fn commit(
        &self,
        running: &Running,
        record: &NodeRecord,
        event: Event,
        mut transition: Transition,
    ) -> Result<NodeRecord> {
        let (next, effects) = record.lifecycle().apply(&event)?;
        if effects.contains(&Effect::Uncordon) {
            self.uncordon(running).await?;
        }
        transition.from = record.state;
        transition.to = next.state;
        transition.fields.pre_cordoned = Some(next.pre_cordoned);
        transition.fields.cordoned_by_rota = Some(next.cordoned_by_rota);
        let updated = self.store.transition(&running.session, transition).await?;
        info!(node = %self.config.node, event = %event, from = %record.state, to = %updated.state, "transition");
        Ok(updated)
    }

    /// Uncordons the node, retrying until it works: releasing the slot of a node that is
    /// still cordoned would let one more node out than `concurrency` allows.
    async fn uncordon(&self, running: &Running) -> Result<()> {
        loop {
            self.store
                .fence(&running.session, self.config.session_ttl)
                .await?;
            match self.actions.uncordon().await {
                Ok(()) => return Ok(()),
                Err(e) => warn!(node = %self.config.node, error = %e, "uncordon failed; retrying"),
            }
            tokio::select! {
                () = self.cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(RETRY_PAUSE) => {}
            }
        }
    }

    /// Turns present sentinels into requests and withdraws pending sentinel requests whose
    /// files are gone. A reboot sentinel older than the node's last reboot was satisfied by
    /// it and asks for nothing (so a sentinel that survives the reboot cannot loop).
    async fn sync_requests(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<Vec<RequestRecord>> {
        if !running.sentinels_dirty {
            return Ok(self.store.open_requests(&self.config.node).await?);
        }
        let snapshot = running.sentinels.borrow_and_update().clone();
        let mut wanted: Vec<(Process, String)> = Vec::new();
        for path in &self.config.reboot_sentinels {
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
        // Record first, read after: recording is idempotent (an open request for the process
        // is returned as it is), and a new sentinel's request is then never behind a read.
        for (process, source) in &wanted {
            let (_, created) = self
                .store
                .add_request(&running.session, process, source)
                .await?;
            if created {
                info!(node = %self.config.node, %process, source, "request recorded");
            }
        }
        let mut open = self.store.open_requests(&self.config.node).await?;
        let mut withdrawn = Vec::new();
        for request in &open {
            let from_sentinel = self.sentinel_source(&request.source);
            let still_wanted = wanted.iter().any(|(p, _)| p == &request.process);
            if request.state == RequestState::Pending && from_sentinel && !still_wanted {
                self.store
                    .cancel_request(&running.session, &request.process)
                    .await?;
                info!(node = %self.config.node, process = %request.process, "sentinel withdrawn");
                withdrawn.push(request.id);
            }
        }
        open.retain(|r| !withdrawn.contains(&r.id));
        // Only now: a failed write above leaves the flag set, so the next step tries again.
        running.sentinels_dirty = false;
        Ok(open)
    }

    fn sentinel_source(&self, source: &str) -> bool {
        self.config
            .reboot_sentinels
            .iter()
            .chain(std::iter::once(&self.config.maintenance_required))
            .any(|p| p.as_os_str() == source)
    }

    /// When the node may take a slot: now, or when the backoff of its requests ends.
    async fn eligible_at(&self, open: &[RequestRecord]) -> Result<Millis> {
        let backoffs = self.store.backoffs(&self.config.node).await?;
        let until = backoffs
            .iter()
            .filter(|b| open.iter().any(|r| r.process == b.process))
            .map(|b| b.until)
            .max()
            .unwrap_or(0);
        Ok(until.max(now_millis()))
    }

    async fn idle(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if record.cordoned_by_rota {
            // An operator unlocked the node mid-window: undo our cordon.
            if let Err(e) = self.actions.uncordon().await {
                warn!(node = %self.config.node, error = %e, "uncordon after unlock failed");
                return self.pause(running).await;
            }
            self.store
                .transition(
                    &running.session,
                    Transition::new(NodeState::Idle, NodeState::Idle),
                )
                .await?;
            return Ok(());
        }
        let open = self.sync_requests(running, record).await?;
        if open.is_empty() {
            return self.wait(running, None, None).await;
        }
        let queued_at = self.eligible_at(&open).await?;
        self.commit(
            running,
            record,
            Event::Requested,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(queued_at),
            }),
        )
        .await?;
        Ok(())
    }

    async fn queued(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let open = self.sync_requests(running, record).await?;
        if open.is_empty() {
            let window = match record.slot {
                // Taken just before a restart, for requests withdrawn since; the node was
                // never cordoned, so the slot can go back at once.
                Some(_) => WindowChange::Cancel {
                    reason: "no request left when the slot was granted".into(),
                },
                None => WindowChange::Queue { queued_at: None },
            };
            self.commit(
                running,
                record,
                Event::Canceled,
                Transition::new(NodeState::Queued, NodeState::Idle).window(window),
            )
            .await?;
            return Ok(());
        }
        let Some(queued_at) = record.queued_at else {
            let queued_at = self.eligible_at(&open).await?;
            self.store
                .transition(
                    &running.session,
                    Transition::new(NodeState::Queued, NodeState::Queued).window(
                        WindowChange::Queue {
                            queued_at: Some(queued_at),
                        },
                    ),
                )
                .await?;
            return Ok(());
        };
        if queued_at > now_millis() {
            return self.wait(running, Some(instant_at(queued_at)), None).await;
        }
        // Read the counter before asking: a change in between then wakes this waiter at once.
        let seen = *running.changes.borrow_and_update();
        // The cordon is read along with the request for a slot, so that a grant goes on to open
        // the window without another round trip: that is most of a slot handoff.
        let (acquired, cordoned) = tokio::join!(
            self.store.try_acquire_slot(&running.session),
            self.actions.is_cordoned()
        );
        if let Acquire::Wait { changes } = acquired? {
            let target = seen.saturating_add(changes);
            return self.wait(running, None, Some(target)).await;
        }
        let pre_cordoned = match cordoned {
            Ok(cordoned) => cordoned,
            Err(e) => {
                warn!(node = %self.config.node, error = %e, "cannot tell whether the node is cordoned");
                return self.pause(running).await;
            }
        };
        let process = open.first().map(|r| r.process.clone());
        self.commit(
            running,
            record,
            Event::SlotAcquired { pre_cordoned },
            Transition::new(NodeState::Queued, NodeState::Draining)
                .process(process)
                .window(WindowChange::Open),
        )
        .await?;
        Ok(())
    }

    /// Lets requests that arrived during the window join it (one drain serves them all).
    async fn join_pending(&self, running: &mut Running, record: &NodeRecord) -> Result<NodeRecord> {
        let open = self.sync_requests(running, record).await?;
        if !open.iter().any(|r| r.state == RequestState::Pending) {
            return Ok(record.clone());
        }
        self.commit(
            running,
            record,
            Event::Requested,
            Transition::new(record.state, record.state).window(WindowChange::Join),
        )
        .await
    }

    async fn draining(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let record = self.join_pending(running, record).await?;
        self.store
            .fence(&running.session, self.config.session_ttl)
            .await?;
        let drained = tokio::select! {
            () = self.cancel.cancelled() => return Ok(()),
            drained = tokio::time::timeout(self.config.drain_timeout, self.actions.drain()) => drained,
        };
        let cause = match drained {
            Ok(Ok(())) => {
                self.commit(
                    running,
                    &record,
                    Event::Drained,
                    Transition::new(NodeState::Draining, NodeState::Maintaining),
                )
                .await?;
                return Ok(());
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "drain did not finish within the drain timeout of {}s",
                self.config.drain_timeout.as_secs()
            ),
        };
        warn!(node = %self.config.node, cause, "drain failed; giving the slot back");
        self.commit(
            running,
            &record,
            Event::DrainFailed,
            Transition::new(NodeState::Draining, NodeState::Queued).window(WindowChange::Fail {
                cause,
                policy: self.config.backoff,
                keep_slot: false,
            }),
        )
        .await?;
        Ok(())
    }

    async fn maintaining(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let record = self.join_pending(running, record).await?;
        let active: Vec<Process> = self
            .store
            .open_requests(&self.config.node)
            .await?
            .into_iter()
            .filter(|r| r.state == RequestState::Active)
            .map(|r| r.process)
            .collect();
        if active.contains(&Process::Maintenance) && !self.kustodian_done(running).await? {
            return self.wait(running, None, None).await;
        }
        if !active.contains(&Process::Reboot) {
            self.commit(
                running,
                &record,
                Event::WorkDone,
                Transition::new(NodeState::Maintaining, NodeState::Verifying),
            )
            .await?;
            return Ok(());
        }
        // The boot id goes to the store before the reboot starts: after it, only a different
        // boot id proves that the reboot happened.
        let now = now_millis();
        let record = self
            .commit(
                running,
                &record,
                Event::RebootStarted,
                Transition::new(NodeState::Maintaining, NodeState::Rebooting)
                    .process(Some(Process::Reboot))
                    .fields(NodeFields {
                        boot_id: Some(Some(running.boot_id.clone())),
                        reboot_started_at: Some(Some(now)),
                        reboot_deadline: Some(Some(
                            now.saturating_add(ms(self.config.reboot_timeout)),
                        )),
                        last_reboot_at: Some(now),
                        ..NodeFields::default()
                    }),
            )
            .await?;
        self.store
            .fence(&running.session, self.config.session_ttl)
            .await?;
        info!(node = %self.config.node, "rebooting");
        match self.actions.reboot().await {
            Ok(handle) => running.reboot = Some(handle),
            Err(e) => self.reboot_failed(running, &record, &e).await?,
        }
        Ok(())
    }

    /// kustodian's protocol: announce `/var/maintenance-in-progress` once drained, and consider
    /// the maintenance done when the host script has removed `/var/maintenance-required`.
    async fn kustodian_done(&self, running: &Running) -> Result<bool> {
        let in_progress = self.config.host_path(&self.config.maintenance_in_progress);
        let required = self.config.host_path(&self.config.maintenance_required);
        let pending = running
            .sentinels
            .borrow()
            .get(&required)
            .is_some_and(|s| s.present.is_some());
        if pending {
            if !in_progress.exists() {
                self.store
                    .fence(&running.session, self.config.session_ttl)
                    .await?;
                std::fs::write(&in_progress, b"").map_err(|source| Error::HostFile {
                    what: "creating",
                    path: in_progress.clone(),
                    source,
                })?;
                info!(node = %self.config.node, path = %in_progress.display(), "maintenance in progress");
            }
            return Ok(false);
        }
        match std::fs::remove_file(&in_progress) {
            Ok(()) => info!(node = %self.config.node, "maintenance done"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::HostFile {
                    what: "removing",
                    path: in_progress,
                    source,
                });
            }
        }
        Ok(true)
    }

    async fn reboot_failed(
        &self,
        running: &Running,
        record: &NodeRecord,
        cause: &(dyn std::fmt::Display + Sync),
    ) -> Result<()> {
        warn!(node = %self.config.node, %cause, "reboot failed; the node keeps its slot and cordon");
        self.commit(
            running,
            record,
            Event::RebootTimedOut,
            Transition::new(NodeState::Rebooting, NodeState::Failed).window(WindowChange::Fail {
                cause: cause.to_string(),
                policy: self.config.backoff,
                keep_slot: true,
            }),
        )
        .await?;
        Ok(())
    }

    async fn rebooting(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if record.boot_id.as_deref() != Some(running.boot_id.as_str()) {
            info!(node = %self.config.node, boot_id = running.boot_id, "node came back with a new boot id");
            self.commit(
                running,
                record,
                Event::BootChanged,
                Transition::new(NodeState::Rebooting, NodeState::Verifying),
            )
            .await?;
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
        // Never start the reboot again: a restarted agent only waits for the outcome.
        let Some(handle) = running.reboot.as_mut() else {
            return self.wait(running, Some(instant_at(deadline)), None).await;
        };
        let exited = tokio::select! {
            () = self.cancel.cancelled() => return Ok(()),
            () = tokio::time::sleep_until(instant_at(deadline)) => return Ok(()),
            exited = handle => exited,
        };
        running.reboot = None;
        match exited {
            Ok(Ok(())) | Err(_) => Ok(()),
            Ok(Err(e)) => self.reboot_failed(running, record, &e).await,
        }
    }

    async fn verifying(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let deadline = record.since.saturating_add(ms(self.config.verify_timeout));
        match self.actions.health().await {
            Ok(()) => {
                self.commit(
                    running,
                    record,
                    Event::Healthy,
                    Transition::new(NodeState::Verifying, NodeState::Idle)
                        .window(WindowChange::Finish),
                )
                .await?;
                Ok(())
            }
            Err(e) if now_millis() >= deadline => self.unhealthy(running, record, &e).await,
            Err(e) => {
                info!(node = %self.config.node, error = %e, "not healthy yet");
                let next = Instant::now() + self.config.health_interval;
                self.wait(running, Some(next), None).await
            }
        }
    }

    async fn unhealthy(
        &self,
        running: &Running,
        record: &NodeRecord,
        error: &ActionError,
    ) -> Result<()> {
        let cause = format!(
            "not healthy {}s after maintenance: {error}",
            self.config.verify_timeout.as_secs()
        );
        warn!(node = %self.config.node, cause, "node failed verification; it keeps its slot and cordon");
        self.commit(
            running,
            record,
            Event::Unhealthy,
            Transition::new(NodeState::Verifying, NodeState::Failed).window(WindowChange::Fail {
                cause,
                policy: self.config.backoff,
                keep_slot: true,
            }),
        )
        .await?;
        Ok(())
    }
}

/// Keeps the session alive; a refused heartbeat means another agent took over the node.
async fn heartbeat(
    store: Arc<dyn Store>,
    session: Session,
    ttl: Duration,
    cancel: CancellationToken,
    superseded: Arc<Mutex<bool>>,
) {
    let period = ttl / 3;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        match store.heartbeat(&session, ttl).await {
            Ok(()) => {}
            Err(rota_store::Error::Fenced { .. }) => {
                *superseded.lock().unwrap_or_else(|e| e.into_inner()) = true;
                cancel.cancel();
                return;
            }
            Err(e) => warn!(error = %e, "heartbeat failed; retrying"),
        }
    }
}

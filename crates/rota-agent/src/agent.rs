//! The agent loop: read the node's record from the store, take the one step its state calls
//! for, persist the result, repeat. Every step starts from persisted state, so an agent killed
//! at any point continues where it stopped when it starts again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rota_core::{Effect, Event, NodeState, ProcedureEntry, Process};
use rota_sentinel::{SentinelWatcher, Snapshot, WatcherOptions};
use rota_store::{
    Acquire, Blocked, Millis, NodeFields, NodeRecord, Outcome, ProcedureRecord, RequestRecord,
    RequestState, RetryPauses, Session, Store, Transition, WAKE_ALL, WindowChange, now_millis,
};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::actions::{NodeActions, RebootHandle};
use crate::blockers::{Block, BlockKind, Blocker};
use crate::config::AgentConfig;
use crate::error::{ActionError, Error, Result};
use crate::observer::{AgentObserver, WorkOutcome};
use crate::procedures::{ORPHAN_POLL, RunState, Runner, attempt_run};
use crate::reboot_marker::RebootMarker;
use crate::sentinel_command;

mod gate;

/// Pause before retrying a step whose store write or node action failed transiently.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub struct Agent {
    config: AgentConfig,
    /// Which recorded reboot this boot started.
    reboot_marker: RebootMarker,
    store: Arc<dyn Store>,
    actions: Arc<dyn NodeActions>,
    cancel: CancellationToken,
    observers: Vec<Arc<dyn AgentObserver>>,
    blockers: Vec<Arc<dyn Blocker>>,
}

/// What one agent incarnation needs while it runs.
struct Running {
    session: Session,
    boot_id: String,
    /// Ends this incarnation: shutdown, or the loss of its session.
    cancel: CancellationToken,
    sentinels: watch::Receiver<Snapshot>,
    changes: watch::Receiver<u64>,
    /// The reboot command this incarnation started, until it exits.
    reboot: Option<RebootHandle>,
    /// The sentinels changed since requests were last synced with them.
    sentinels_dirty: bool,
    /// The store's change counter as of the last read of the node: a wait without a target of
    /// its own ends when it has jumped by [`WAKE_ALL`] since (a new concurrency, a pause or
    /// resume, an operator's wake), so a jump between that read and the wait is not missed.
    changes_at_read: u64,
    runner: Runner,
    /// Notified when a procedure this agent started exits.
    procedure_exits: Arc<Notify>,
    /// Procedures whose request this incarnation has made (or found) on this node.
    ensured: HashSet<String>,
    /// When procedures were last looked for.
    procedures_checked: Option<Instant>,
    /// The change count at which the queue's last answer said this node's turn may come.
    /// Before it, another look almost always says "wait" again (a store may answer it from
    /// memory), so the look reads nothing else that only a grant needs.
    turn_at: Option<u64>,
    /// The record (state and since) that this incarnation's last fenced transition wrote: the
    /// disruptive step right after it needs no fence of its own. Any wait ends the proof.
    fenced: Option<(NodeState, Millis)>,
    /// A health check made along with the write that started a verification (its `since`), for
    /// that verification's first step. Any wait makes it stale.
    health_ahead: Option<(Millis, std::result::Result<(), ActionError>)>,
    /// When the node's current verification (by its start) was first found healthy, for the
    /// release delay. Not persisted: a restart starts the delay again, the safe direction.
    healthy_since: Option<(Millis, Instant)>,
    /// The pauses while the store is unavailable; a step that goes through resets them.
    unavailable: RetryPauses,
    /// Whether the maintenance window was open at the last check, so that each opening and
    /// closing is logged once.
    window_seen: Option<bool>,
    /// The blockers' last answer: asked again after `blocker_interval`, or at once in another
    /// state (the check right before the reboot never reuses the one before the slot).
    checked: Option<Checked>,
    /// Whether the node is marked as waiting for maintenance ([`NodeActions::mark_pending`]),
    /// as this incarnation last set it; unknown at its start.
    pending: Option<bool>,
}

/// How an incarnation (one session) of the agent ended.
enum Ended {
    /// Shutdown, or a fatal error.
    Stopped(Result<()>),
    Lost(SessionLost),
}

/// Why a session could not be renewed.
enum SessionLost {
    /// Another agent opened a newer session for the node.
    Superseded,
    /// It ran out while still the node's latest.
    Expired,
}

/// What the blockers said, when, and in which state.
struct Checked {
    at: Instant,
    state: NodeState,
    blocks: Vec<Block>,
}

/// A node's procedures by name.
type Procedures = HashMap<String, ProcedureRecord>;

/// Whether a request needs the node drained: a reboot and kustodian's maintenance always do,
/// a procedure when it says so (an unknown one, to be safe, does).
fn needs_drain(request: &RequestRecord, procedures: &Procedures) -> bool {
    match &request.process {
        Process::Mop(name) => procedures.get(name).is_none_or(|p| p.spec.needs_drain()),
        Process::Reboot | Process::Maintenance => true,
    }
}

/// Whether a window's node is out of service: rota cordoned it (and drained it), or it was
/// cordoned before. A window whose work needed no drain is neither.
fn drained(record: &NodeRecord) -> bool {
    record.cordoned_by_rota || record.pre_cordoned
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
            reboot_marker: RebootMarker::new(&config.host_path(&config.state_dir)),
            config,
            store,
            actions,
            cancel,
            observers: Vec::new(),
            blockers: Vec::new(),
        }
    }

    /// Adds a blocker, asked before the node takes a slot and again right before its reboot.
    pub fn block_with(mut self, blocker: Arc<dyn Blocker>) -> Agent {
        self.blockers.push(blocker);
        self
    }

    /// Adds an observer that is told about sessions, store accesses, transitions and work
    /// results as they happen.
    pub fn observe(mut self, observer: Arc<dyn AgentObserver>) -> Agent {
        self.observers.push(observer);
        self
    }

    fn tell(&self, what: impl Fn(&dyn AgentObserver)) {
        for observer in &self.observers {
            what(observer.as_ref());
        }
    }

    fn sentinel_paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self
            .config
            .watched_reboot_sentinels()
            .iter()
            .map(|p| self.config.host_path(p))
            .collect();
        paths.push(self.config.host_path(&self.config.maintenance_required));
        paths
    }

    /// Runs until canceled (graceful shutdown) or until a fatal error.
    ///
    /// Each session is one incarnation of the agent. A session that expired (the store out of
    /// reach, or this process frozen, for longer than `--session-ttl`) ends its incarnation:
    /// as nobody took the node over, the next opens a new session and carries on from the
    /// stored state, as a restarted process would. A superseded session stops the agent.
    pub async fn run(self) -> Result<()> {
        let watcher = SentinelWatcher::spawn(
            self.sentinel_paths(),
            WatcherOptions {
                safety_recheck: self.config.safety_recheck,
            },
            self.cancel.child_token(),
        )?;
        let boot_id = read_boot_id(&self.config.boot_id_file)?;
        // Stopped when this function returns, however it does.
        let command_cancel = self.cancel.child_token();
        let _stop_command = command_cancel.clone().drop_guard();
        let sentinel_command = self.config.reboot_sentinel_command.clone().map(|command| {
            tokio::spawn(sentinel_command::follow(
                command,
                self.config
                    .host_path(&self.config.sentinel_command_verdict()),
                self.config.exec_prefix.clone(),
                self.config.node.clone(),
                command_cancel,
            ))
        });
        let mut runner = Runner::new(
            self.config.host_path(&self.config.state_dir).join("runs"),
            self.config.host_path(&self.config.marker_dir),
            self.config.exec_prefix.clone(),
            self.config.node.as_str(),
        );
        for stale in runner.clean_stale_markers()? {
            info!(node = %self.config.node, marker = %stale.display(), "removed a stale procedure marker");
        }
        let result = loop {
            let Some(session) = self.open_session().await? else {
                break Ok(());
            };
            info!(node = %self.config.node, session = session.id, boot_id, "agent started");
            let (ended, returned) = self
                .incarnation(session, boot_id.clone(), &watcher, runner)
                .await;
            runner = returned;
            match ended {
                Ended::Stopped(result) => break result,
                Ended::Lost(SessionLost::Expired) => {
                    warn!(
                        node = %self.config.node,
                        "the session expired (not renewed within --session-ttl: the store was out of reach, or this process was frozen); nobody took the node over, so a new one carries on"
                    );
                }
                Ended::Lost(SessionLost::Superseded) => {
                    return Err(Error::Superseded {
                        node: self.config.node.clone(),
                    });
                }
            }
        };
        self.cancel.cancel();
        if let Err(e) = watcher.join().await {
            warn!(error = %e, "sentinel watcher ended with an error");
        }
        if let Some(task) = sentinel_command
            && let Err(e) = task.await
        {
            warn!(error = %e, "the reboot sentinel command's task ended abnormally");
        }
        result
    }

    /// Opens the node's session, waiting for a store that restarts; `None` on shutdown.
    async fn open_session(&self) -> Result<Option<Session>> {
        let mut pauses = RetryPauses::new();
        loop {
            // Independent: a restart after a reboot waits for neither before the other.
            let (configured, session) = tokio::join!(
                self.configure_concurrency(),
                self.store
                    .open_session(&self.config.node, self.config.session_ttl)
            );
            match configured.and(session.map_err(Error::from)) {
                Ok(session) => return Ok(Some(session)),
                // A database that restarts as the agent starts is waited for; anything else
                // (a refused database, a missing permission) stops the agent with its error.
                Err(Error::Store(e)) if e.is_unavailable() => {
                    let pause = pauses.next_pause();
                    self.unavailable(&e, pause);
                    tokio::select! {
                        () = self.cancel.cancelled() => return Ok(None),
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs the steps under one session until shutdown, a fatal error or the session's loss.
    async fn incarnation(
        &self,
        session: Session,
        boot_id: String,
        watcher: &SentinelWatcher,
        runner: Runner,
    ) -> (Ended, Runner) {
        self.tell(|o| o.session(true));
        let cancel = self.cancel.child_token();
        let lost = Arc::new(Mutex::new(None));
        let heartbeat = tokio::spawn(heartbeat(
            self.store.clone(),
            session.clone(),
            self.config.session_ttl,
            cancel.clone(),
            lost.clone(),
            self.observers.clone(),
        ));
        let mut running = Running {
            session,
            boot_id,
            cancel: cancel.clone(),
            sentinels: watcher.subscribe(),
            changes: self.store.changes(),
            reboot: None,
            sentinels_dirty: true,
            changes_at_read: 0,
            procedure_exits: runner.exited(),
            runner,
            ensured: HashSet::new(),
            procedures_checked: None,
            turn_at: None,
            fenced: None,
            health_ahead: None,
            healthy_since: None,
            window_seen: None,
            pending: None,
            checked: None,
            unavailable: RetryPauses::new(),
        };
        let result = self.run_steps(&mut running).await;
        self.tell(|o| o.session(false));
        cancel.cancel();
        let _ = heartbeat.await;
        let lost = lost.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(lost) = lost {
            return (Ended::Lost(lost), running.runner);
        }
        if let Err(e) = self.store.close_session(&running.session).await {
            warn!(error = %e, "could not close the session");
        }
        (Ended::Stopped(result), running.runner)
    }

    /// Reports a store that cannot be reached for now; the caller tries again after `pause`.
    fn unavailable(&self, e: &rota_store::Error, pause: Duration) {
        self.tell(|o| o.store_access(false));
        warn!(node = %self.config.node, error = %e, pause = ?pause, "the store is unavailable; retrying");
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
        while !running.cancel.is_cancelled() {
            let changes = *running.changes.borrow();
            if changes >= running.changes_at_read.saturating_add(WAKE_ALL) {
                // Everyone looks again, also for procedures: a new one may be what woke us.
                running.procedures_checked = None;
            }
            running.changes_at_read = changes;
            let record = match self.store.node(&self.config.node).await {
                Ok(record) => record.ok_or_else(|| rota_store::Error::NoSuchNode {
                    node: self.config.node.clone(),
                })?,
                Err(e) if e.is_unavailable() => {
                    self.pause_unavailable(running, &e).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            self.tell(|o| {
                o.store_access(true);
                o.record(&record);
            });
            // The node's read may come from the store's memory (Kubernetes): only a step that
            // went through shows the store answers again.
            match self.step(running, &record).await {
                Ok(()) => running.unavailable.reset(),
                Err(Error::Store(e)) if e.is_unavailable() => {
                    self.pause_unavailable(running, &e).await?;
                }
                Err(Error::Store(rota_store::Error::Conflict { .. })) => {
                    info!(node = %self.config.node, "state changed under this agent; re-reading");
                }
                Err(Error::Store(rota_store::Error::Fenced { .. })) => {
                    // The slot or the session is gone: take no disruptive step, re-read.
                    warn!(node = %self.config.node, "fenced: this agent no longer owns the step");
                    self.pause(running).await?;
                }
                Err(Error::Store(e)) => {
                    self.tell(|o| o.store_access(false));
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

    /// Waits before asking a store that is unavailable again, longer after each failure in a row.
    async fn pause_unavailable(&self, running: &mut Running, e: &rota_store::Error) -> Result<()> {
        let pause = running.unavailable.next_pause();
        self.unavailable(e, pause);
        self.wait(running, Some(Instant::now() + pause), None).await
    }

    /// Waits for anything that may change what the next step is: a sentinel, the deadline,
    /// the slow store re-read, shutdown, and the store's change counter reaching
    /// `store_changes`, or without it, jumping by [`WAKE_ALL`] since the node was read.
    async fn wait(
        &self,
        running: &mut Running,
        until: Option<Instant>,
        store_changes: Option<u64>,
    ) -> Result<()> {
        running.fenced = None;
        running.health_ahead = None;
        let mut poll = Instant::now() + self.config.store_poll;
        if let Some(checked) = running.procedures_checked {
            // New procedures do not notify: look for them on time even with a slow store poll.
            poll = poll.min(checked + self.config.procedure_poll);
        }
        let until = until.map_or(poll, |u| u.min(poll));
        let exits = running.procedure_exits.clone();
        let cancel = running.cancel.clone();
        let target =
            store_changes.unwrap_or_else(|| running.changes_at_read.saturating_add(WAKE_ALL));
        let changes = &mut running.changes;
        let store_changed = async move {
            if changes.wait_for(|n| *n >= target).await.is_err() {
                // A store whose counter is gone wakes nobody again.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = cancel.cancelled() => Ok(()),
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
            () = exits.notified() => Ok(()),
            () = tokio::time::sleep_until(until) => {
                // The periodic re-read (and the one after a failed step) is there to find what
                // nobody announced: it asks the store, not what the handle last saw.
                self.store.refresh(&self.config.node);
                Ok(())
            }
        }
    }

    async fn step(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        self.mark_pending(running, record).await;
        if record.blocked.is_some()
            && !matches!(record.state, NodeState::Queued | NodeState::Maintaining)
        {
            // Blocks are asked about only in those two states: one left behind is stale.
            self.tell(|o| o.blocked(None));
            return self.unblock(running, record).await;
        }
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

    /// Marks the node as waiting for maintenance from the moment it has work until it is idle
    /// again. Best effort: a mark that cannot be set only costs the scheduler's hint, and the
    /// next step tries again.
    async fn mark_pending(&self, running: &mut Running, record: &NodeRecord) {
        let pending = record.state != NodeState::Idle;
        if running.pending == Some(pending) {
            return;
        }
        match self.actions.mark_pending(pending).await {
            Ok(()) => running.pending = Some(pending),
            Err(e) => {
                warn!(node = %self.config.node, error = %e, pending, "cannot mark the node as waiting for maintenance; trying again at the next step");
            }
        }
    }

    /// Applies `event` to the node's lifecycle through the pure core and persists the result.
    /// An `Uncordon` effect is carried out first, while the node still holds its slot.
    async fn commit(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
        transition: Transition,
    ) -> Result<NodeRecord> {
        self.commit_as(running, record, event, transition, false)
            .await
    }

    /// [`Agent::commit`] for a step that a disruptive one follows at once: the transition
    /// carries the fence (see [`Store::fenced_transition`]).
    async fn commit_fenced(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
        transition: Transition,
    ) -> Result<NodeRecord> {
        let updated = self
            .commit_as(running, record, event, transition, true)
            .await?;
        running.fenced = Some((updated.state, updated.since));
        Ok(updated)
    }

    /// Proves right before a disruptive step that this session still holds the node's slot,
    /// unless the transition that led to `record` just proved it.
    async fn fence(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        if running.fenced.take() == Some((record.state, record.since)) {
            return Ok(());
        }
        self.store
            .fence(&running.session, self.config.session_ttl)
            .await?;
        Ok(())
    }

    async fn commit_as(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        event: Event,
        mut transition: Transition,
        fenced: bool,
    ) -> Result<NodeRecord> {
        let (next, effects) = record.lifecycle().apply(&event)?;
        if effects.contains(&Effect::Uncordon) {
            self.uncordon(running, record).await?;
        }
        transition.from = record.state;
        transition.to = next.state;
        transition.fields.pre_cordoned = Some(next.pre_cordoned);
        transition.fields.cordoned_by_rota = Some(next.cordoned_by_rota);
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
                .store
                .open_requests(&self.config.node)
                .await?
                .into_iter()
                .filter(|r| r.state == RequestState::Active)
                .map(|r| r.process)
                .collect(),
            _ => Vec::new(),
        };
        let updated = if fenced {
            self.store
                .fenced_transition(&running.session, transition, self.config.session_ttl)
                .await?
        } else {
            self.store.transition(&running.session, transition).await?
        };
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
    async fn uncordon(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let mut pauses = RetryPauses::new();
        loop {
            self.fence(running, record).await?;
            let pause = match self.actions.uncordon().await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let pause = pauses.next_pause();
                    warn!(node = %self.config.node, error = %e, pause = ?pause, "uncordon failed; retrying");
                    pause
                }
            };
            tokio::select! {
                () = running.cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Turns present sentinels into requests and withdraws pending sentinel requests whose
    /// files are gone (see `wanted`).
    async fn sync_requests(
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
        // Only now: a failed write above leaves the flag set, so the next step tries again.
        running.sentinels_dirty = false;
        Ok(open)
    }

    /// The node's open requests, with the pending sentinel requests whose sentinel is gone
    /// withdrawn, and what the sentinels ask for that no open request covers yet (the
    /// sentinels are looked at only when they changed). Procedures' requests are made here.
    async fn read_requests(
        &self,
        running: &mut Running,
        record: &NodeRecord,
    ) -> Result<(Vec<RequestRecord>, Vec<(Process, String)>)> {
        self.enqueue_procedures(running).await?;
        let dirty = running.sentinels_dirty;
        let wanted = if dirty {
            self.wanted(running, record)
        } else {
            Vec::new()
        };
        let mut open = self.store.open_requests(&self.config.node).await?;
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
    fn wanted(&self, running: &mut Running, record: &NodeRecord) -> Vec<(Process, String)> {
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
    async fn withdraw(
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
    /// (once ever per node: the store refuses a second one), and cancels pending requests of
    /// procedures that were deleted.
    async fn enqueue_procedures(&self, running: &mut Running) -> Result<()> {
        if running
            .procedures_checked
            .is_some_and(|at| at.elapsed() < self.config.procedure_poll)
        {
            return Ok(());
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
        for request in self.store.open_requests(&self.config.node).await? {
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
            }
        }
        running.procedures_checked = Some(Instant::now());
        Ok(())
    }

    /// The node's labels: the configured ones, and the platform's (a Node's) over them; `None`
    /// when the platform's cannot be read now (selectors are then tried again later).
    async fn labels(&self) -> Option<BTreeMap<String, String>> {
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

    async fn procedure_map(&self) -> Result<Procedures> {
        Ok(self
            .store
            .procedures()
            .await?
            .into_iter()
            .map(|p| (p.spec.name.clone(), p))
            .collect())
    }

    fn sentinel_source(&self, source: &str) -> bool {
        self.config
            .watched_reboot_sentinels()
            .iter()
            .chain(std::iter::once(&self.config.maintenance_required))
            .any(|p| p.as_os_str() == source)
    }

    /// When the node may take a slot: now, or when the backoff of its requests ends, or, with
    /// maintenance windows, when the next one opens after that.
    async fn eligible_at(&self, processes: &[&Process]) -> Result<Millis> {
        let backoffs = self.store.backoffs(&self.config.node).await?;
        let until = backoffs
            .iter()
            .filter(|b| processes.contains(&&b.process))
            .map(|b| b.until)
            .max()
            .unwrap_or(0);
        Ok(self.window_eligible(until.max(now_millis())))
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
        // New sentinels' requests are recorded by the write that queues the node: one write
        // per node when a whole fleet finds its sentinels at once.
        let (open, new) = self.read_requests(running, record).await?;
        self.tell(|o| o.requests(&open));
        if open.is_empty() && new.is_empty() {
            running.sentinels_dirty = false;
            return self.wait(running, None, None).await;
        }
        let processes: Vec<&Process> = open
            .iter()
            .map(|r| &r.process)
            .chain(new.iter().map(|(process, _)| process))
            .collect();
        let queued_at = self.eligible_at(&processes).await?;
        let mut queue =
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(queued_at),
            });
        for (process, source) in &new {
            queue = queue.request(process.clone(), source.clone());
        }
        self.commit(running, record, Event::Requested, queue)
            .await?;
        for (process, source) in &new {
            info!(node = %self.config.node, %process, source, "request recorded");
        }
        // Only now: a failed write above leaves the flag set, so the next step tries again.
        running.sentinels_dirty = false;
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
            let processes: Vec<&Process> = open.iter().map(|r| &r.process).collect();
            let queued_at = self.eligible_at(&processes).await?;
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
        if !self.window_open(running) {
            if record.slot.is_some() {
                // Granted just before a restart, never cordoned: the slot goes back at once.
                return self.postpone_grant(running).await;
            }
            return self.wait_for_window(running, record).await;
        }
        // Read the counter before asking: a change in between then wakes this waiter at once.
        let seen = *running.changes.borrow_and_update();
        // A failure budget that is used up pauses the fleet; a blocked node (a paused fleet
        // included) takes no slot, so the blockers are asked first.
        self.enforce_failure_budget().await?;
        if self.blocked(running, record, seen).await? {
            return Ok(());
        }
        // When the turn may have come (the changes the last answer named have happened), the
        // cordon is read along with the request for a slot, so that a grant goes on to open the
        // window without another round trip; a node's first ask after it queued, and a waiter
        // woken for anything else (a timer), read it only after a grant: when a fleet queues at
        // once, most of them are told to wait.
        let acquire = self.store.try_acquire_slot(&running.session);
        let (acquired, cordoned) = if running.turn_at.is_some_and(|turn| seen >= turn) {
            let (acquired, cordoned) = tokio::join!(acquire, self.actions.is_cordoned());
            (acquired?, Some(cordoned))
        } else {
            (acquire.await?, None)
        };
        if let Acquire::Wait { changes } = acquired {
            let target = seen.saturating_add(changes);
            running.turn_at = Some(target);
            return self.wait(running, None, Some(target)).await;
        }
        running.turn_at = None;
        let cordoned = match cordoned {
            Some(cordoned) => cordoned,
            None => self.actions.is_cordoned().await,
        };
        let pre_cordoned = match cordoned {
            Ok(cordoned) => cordoned,
            Err(e) => {
                warn!(node = %self.config.node, error = %e, "cannot tell whether the node is cordoned");
                return self.pause(running).await;
            }
        };
        let process = open.first().map(|r| r.process.clone());
        self.commit_fenced(
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
        // Outside the window, new work waits for the next one.
        if !open.iter().any(|r| r.state == RequestState::Pending) || !self.window_open(running) {
            return Ok(record.clone());
        }
        if record.state != NodeState::Draining && !drained(record) {
            // The window skipped the drain: work that needs one waits for the next window.
            let procedures = self.procedure_map().await?;
            if open
                .iter()
                .any(|r| r.state == RequestState::Pending && needs_drain(r, &procedures))
            {
                return Ok(record.clone());
            }
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
        if !self.window_open(running) {
            return self.postpone(running, record, "the drain").await;
        }
        let record = self.join_pending(running, record).await?;
        // A node cordoned beforehand is always drained: afterwards, rota could not tell
        // whether its window drained it.
        if !record.pre_cordoned && self.drain_skippable().await? {
            info!(node = %self.config.node, "no work of this window needs a drain");
            self.commit(
                running,
                &record,
                Event::DrainSkipped,
                Transition::new(NodeState::Draining, NodeState::Maintaining),
            )
            .await?;
            return Ok(());
        }
        self.fence(running, &record).await?;
        self.tell(|o| o.drain_started(&record));
        let drained = tokio::select! {
            () = running.cancel.cancelled() => return Ok(()),
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

    /// Whether every active request of the window is a procedure that needs no drain. The
    /// procedures are read only when the window has nothing but procedures: a reboot window
    /// pays nothing for the question.
    async fn drain_skippable(&self) -> Result<bool> {
        let active: Vec<RequestRecord> = self
            .store
            .open_requests(&self.config.node)
            .await?
            .into_iter()
            .filter(|r| r.state == RequestState::Active)
            .collect();
        if active.is_empty() || active.iter().any(|r| !matches!(r.process, Process::Mop(_))) {
            return Ok(false);
        }
        let procedures = self.procedure_map().await?;
        Ok(!active.iter().any(|r| needs_drain(r, &procedures)))
    }

    async fn maintaining(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        let record = self.join_pending(running, record).await?;
        let active: Vec<RequestRecord> = self
            .store
            .open_requests(&self.config.node)
            .await?
            .into_iter()
            .filter(|r| r.state == RequestState::Active)
            .collect();
        let procedures: Vec<&RequestRecord> = active
            .iter()
            .filter(|r| matches!(r.process, Process::Mop(_)))
            .collect();
        if !procedures.is_empty() {
            return self.run_procedures(running, &record, &procedures).await;
        }
        let active: Vec<Process> = active.into_iter().map(|r| r.process).collect();
        if active.contains(&Process::Maintenance)
            && self.kustodian_starting(running)
            && !self.window_open(running)
        {
            return self
                .postpone(running, &record, "kustodian's maintenance")
                .await;
        }
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
        if !self.window_open(running) {
            return self.postpone(running, &record, "the reboot").await;
        }
        // Like kured holding its lock: a blocked node keeps its slot and cordon, and waits.
        let seen = *running.changes.borrow_and_update();
        if self.blocked(running, &record, seen).await? {
            return Ok(());
        }
        // The boot id goes to the store before the reboot starts: after it, only a different
        // boot id proves that the reboot happened.
        let now = now_millis();
        let record = self
            .commit_fenced(
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
        self.start_reboot(running, &record).await
    }

    /// Starts the reboot that `record` (in `rebooting`) recorded, once it has proven the slot.
    async fn start_reboot(&self, running: &mut Running, record: &NodeRecord) -> Result<()> {
        self.fence(running, record).await?;
        if let Some(started_at) = record.reboot_started_at {
            self.reboot_marker.record(&running.boot_id, started_at)?;
        }
        info!(node = %self.config.node, "rebooting");
        self.tell(|o| o.reboot_started(record));
        match self.actions.reboot().await {
            Ok(handle) => running.reboot = Some(handle),
            Err(e) => self.reboot_failed(running, record, &e).await?,
        }
        Ok(())
    }

    /// One step of the window's procedures, by the priority rule of design.md §5: records an
    /// attempt that ended, starts the procedures the rule clears, or waits for a change.
    async fn run_procedures(
        &self,
        running: &mut Running,
        record: &NodeRecord,
        requests: &[&RequestRecord],
    ) -> Result<()> {
        let procedures = self.procedure_map().await?;
        let mut entries = Vec::new();
        let mut ready = Vec::new();
        let mut orphans = false;
        let mut exclusive_running = false;
        for request in requests {
            let Process::Mop(name) = &request.process else {
                continue;
            };
            let Some(procedure) = procedures.get(name) else {
                let cause = format!("procedure {name} no longer exists");
                return self
                    .procedure_failed(running, request, None, None, cause)
                    .await;
            };
            let latest = running.runner.latest(request.id)?;
            let next = latest.as_ref().map_or(0, |a| a.index + 1);
            let waiting = match latest {
                None => attempt_run(request.id, 0),
                Some(attempt) => match attempt.state {
                    RunState::Running => {
                        orphans |= running.runner.is_orphan(&attempt.run);
                        exclusive_running |= procedure.spec.exclusive;
                        entries.push(entry(request, procedure, true));
                        continue;
                    }
                    RunState::Exited(code) if code == 0 || !attempt.recorded => {
                        return self
                            .procedure_exited(running, request, procedure, &attempt.run, code)
                            .await;
                    }
                    RunState::Interrupted if !attempt.recorded && !procedure.spec.retry => {
                        let cause = format!(
                            "procedure {name} was interrupted: its agent stopped while it ran                              and it is no longer running (set retry to run it again)"
                        );
                        return self
                            .procedure_failed(
                                running,
                                request,
                                Some(procedure),
                                Some(&attempt.run),
                                cause,
                            )
                            .await;
                    }
                    RunState::Interrupted if !attempt.recorded => {
                        warn!(node = %self.config.node, procedure = name, run = attempt.run, "an interrupted attempt runs again (retry)");
                        attempt_run(request.id, next)
                    }
                    // A recorded failure and a node back in maintenance: an operator retried.
                    _ => attempt_run(request.id, next),
                },
            };
            entries.push(entry(request, procedure, false));
            ready.push((waiting, *request, procedure));
        }
        let mut anything_running = entries.iter().any(|e| e.running);
        let mut started = false;
        for id in rota_core::startable(&entries) {
            let Some((run, request, procedure)) = ready
                .iter()
                .find(|(_, r, _)| u64::try_from(r.id).ok() == Some(id))
            else {
                continue;
            };
            let spec = &procedure.spec;
            if exclusive_running || (spec.exclusive && anything_running) {
                continue;
            }
            let Some(script) = &procedure.script else {
                let cause = format!(
                    "the script of procedure {} could not be read (its ConfigMap or key is missing)",
                    spec.name
                );
                return self
                    .procedure_failed(running, request, Some(procedure), None, cause)
                    .await;
            };
            if let Err(e) = spec.check_pin(script) {
                return self
                    .procedure_failed(running, request, Some(procedure), None, e.to_string())
                    .await;
            }
            // Running scripts are never stopped; outside the window no new one starts, and
            // once none runs, the rest waits for the next window.
            if !self.window_open(running) {
                if anything_running {
                    break;
                }
                let step = format!("procedure {}", spec.name);
                return self.postpone(running, record, &step).await;
            }
            self.store
                .fence(&running.session, self.config.session_ttl)
                .await?;
            running.runner.start(run, spec, script)?;
            info!(node = %self.config.node, procedure = spec.name, priority = %spec.priority, run, "procedure started");
            anything_running = true;
            exclusive_running |= spec.exclusive;
            started = true;
        }
        if started {
            return Ok(());
        }
        let until = orphans.then(|| Instant::now() + ORPHAN_POLL);
        self.wait(running, until, None).await
    }

    /// Records an attempt that ended: a success closes its request (asking for the reboot it
    /// wants first, so that the reboot joins this window), a failure fails the node closed.
    async fn procedure_exited(
        &self,
        running: &mut Running,
        request: &RequestRecord,
        procedure: &ProcedureRecord,
        run: &str,
        code: i32,
    ) -> Result<()> {
        let spec = &procedure.spec;
        let summary = running.runner.summary(run, spec, code);
        if code != 0 {
            let cause = format!("procedure {} failed: {summary}", spec.name);
            return self
                .procedure_failed(running, request, Some(procedure), Some(run), cause)
                .await;
        }
        if spec.reboot {
            let source = request.process.to_string();
            self.store
                .add_request(&running.session, &Process::Reboot, &source)
                .await?;
        }
        self.store
            .complete_request(
                &running.session,
                &request.process,
                &Outcome::Succeeded {
                    detail: Some(summary),
                },
            )
            .await?;
        running.runner.finish(spec)?;
        info!(node = %self.config.node, procedure = spec.name, run, "procedure finished");
        self.tell(|o| o.work_ended(&request.process, WorkOutcome::Finished, None));
        Ok(())
    }

    /// Records a procedure's failure; the store fails the node closed in the same write.
    async fn procedure_failed(
        &self,
        running: &mut Running,
        request: &RequestRecord,
        procedure: Option<&ProcedureRecord>,
        run: Option<&str>,
        cause: String,
    ) -> Result<()> {
        warn!(node = %self.config.node, process = %request.process, cause, "procedure failed; the node keeps its slot and cordon");
        let policy = procedure.map_or(self.config.backoff, |p| (&p.spec.backoff).into());
        self.store
            .complete_request(
                &running.session,
                &request.process,
                &Outcome::Failed {
                    cause: cause.clone(),
                    policy,
                },
            )
            .await?;
        if let Some(run) = run {
            running.runner.mark_recorded(run)?;
        }
        if let Some(procedure) = procedure {
            running.runner.finish(&procedure.spec)?;
        }
        self.tell(|o| o.work_ended(&request.process, WorkOutcome::Failed, Some(&cause)));
        Ok(())
    }

    /// Whether anything holds the node back before a disruptive step: the fleet's pause or a
    /// blocker. If so, records the reasons (a write only when they change, logged once each
    /// time), and waits for the next check: `blocker_interval`, or a store change (a resume).
    /// If not, clears a recorded reason first, so that the node holds the queue again.
    async fn blocked(&self, running: &mut Running, record: &NodeRecord, seen: u64) -> Result<bool> {
        let mut blocks = Vec::new();
        if let Some(pause) = self.store.paused().await? {
            blocks.push(Block {
                kind: BlockKind::Paused,
                reason: format!("the fleet is paused: {}", pause.reason),
            });
        }
        blocks.extend(self.ask_blockers(running, record.state).await);
        let Some(first) = blocks.first() else {
            self.tell(|o| o.blocked(None));
            self.unblock(running, record).await?;
            return Ok(false);
        };
        let block = Block {
            kind: first.kind,
            reason: blocks
                .iter()
                .map(|b| b.reason.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        };
        self.tell(|o| o.blocked(Some(&block)));
        if record.blocked.as_ref().map(|b| &b.reason) != Some(&block.reason) {
            let blocked = Blocked {
                reason: block.reason.clone(),
                since: now_millis(),
            };
            self.store
                .set_blocked(&running.session, Some(&blocked))
                .await?;
            info!(node = %self.config.node, state = %record.state, kind = block.kind.as_str(), reason = block.reason, "blocked; waiting");
        }
        let next = running.checked.as_ref().map_or_else(Instant::now, |c| c.at)
            + self.config.blocker_interval;
        self.wait(running, Some(next), Some(seen.saturating_add(1)))
            .await?;
        Ok(true)
    }

    /// The blockers' answer: asked again after `blocker_interval` or in another state, else
    /// the last one (the agent steps far more often than blockers need asking).
    async fn ask_blockers(&self, running: &mut Running, state: NodeState) -> Vec<Block> {
        if let Some(checked) = &running.checked
            && checked.state == state
            && checked.at.elapsed() < self.config.blocker_interval
        {
            return checked.blocks.clone();
        }
        let answers =
            futures::future::join_all(self.blockers.iter().map(|blocker| blocker.blocks())).await;
        let blocks: Vec<Block> = answers.into_iter().flatten().collect();
        running.checked = Some(Checked {
            at: Instant::now(),
            state,
            blocks: blocks.clone(),
        });
        blocks
    }

    /// Clears the node's recorded blocked reason, if it has one.
    async fn unblock(&self, running: &Running, record: &NodeRecord) -> Result<()> {
        if record.blocked.is_some() {
            self.store.set_blocked(&running.session, None).await?;
            info!(node = %self.config.node, state = %record.state, "no longer blocked");
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
        running: &mut Running,
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
            // The verification's first health check goes with the write that starts it, and
            // the write carries the fence, so that a node healthy at once uncordons right
            // after: one round trip where there were three.
            let (updated, health) = tokio::join!(
                self.commit_fenced(
                    running,
                    record,
                    Event::BootChanged,
                    Transition::new(NodeState::Rebooting, NodeState::Verifying),
                ),
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
                && !self.reboot_marker.started(&running.boot_id, started_at)?
            {
                warn!(
                    node = %self.config.node,
                    started_at,
                    "the recorded reboot was never started (the agent stopped, or its store call failed, between recording it and starting it); starting it now"
                );
                return self.start_reboot(running, record).await;
            }
            // Never start a reboot again: a restarted agent only waits for the outcome.
            return self.wait(running, Some(instant_at(deadline)), None).await;
        };
        let exited = tokio::select! {
            () = running.cancel.cancelled() => return Ok(()),
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
                running.healthy_since = None;
                info!(node = %self.config.node, error = %e, "not healthy yet");
                let next = Instant::now() + self.config.health_interval;
                self.wait(running, Some(next), None).await
            }
        }
    }

    /// While the release delay runs, when it ends: from the first of an unbroken series of
    /// passed health checks in this verification. `None` once it has passed, or without one.
    fn release_delayed(&self, running: &mut Running, record: &NodeRecord) -> Option<Instant> {
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

    async fn unhealthy(
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

/// A request as the priority rule sees it: requests arrive in id order on a node.
fn entry(request: &RequestRecord, procedure: &ProcedureRecord, running: bool) -> ProcedureEntry {
    let id = u64::try_from(request.id).unwrap_or(0);
    ProcedureEntry {
        id,
        priority: procedure.spec.priority,
        arrival: id,
        running,
    }
}

/// Keeps the session alive; a refused heartbeat means another agent took over the node.
async fn heartbeat(
    store: Arc<dyn Store>,
    session: Session,
    ttl: Duration,
    cancel: CancellationToken,
    lost: Arc<Mutex<Option<SessionLost>>>,
    observers: Vec<Arc<dyn AgentObserver>>,
) {
    let period = ttl / 3;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let why = match store.heartbeat(&session, ttl).await {
            Ok(()) => {
                observers.iter().for_each(|o| o.store_access(true));
                continue;
            }
            Err(rota_store::Error::Fenced { .. }) => SessionLost::Superseded,
            Err(rota_store::Error::Expired { .. }) => SessionLost::Expired,
            Err(e) => {
                // An agent whose session cannot be renewed is about to lose it: not ready.
                observers.iter().for_each(|o| o.store_access(false));
                warn!(error = %e, "heartbeat failed; retrying");
                continue;
            }
        };
        observers.iter().for_each(|o| o.session(false));
        *lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        cancel.cancel();
        return;
    }
}

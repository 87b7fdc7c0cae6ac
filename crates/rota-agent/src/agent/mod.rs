//! The agent loop: read the node's record from the store, run its state's handler (one module
//! each in `states/`), persist the result, repeat; each round is a pass. Every pass starts from
//! persisted state, so an agent killed at any point continues where it stopped when it starts
//! again.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rota_actions::{ActionError, NodeActions, RebootHandle};
use rota_blockers::{Block, Blocker};
use rota_core::{NodeState, Process};
use rota_observer::AgentObserver;
use rota_sentinel::{SentinelWatcher, Snapshot, WatcherOptions};
use rota_store::{
    Millis, NodeRecord, ProcedureRecord, RequestRecord, RetryPauses, Session, Store, instant_at,
    millis_of as ms,
};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::AgentConfig;
use crate::error::{Error, Result};
use crate::procedures::Runner;
use crate::reboot_marker::RebootMarker;
use crate::sentinel_command;
use crate::window_marker::WindowMarker;

mod blocking;
mod budget;
mod commit;
mod hours;
mod kustodian;
mod mops;
mod requests;
mod session;
mod states;
mod wait;

/// Pause before the next pass after a store write or node action failed transiently.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub struct Agent {
    config: AgentConfig,
    /// Which recorded reboot this boot started.
    reboot_marker: RebootMarker,
    /// Whether the node holds a slot, for the next start's `--start-jitter`.
    window_marker: WindowMarker,
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
    /// The reboot (by its recorded start) whose command this incarnation ran to its end, as
    /// the host's marker says too unless it could not be written.
    reboot_ran: Option<Millis>,
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
    /// When procedures are looked for next (jittered, so that a fleet started together spreads
    /// out); `None`: on the next pass.
    procedures_due: Option<Instant>,
    /// The node has no request and waits for one: its wait re-reads the store only when
    /// procedures are due, since every operator's command wakes it.
    idle: bool,
    /// How the session is renewed: see [`session::Renewal`].
    renewal: Arc<session::Renewal>,
    /// The change count at which the queue's last answer said this node's turn may come.
    /// Before it, another look almost always says "wait" again (a store may answer it from
    /// memory), so the look reads nothing else that only a grant needs.
    turn_at: Option<u64>,
    /// The record (state and since) that this incarnation's last fenced transition wrote: what
    /// disrupts the node right after it needs no fence of its own. Any wait ends the proof.
    fenced: Option<(NodeState, Millis)>,
    /// A health check made along with the write that started a verification (its `since`), for
    /// that verification's first check. Any wait makes it stale.
    health_ahead: Option<(Millis, std::result::Result<(), ActionError>)>,
    /// When the node's current verification (by its start) was first found healthy, for the
    /// release delay. Not persisted: a restart starts the delay again, the safe direction.
    healthy_since: Option<(Millis, Instant)>,
    /// When the drain delay of the node's drain (by the start of its `draining`) ends, once
    /// this incarnation has cordoned it. Not persisted: a restart waits again, the safe
    /// direction.
    drain_delay: Option<(Millis, Instant)>,
    /// When the reboot delay of the node's window (by the start of its `maintaining`) ends.
    /// Not persisted, like the drain delay.
    reboot_delay: Option<(Millis, Instant)>,
    /// The pauses while the store is unavailable; a pass that goes through resets them.
    unavailable: RetryPauses,
    /// Whether the last check found now within the maintenance hours, so that each start and
    /// end of the hours is logged once.
    within_hours_seen: Option<bool>,
    /// The blockers' last answer: asked again after `blocker_interval`, or at once in another
    /// state (the check right before the reboot never reuses the one before the slot).
    checked: Option<Checked>,
    /// Whether the node is marked as waiting for maintenance ([`NodeActions::mark_pending`]),
    /// as this incarnation last set it; unknown at its start.
    pending: Option<bool>,
    /// Whether the host's window marker says the node holds a slot, as this incarnation last
    /// set it; unknown at its start.
    in_window: Option<bool>,
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
        Process::Reboot | Process::Maintenance | Process::FleetLock => true,
    }
}

/// Whether a window's node is out of service: rota cordoned it (and drained it), or it was
/// cordoned before. A window whose work needed no drain is neither.
fn drained(record: &NodeRecord) -> bool {
    record.cordoned_by_rota || record.pre_cordoned
}

/// `every`, give or take a fifth.
fn jittered(every: Duration) -> Duration {
    every.mul_f64(0.8 + 0.4 * fastrand::f64())
}

fn millis(time: SystemTime) -> Millis {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
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
            window_marker: WindowMarker::new(&config.host_path(&config.state_dir)),
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
        #[cfg(feature = "failpoints")]
        crate::crash_points::arm();
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
        // A marker left behind only misleads host scripts; the agent's work goes on without
        // the cleaning, and a procedure that needs those files fails its own window.
        match runner.clean_stale_markers() {
            Ok(stale) => {
                for stale in stale {
                    info!(node = %self.config.node, marker = %stale.display(), "removed a stale procedure marker");
                }
            }
            Err(e) => {
                warn!(node = %self.config.node, error = %e, "cannot clean stale procedure markers");
            }
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
}

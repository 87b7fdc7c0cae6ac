//! What an agent does for its own node, done here for every host that asks by FleetLock and
//! runs no agent. A request moves the host's node along its lifecycle as
//! [`rota_core::fleetlock`] decides; while the node holds a slot, a task of its own drains it,
//! waits for its client to take the lock, watches its reboot and verifies it, as an agent
//! would, with the same lifecycle events (docs/design.md §11).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rota_actions::{ActionError, NodeActions};
use rota_core::fleetlock::{self, Lock, Look, Refusal, Unlock};
use rota_core::schedule::{Place, by_place_alone, turn_behind};
use rota_core::{BackoffPolicy, Event, MaintenanceHours, NodeFields, NodeName, NodeState, Process};
use rota_store::{
    Acquire, Millis, NodeOverview, NodeRecord, Pause, Session, Settings, Store, StoreExt,
    Transition, WindowChange, millis_of, now_millis,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::Result;
use crate::metrics::Metrics;
use crate::protocol::{Kind, Rejection};

/// The source recorded with a FleetLock host's request.
pub const SOURCE: &str = "fleetlock";

/// How the server treats its hosts' windows.
#[derive(Clone, Debug)]
pub struct Config {
    pub drain_timeout: Duration,
    pub reboot_timeout: Duration,
    pub verify_timeout: Duration,
    pub health_interval: Duration,
    /// How long a waiting host keeps its place in the queue without asking again: its
    /// session's TTL (Zincati asks every 5 to 5.5 minutes).
    pub client_ttl: Duration,
    /// How long a drained node waits for its host to ask again and take the lock before its
    /// window ends (the node is uncordoned, the slot given back).
    pub lock_wait: Duration,
    pub backoff: BackoffPolicy,
    pub hours: Option<MaintenanceHours>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            drain_timeout: Duration::from_secs(600),
            reboot_timeout: Duration::from_secs(900),
            verify_timeout: Duration::from_secs(600),
            health_interval: Duration::from_secs(5),
            client_ttl: Duration::from_secs(900),
            lock_wait: Duration::from_secs(900),
            backoff: BackoffPolicy::DEFAULT,
            hours: None,
        }
    }
}

/// What the server does to a host's node, by its platform: a Kubernetes Node's API, or
/// commands on bare metal.
#[async_trait]
pub trait Platform: Send + Sync {
    fn actions(&self, node: &NodeName) -> Arc<dyn NodeActions>;
    /// The node's boot id as the platform knows it; `None` where it knows none (bare metal:
    /// there the client's `steady-state` is the word that it rebooted).
    async fn boot_id(&self, node: &NodeName) -> Result<Option<String>, ActionError>;
}

/// The FleetLock hosts' nodes, and the tasks of those in their windows.
#[derive(Clone)]
pub struct Hosts {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) platform: Arc<dyn Platform>,
    pub(crate) config: Config,
    hosts: Mutex<HashMap<NodeName, Arc<tokio::sync::Mutex<Host>>>>,
    pub(crate) metrics: Arc<Metrics>,
    /// Whether this server was refused the pause of a spent failure budget (logged once).
    budget_refused: AtomicBool,
    /// The last "wait" a waiter was told: the change count it was told at, and the changes
    /// it must wait for (see [`Inner::behind_a_waiter`]).
    last_wait: Mutex<Option<LastWait>>,
    pub(crate) cancel: CancellationToken,
}

/// The last waiter of the queue that was told to wait: the change count before which its turn
/// cannot come, and its place in the queue (`queued_at`, and the node's name).
struct LastWait {
    turn: u64,
    at: Millis,
    node: NodeName,
}

impl LastWait {
    fn place(&self) -> Place<'_> {
        Place {
            at: self.at,
            node: &self.node,
        }
    }
}

/// One host, as this server knows it between requests.
#[derive(Default)]
pub(crate) struct Host {
    /// The node's session, and when it runs out as last renewed.
    pub(crate) session: Option<(Session, Instant)>,
    /// The change count before which another look at the queue would say "wait" again.
    pub(crate) turn_at: Option<u64>,
    /// The task of the node's window.
    pub(crate) window: Option<Window>,
    /// The task that takes the node's slot when its turn comes between its client's requests.
    pub(crate) waiter: Option<JoinHandle<()>>,
    /// When the waiter looks again whatever the store says: the end of a backoff, the start of
    /// the maintenance hours.
    pub(crate) wake_at: Option<Millis>,
}

/// The task of a node's window, and how to stop it between two of its store calls: a call
/// dropped halfway may leave a connection inside a transaction.
pub(crate) struct Window {
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Window {
    pub(crate) fn running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stops the task at its next wait, and waits for it.
    async fn stop(self) {
        self.stop.cancel();
        if let Err(e) = self.task.await {
            warn!(error = %e, "a FleetLock window's task ended abnormally");
        }
    }
}

fn refused(refusal: Refusal, value: impl Into<String>) -> Rejection {
    Rejection::new(Kind::Refused(refusal), value)
}

/// Why `refusal` holds `record`'s node back, in words; `pause` is the fleet's.
fn explain(refusal: Refusal, record: &NodeRecord, pause: Option<&Pause>) -> Rejection {
    let node = &record.node;
    let value = match refusal {
        Refusal::WaitingForSlot => format!("node {node} waits for a slot"),
        Refusal::Draining => match &record.blocked {
            Some(held) => format!(
                "node {node} holds a slot and is being drained: {}",
                held.reason
            ),
            None => format!("node {node} holds a slot and is being drained"),
        },
        Refusal::OutsideHours => {
            format!("node {node} waits for its maintenance hours")
        }
        Refusal::Blocked => format!(
            "node {node} is held back: {}",
            record.blocked.as_ref().map_or("", |b| b.reason.as_str())
        ),
        Refusal::Paused => format!(
            "the fleet is paused: {}; rota resume lifts it",
            pause.map_or("no reason given", |p| p.reason.as_str())
        ),
        Refusal::BackingOff => format!(
            "node {node} backs off after a failure until {} ms since the epoch",
            record.queued_at.unwrap_or_default()
        ),
        Refusal::Verifying => format!("node {node} rebooted and is being verified"),
        Refusal::Failed => format!(
            "node {node}'s window failed ({}); it keeps its slot and cordon until rota retry or rota unlock",
            record.last_result.as_deref().unwrap_or("no cause recorded")
        ),
        Refusal::OtherWork => format!(
            "node {node} has other work than FleetLock's ({}): it is not a FleetLock host",
            record
                .process
                .as_ref()
                .map_or("open requests".to_owned(), |p| p.to_string())
        ),
    };
    refused(refusal, value)
}

impl Hosts {
    pub fn new(
        store: Arc<dyn Store>,
        platform: Arc<dyn Platform>,
        config: Config,
        cancel: CancellationToken,
    ) -> Hosts {
        Hosts {
            inner: Arc::new(Inner {
                store,
                platform,
                config,
                hosts: Mutex::new(HashMap::new()),
                metrics: Arc::new(Metrics::new()),
                budget_refused: AtomicBool::new(false),
                last_wait: Mutex::new(None),
                cancel,
            }),
        }
    }

    /// The hosts' metrics, and the server's answers'.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// Takes over the windows of FleetLock hosts under way, after a restart of the server.
    pub async fn resume(&self) -> Result<()> {
        for overview in self.inner.store.overview().await? {
            let record = overview.record;
            if record.process == Some(Process::FleetLock) && record.state.holds_slot() {
                let host = self.inner.host(&record.node);
                let mut host = host.lock().await;
                let session = self.inner.session(&mut host, &record.node).await?;
                info!(node = %record.node, state = %record.state, "taking over a FleetLock window under way");
                self.inner.ensure_window(&mut host, session);
            }
        }
        Ok(())
    }

    /// A `pre-reboot` of `node`'s host, of `group`: `Ok` grants the lock.
    pub async fn pre_reboot(&self, node: &NodeName, group: &str) -> Result<(), Rejection> {
        let host = self.inner.host(node);
        let mut host = host.lock().await;
        self.inner
            .pre_reboot(&mut host, node, group)
            .await
            .map_err(|e| e.rejection())?
    }

    /// A `steady-state` of `node`'s host: `Ok` says it holds nothing any more.
    pub async fn steady_state(&self, node: &NodeName) -> Result<(), Rejection> {
        let host = self.inner.host(node);
        let mut host = host.lock().await;
        self.inner
            .steady_state(&mut host, node)
            .await
            .map_err(|e| e.rejection())?
    }
}

impl Inner {
    pub(crate) fn host(&self, node: &NodeName) -> Arc<tokio::sync::Mutex<Host>> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts.entry(node.clone()).or_default().clone()
    }

    /// The node's session, opened or renewed when half its TTL has passed: a host asking
    /// every few minutes renews it about once per half TTL, and a host that stops asking
    /// loses its place in the queue when it runs out.
    pub(crate) async fn session(&self, host: &mut Host, node: &NodeName) -> Result<Session> {
        let ttl = self.config.client_ttl;
        if let Some((session, until)) = &host.session {
            if until.saturating_duration_since(Instant::now()) > ttl / 2 {
                return Ok(session.clone());
            }
            if self.store.heartbeat(session, ttl).await.is_ok() {
                let session = session.clone();
                host.session = Some((session.clone(), Instant::now() + ttl));
                return Ok(session);
            }
        }
        let session = self.store.open_session(node, ttl).await?;
        host.session = Some((session.clone(), Instant::now() + ttl));
        Ok(session)
    }

    pub(crate) async fn look_up(&self, node: &NodeName) -> Result<(NodeOverview, Settings)> {
        let (overview, settings) =
            tokio::try_join!(self.store.record(node), self.store.settings())?;
        let overview = overview.unwrap_or_else(|| NodeOverview {
            record: NodeRecord::new(node.clone(), NodeState::Idle, now_millis()),
            open_requests: Vec::new(),
            backoffs: Vec::new(),
        });
        Ok((overview, settings))
    }

    /// The node's boot id as its platform reports it, read only while its record is in one
    /// of `states` (the rule needs it there).
    async fn boot_id_in(
        &self,
        record: &NodeRecord,
        states: &[NodeState],
    ) -> Result<Option<String>> {
        if !states.contains(&record.state) {
            return Ok(None);
        }
        Ok(self.platform.boot_id(&record.node).await?)
    }

    async fn pre_reboot(
        self: &Arc<Inner>,
        host: &mut Host,
        node: &NodeName,
        group: &str,
    ) -> Result<Result<(), Rejection>> {
        // A waiter told to wait is told so again from memory until enough has changed.
        if let Some(turn) = host.turn_at
            && *self.store.changes().borrow() < turn
        {
            self.session(host, node).await?;
            return Ok(Err(refused(
                Refusal::WaitingForSlot,
                format!("node {node} waits for a slot"),
            )));
        }
        // Each pass moves the node one step on: queued, granted, drained, rebooting.
        let mut queued_now = false;
        for _ in 0..3 {
            let (overview, settings) = self.look_up(node).await?;
            let pause = settings.pause.clone();
            let record = &overview.record;
            // Read before the reboot's start too: the boot id it records is the one a new
            // boot must differ from.
            let boot_id = self
                .boot_id_in(record, &[NodeState::Maintaining, NodeState::Rebooting])
                .await?;
            let look = self.look(&overview, pause.is_some(), boot_id.as_deref());
            match fleetlock::pre_reboot(&look) {
                Lock::Queue => {
                    self.queue(host, &overview, group).await?;
                    queued_now = true;
                }
                Lock::TakeSlot => {
                    let session = self.session(host, node).await?;
                    if queued_now && self.behind_a_waiter(host, record, &settings) {
                        return Ok(Err(refused(
                            Refusal::WaitingForSlot,
                            format!("node {node} waits for a slot"),
                        )));
                    }
                    return self.take_slot(host, record, session).await;
                }
                Lock::StartReboot => {
                    self.start_reboot(host, record, boot_id).await?;
                    return Ok(Ok(()));
                }
                Lock::Granted => return Ok(Ok(())),
                Lock::Postpone => {
                    let session = self.session(host, node).await?;
                    let reason = "the maintenance hours ended before the host took its lock";
                    let event = Event::HoursEnded {
                        reason: reason.to_owned(),
                    };
                    self.commit(&session, record, event, false, |_| {}).await?;
                    return Ok(Err(explain(Refusal::OutsideHours, record, None)));
                }
                Lock::Refused(refusal) => {
                    if record.state.holds_slot() {
                        let session = self.session(host, node).await?;
                        self.ensure_window(host, session);
                    } else if record.state == NodeState::Queued {
                        self.session(host, node).await?;
                        self.hold(host, record, refusal).await?;
                    }
                    return Ok(Err(explain(refusal, record, pause.as_ref())));
                }
            }
        }
        Ok(Err(refused(
            Refusal::WaitingForSlot,
            format!("node {node} waits for a slot"),
        )))
    }

    pub(crate) fn look<'a>(
        &'a self,
        overview: &'a NodeOverview,
        paused: bool,
        boot_id: Option<&'a str>,
    ) -> Look<'a> {
        Look {
            record: &overview.record,
            requested: overview
                .open_requests
                .iter()
                .any(|r| r.process == Process::FleetLock),
            other_requests: overview
                .open_requests
                .iter()
                .any(|r| r.process != Process::FleetLock),
            paused,
            hours: self.config.hours.as_ref(),
            now: now_millis(),
            boot_id,
        }
    }

    /// Records the host's request; an idle node queues with it, from the end of its backoff.
    async fn queue(
        self: &Arc<Inner>,
        host: &mut Host,
        overview: &NodeOverview,
        group: &str,
    ) -> Result<()> {
        let record = &overview.record;
        let session = self.session(host, &record.node).await?;
        if record.state != NodeState::Idle {
            self.store
                .add_request(&session, &Process::FleetLock, SOURCE)
                .await?;
            return Ok(());
        }
        // Outside its hours, a host's place in the queue is their next start, as an agent's
        // is: no grant comes that nobody takes up.
        let eligible_at = rota_core::eligible_at(
            &overview.backoffs,
            &[&Process::FleetLock],
            now_millis(),
            self.config.hours.as_ref(),
        );
        let event = Event::Requested { eligible_at };
        self.commit(&session, record, event, false, |queue| {
            queue.requests.push((Process::FleetLock, SOURCE.to_owned()));
            queue.fields.group = Some(Some(group.to_owned()));
        })
        .await?;
        info!(node = %record.node, group, "FleetLock host queued");
        Ok(())
    }

    pub(crate) async fn take_slot(
        self: &Arc<Inner>,
        host: &mut Host,
        record: &NodeRecord,
        session: Session,
    ) -> Result<Result<(), Rejection>> {
        if let Some(reason) = self.budget_pause().await? {
            return Ok(Err(refused(
                Refusal::Paused,
                format!("the fleet is paused: {reason}; rota resume lifts it"),
            )));
        }
        let seen = *self.store.changes().borrow();
        if let Acquire::Wait { changes } = self.store.try_acquire_slot(&session).await? {
            host.turn_at = Some(seen.saturating_add(changes));
            let mut last = self.last_wait.lock().unwrap_or_else(|e| e.into_inner());
            // The last waiter in the queue is the one a host queuing next is behind.
            if let Some(at) = record.queued_at {
                let place = Place {
                    at,
                    node: &record.node,
                };
                if last.as_ref().is_none_or(|l| place >= l.place()) {
                    *last = Some(LastWait {
                        turn: seen.saturating_add(changes),
                        at,
                        node: record.node.clone(),
                    });
                }
            }
            self.ensure_waiter(host, &record.node);
            return Ok(Err(refused(
                Refusal::WaitingForSlot,
                format!(
                    "node {} waits for a slot: at least {changes} handoffs ahead",
                    record.node
                ),
            )));
        }
        host.turn_at = None;
        let actions = self.platform.actions(&record.node);
        let pre_cordoned = actions.is_cordoned().await?;
        let event = Event::SlotAcquired { pre_cordoned };
        let granted = self
            .commit(&session, record, event, true, |open| {
                open.process = Some(Process::FleetLock);
            })
            .await?;
        info!(node = %record.node, slot = ?granted.slot, "FleetLock host granted a slot; draining");
        self.ensure_window(host, session);
        Ok(Err(explain(Refusal::Draining, &granted, None)))
    }

    /// Whether a host that has just queued is behind the last waiter told to wait: it is then
    /// told to wait until `rota_core::schedule::turn_behind` of that waiter's turn, with no
    /// look at the queue, which reads every waiter (a fleet of hosts asking for the first time
    /// at once would read it once each, and all wake at the same change). Only where the queue
    /// goes by place alone (`by_place_alone`): else every host looks.
    fn behind_a_waiter(
        self: &Arc<Inner>,
        host: &mut Host,
        record: &NodeRecord,
        settings: &Settings,
    ) -> bool {
        if !by_place_alone(&settings.groups, &settings.rollout.batches) {
            return false;
        }
        let Some(at) = record.queued_at else {
            return false;
        };
        let place = Place {
            at,
            node: &record.node,
        };
        let mut last = self.last_wait.lock().unwrap_or_else(|e| e.into_inner());
        let Some(turn) = last
            .as_ref()
            .and_then(|l| turn_behind(l.place(), l.turn, place))
        else {
            return false;
        };
        *last = Some(LastWait {
            turn,
            at,
            node: record.node.clone(),
        });
        drop(last);
        host.turn_at = Some(turn);
        self.ensure_waiter(host, &record.node);
        true
    }

    /// The rollout's failure budget, as a node's agent enforces it before its slot: the
    /// fleet's pause, or the one a spent budget calls for, set now. Where this server may not
    /// pause the fleet (on Kubernetes, only operators and agents write settings), a spent
    /// budget still holds every host back.
    async fn budget_pause(&self) -> Result<Option<String>> {
        let budget = self.store.failure_budget().await?;
        if let Some(pause) = budget.pause {
            return Ok(Some(pause.reason));
        }
        let Some(reason) = budget.spent else {
            return Ok(None);
        };
        match self.store.pause(&reason).await {
            Ok(_) => {
                warn!(reason, "paused the fleet");
                Ok(Some(reason))
            }
            Err(e) if e.is_unavailable() => Err(e.into()),
            Err(e) => {
                if !self.budget_refused.swap(true, Ordering::Relaxed) {
                    warn!(reason, error = %e, "the failure budget is spent, but this server may not pause the fleet: it grants nothing until rota resume");
                }
                Ok(Some(format!(
                    "{reason} (this server may not pause the fleet itself: {e})"
                )))
            }
        }
    }

    /// A queued host held back for now: outside its hours its place in the queue moves to
    /// their next start, as an agent's does; the waiter then looks again when what holds it
    /// may have ended (a change of the store, the end of its backoff, the start of its hours).
    pub(crate) async fn hold(
        self: &Arc<Inner>,
        host: &mut Host,
        record: &NodeRecord,
        refusal: Refusal,
    ) -> Result<()> {
        host.wake_at = match refusal {
            Refusal::OutsideHours => {
                let starts = self
                    .config
                    .hours
                    .as_ref()
                    .and_then(|hours| hours.next_start_millis(now_millis()));
                if let Some(starts) = starts
                    && record.queued_at.is_none_or(|at| at < starts)
                    && let Some((session, _)) = &host.session
                {
                    let later = Transition::new(NodeState::Queued, NodeState::Queued).window(
                        WindowChange::Queue {
                            queued_at: Some(starts),
                        },
                    );
                    self.store.transition(session, later).await?;
                }
                starts
            }
            Refusal::BackingOff => record.queued_at,
            _ => None,
        };
        self.ensure_waiter(host, &record.node);
        Ok(())
    }

    /// Records the reboot's start, fenced, right before the answer that lets the host reboot.
    async fn start_reboot(
        self: &Arc<Inner>,
        host: &mut Host,
        record: &NodeRecord,
        boot_id: Option<String>,
    ) -> Result<()> {
        let session = self.session(host, &record.node).await?;
        let now = now_millis();
        self.platform
            .actions(&record.node)
            .reboot_starting(now)
            .await?;
        // Where the platform knows no boot id, the recorded one stands for this boot.
        let boot_id = boot_id.unwrap_or_else(|| format!("fleetlock-{now}"));
        let deadline = now.saturating_add(millis_of(self.config.reboot_timeout));
        self.commit(&session, record, Event::RebootStarted, true, |reboot| {
            reboot.process = Some(Process::FleetLock);
            reboot.fields = NodeFields::reboot_started(boot_id, now, deadline);
        })
        .await?;
        info!(node = %record.node, "FleetLock host drained: lock granted, the host reboots");
        self.ensure_window(host, session);
        Ok(())
    }

    async fn steady_state(
        self: &Arc<Inner>,
        host: &mut Host,
        node: &NodeName,
    ) -> Result<Result<(), Rejection>> {
        // A second pass only after the window's task stopped, which may have moved the node.
        for _ in 0..2 {
            let (overview, settings) = self.look_up(node).await?;
            let paused = settings.pause;
            let record = &overview.record;
            let boot_id = self.boot_id_in(record, &[NodeState::Rebooting]).await?;
            let look = self.look(&overview, paused.is_some(), boot_id.as_deref());
            match fleetlock::steady_state(&look) {
                Unlock::EndWindow => {
                    if let Some(window) = host.window.take() {
                        window.stop().await;
                        continue;
                    }
                    let session = self.session(host, node).await?;
                    let event = Event::Unlock {
                        reason: "the FleetLock host gave its lock back before it rebooted"
                            .to_owned(),
                    };
                    self.commit(&session, record, event, false, |_| {}).await?;
                    info!(%node, "FleetLock host gave its lock back before it rebooted; window ended");
                }
                unlock => return self.unlock(host, node, record, unlock, boot_id).await,
            }
            break;
        }
        Ok(Ok(()))
    }

    async fn unlock(
        self: &Arc<Inner>,
        host: &mut Host,
        node: &NodeName,
        record: &NodeRecord,
        unlock: Unlock,
        boot_id: Option<String>,
    ) -> Result<Result<(), Rejection>> {
        match unlock {
            Unlock::Nothing | Unlock::EndWindow => {}
            Unlock::Withdraw => {
                let session = self.session(host, node).await?;
                host.turn_at = None;
                self.withdraw(&session, record).await?;
                info!(%node, "FleetLock host left the queue (steady-state)");
            }
            Unlock::BootChanged => {
                let session = self.session(host, node).await?;
                self.commit(&session, record, Event::BootChanged, true, |_| {})
                    .await?;
                info!(%node, "FleetLock host is back from its reboot; verifying");
                self.ensure_window(host, session);
            }
            Unlock::NotRebooted => {
                return Ok(Err(Rejection::new(
                    Kind::NotRebooted,
                    format!(
                        "node {node}'s boot id {} has not changed since its lock was granted; ask again once it has rebooted",
                        boot_id.unwrap_or_default()
                    ),
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Withdraws a queued host's request: it leaves the queue, a change that wakes the waiters
    /// behind it.
    pub(crate) async fn withdraw(&self, session: &Session, record: &NodeRecord) -> Result<()> {
        self.store
            .cancel_request(session, &Process::FleetLock)
            .await?;
        let event = Event::Canceled {
            granted: record.slot.is_some(),
        };
        self.commit(session, record, event, false, |_| {}).await?;
        Ok(())
    }

    /// Applies `event` to the node's lifecycle through the core and writes the decision; the
    /// uncordon it asks for comes first, while the node still holds its slot.
    pub(crate) async fn commit(
        &self,
        session: &Session,
        record: &NodeRecord,
        event: Event,
        fenced: bool,
        with: impl FnOnce(&mut Transition) + Send,
    ) -> Result<NodeRecord> {
        let decision = record.lifecycle().apply(&event)?;
        let actions = self.platform.actions(&record.node);
        if matches!(event, Event::Healthy) {
            if decision.uncordon {
                self.store.fence(session, self.config.client_ttl).await?;
            }
            actions.return_to_service(decision.uncordon).await?;
        } else if decision.uncordon {
            self.store.fence(session, self.config.client_ttl).await?;
            actions.uncordon().await?;
        }
        let mut transition = Transition::of(decision);
        with(&mut transition);
        let window = transition.window.clone();
        let updated = if fenced {
            self.store
                .fenced_transition(session, transition, self.config.client_ttl)
                .await?
        } else {
            self.store.transition(session, transition).await?
        };
        info!(node = %record.node, %event, from = %record.state, to = %updated.state, "transition");
        self.metrics.written(record, &updated, &window);
        Ok(updated)
    }

    /// Starts the task of the node's window unless it runs.
    fn ensure_window(self: &Arc<Inner>, host: &mut Host, session: Session) {
        if host.window.as_ref().is_some_and(Window::running) {
            return;
        }
        let stop = self.cancel.child_token();
        host.window = Some(Window {
            task: tokio::spawn(self.clone().window(session, stop.clone())),
            stop,
        });
    }
}

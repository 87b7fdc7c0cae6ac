//! A node's record and what every write does to it (docs/design.md §3, §6): the one statement of
//! those rules. A store reads the node's record, lets [`NodeOverview::apply`] decide, and
//! persists what it answers ([`Applied`]) in one transaction, refusing a stale version or a
//! fenced session; it adds no rule of its own.

use std::time::Duration;

use serde::Serialize;

use crate::backoff::BackoffPolicy;
use crate::decision::{Decision, Millis, WindowChange};
use crate::hours::MaintenanceHours;
use crate::lifecycle::{Lifecycle, NodeState};
use crate::names::{HistoryEvent, NodeName, Process};

/// The node's row: its lifecycle, its slot, its reboot, its place in the queue, its last
/// result and why it holds back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeRecord {
    pub node: NodeName,
    pub state: NodeState,
    pub since: Millis,
    pub process: Option<Process>,
    pub slot: Option<u32>,
    pub pre_cordoned: bool,
    pub cordoned_by_rota: bool,
    pub boot_id: Option<String>,
    pub reboot_started_at: Option<Millis>,
    pub reboot_deadline: Option<Millis>,
    pub last_reboot_at: Option<Millis>,
    pub queued_at: Option<Millis>,
    pub last_result: Option<String>,
    /// When `last_result` was recorded: a rollout counts the nodes that finished since it began
    /// (`rollout::finished`).
    pub last_result_at: Option<Millis>,
    /// Why the node's agent holds back (a blocker, the fleet's pause), while it does.
    pub blocked: Option<Blocked>,
    /// The slot group the node belongs to (a zone, a pool), as its agent last recorded it.
    pub group: Option<String>,
}

/// Why a node's agent waits instead of taking a slot or rebooting, and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Blocked {
    pub reason: String,
    pub since: Millis,
}

impl NodeRecord {
    /// A node in `state` since `since`, with nothing else recorded: no process, slot, cordon,
    /// boot, queue place, result or block.
    pub fn new(node: NodeName, state: NodeState, since: Millis) -> NodeRecord {
        NodeRecord {
            node,
            state,
            since,
            process: None,
            slot: None,
            pre_cordoned: false,
            cordoned_by_rota: false,
            boot_id: None,
            reboot_started_at: None,
            reboot_deadline: None,
            last_reboot_at: None,
            queued_at: None,
            last_result: None,
            last_result_at: None,
            blocked: None,
            group: None,
        }
    }

    pub fn lifecycle(&self) -> Lifecycle {
        Lifecycle {
            state: self.state,
            pre_cordoned: self.pre_cordoned,
            cordoned_by_rota: self.cordoned_by_rota,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestState {
    /// Waiting for the node's next maintenance window.
    Pending,
    /// Being served by the node's open window.
    Active,
    Done,
    Canceled,
}

impl RequestState {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Pending => "pending",
            RequestState::Active => "active",
            RequestState::Done => "done",
            RequestState::Canceled => "canceled",
        }
    }

    /// Whether the request is still the node's work on its process (pending or active).
    pub fn is_open(self) -> bool {
        matches!(self, RequestState::Pending | RequestState::Active)
    }
}

impl std::str::FromStr for RequestState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        use RequestState::*;
        [Pending, Active, Done, Canceled]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("expected pending, active, done or canceled, not {s:?}"))
    }
}

/// A reason for maintenance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    pub id: i64,
    pub node: NodeName,
    pub process: Process,
    /// Where the request came from: a sentinel path, `operator`, a procedure.
    pub source: String,
    pub created_at: Millis,
    pub state: RequestState,
}

/// The backoff of one process on one node: no new attempt before `until`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackoffRecord {
    pub node: NodeName,
    pub process: Process,
    pub until: Millis,
    #[serde(serialize_with = "as_seconds")]
    pub last_interval: Duration,
    pub cause: String,
}

fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// A node's whole record: its row, its open requests (oldest first) and its backoffs (by
/// process). It is one row of `rota status`, and what [`NodeOverview::apply`] decides on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeOverview {
    pub record: NodeRecord,
    pub open_requests: Vec<RequestRecord>,
    pub backoffs: Vec<BackoffRecord>,
}

/// Node fields a transition may set; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFields {
    pub pre_cordoned: Option<bool>,
    pub cordoned_by_rota: Option<bool>,
    pub boot_id: Option<Option<String>>,
    pub reboot_started_at: Option<Option<Millis>>,
    pub reboot_deadline: Option<Option<Millis>>,
    pub last_reboot_at: Option<Millis>,
    /// The node's slot group, recorded as it queues.
    pub group: Option<Option<String>>,
}

impl NodeFields {
    /// What a reboot's start records, at `at` on the boot `boot_id`: only a different boot id
    /// proves that the reboot happened, and none by `deadline` fails it.
    pub fn reboot_started(boot_id: String, at: Millis, deadline: Millis) -> NodeFields {
        NodeFields {
            boot_id: Some(Some(boot_id)),
            reboot_started_at: Some(Some(at)),
            reboot_deadline: Some(Some(deadline)),
            last_reboot_at: Some(at),
            ..NodeFields::default()
        }
    }
}

/// One transition of the node lifecycle, written atomically, fenced by the writer's session, and
/// compare-and-swapped on the node's current state.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub from: NodeState,
    pub to: NodeState,
    /// The process the node is busy with after this transition (kept only outside `idle`/`queued`).
    pub process: Option<Process>,
    pub window: WindowChange,
    pub fields: NodeFields,
    /// Requests (process, source) recorded in the same write, after the window change, as
    /// [`Write::AddRequest`] records them: an open request of the same process is kept. A
    /// refused transition records none.
    pub requests: Vec<(Process, String)>,
}

impl Transition {
    pub fn new(from: NodeState, to: NodeState) -> Transition {
        Transition {
            from,
            to,
            process: None,
            window: WindowChange::None,
            fields: NodeFields::default(),
            requests: Vec::new(),
        }
    }

    /// The write of a decision of the core: its states, its window change, and the cordon
    /// bookkeeping of the lifecycle it leads to.
    pub fn of(decision: Decision) -> Transition {
        Transition {
            from: decision.from,
            to: decision.next.state,
            process: None,
            window: decision.window,
            fields: NodeFields {
                pre_cordoned: Some(decision.next.pre_cordoned),
                cordoned_by_rota: Some(decision.next.cordoned_by_rota),
                ..NodeFields::default()
            },
            requests: Vec::new(),
        }
    }

    /// Whether the write may let a waiting node go on: the core's rule, [`crate::wakes`].
    pub fn wakes(&self) -> bool {
        crate::wakes(self.from, self.to, &self.window)
    }

    /// Records a request for `process` from `source` with this transition.
    pub fn request(mut self, process: Process, source: impl Into<String>) -> Transition {
        self.requests.push((process, source.into()));
        self
    }

    pub fn process(mut self, process: Option<Process>) -> Transition {
        self.process = process;
        self
    }

    pub fn window(mut self, window: WindowChange) -> Transition {
        self.window = window;
        self
    }

    pub fn fields(mut self, fields: NodeFields) -> Transition {
        self.fields = fields;
        self
    }
}

/// How one active request of an open window ended (see [`Write::CompleteRequest`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The request is done: `finished` in history with `detail` (a script's output tail), and
    /// its backoff is cleared. The window stays open.
    Succeeded { detail: Option<String> },
    /// The attempt failed: `failed` in history with the cause and a backoff by `policy`. The
    /// request stays active, so that a retry runs it again in the same window, and the node
    /// fails closed.
    Failed {
        cause: String,
        policy: BackoffPolicy,
    },
}

/// Every write of a node's record, by its agent or an operator.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A lifecycle transition.
    Transition(Transition),
    /// A request for `process` unless an open one exists (an agent's or an operator's).
    AddRequest { process: Process, source: String },
    /// Withdraws the pending request for `process`, if any.
    CancelRequest { process: Process },
    /// How one active request of the open window ended; a failure fails the node closed.
    CompleteRequest { process: Process, outcome: Outcome },
    /// Why the node holds back (`Some`), or that nothing holds it any more.
    SetBlocked(Option<Blocked>),
    /// An operator gives the node's slot back and returns it to idle, canceling its window.
    /// The cordon bookkeeping stays, so that its agent uncordons the node.
    Unlock { reason: String },
    /// An operator lets a failed node try its window's work again.
    Retry,
}

impl Write {
    /// Whether the write, as applied, may let a waiting node go on, so that a store counts a
    /// change for it: a transition that gives a slot back or leaves the queue ([`Transition::wakes`]),
    /// a blocked reason set or cleared (the queue behind the node moves), an operator's unlock
    /// or retry. Requests wake no waiter: an operator's reaches the node's own agent by the
    /// store's own means.
    pub fn wakes(&self, applied: &Applied) -> bool {
        match self {
            Write::Transition(transition) => transition.wakes(),
            Write::SetBlocked(_) => applied.changed,
            Write::Unlock { .. } | Write::Retry => true,
            Write::AddRequest { .. }
            | Write::CancelRequest { .. }
            | Write::CompleteRequest { .. } => false,
        }
    }
}

/// A history entry a write appends; the store gives it its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub process: Process,
    pub event: HistoryEvent,
    pub at: Millis,
    pub cause: Option<String>,
    /// The slot the node held at this event.
    pub slot: Option<u32>,
    /// Whether this event gave the slot back.
    pub released: bool,
}

/// A request a write creates; the store gives it its id. A store that keeps every
/// procedure's request (a procedure runs once per node, ever) creates none for a procedure
/// the node already ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRequest {
    pub process: Process,
    pub source: String,
    pub created_at: Millis,
}

/// What a write does: the record after it, and what the store appends or closes beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The record after the write: its row, the requests still open (those that changed state
    /// carry their new one), and its backoffs.
    pub after: NodeOverview,
    /// Requests this write closed (done or canceled), with their final state.
    pub closed: Vec<RequestRecord>,
    /// Requests this write creates, after every other change.
    pub opened: Vec<NewRequest>,
    /// History entries to append, in order.
    pub history: Vec<Entry>,
    /// Whether the write changed anything at all (a repeated block reason, a cancel with
    /// nothing pending, or a request already open change nothing).
    pub changed: bool,
}

impl Applied {
    /// The request of `process` after the write: closed by it, or still open.
    pub fn request(&self, process: &Process) -> Option<&RequestRecord> {
        self.closed
            .iter()
            .chain(&self.after.open_requests)
            .find(|r| &r.process == process)
    }
}

/// A write the record does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("node {node} is {actual}, not {expected}: transition refused")]
    Conflict {
        node: NodeName,
        expected: NodeState,
        actual: NodeState,
    },
    #[error("node {node} is {state}: {write} needs a node that {needs}")]
    NotAllowed {
        node: NodeName,
        state: NodeState,
        write: &'static str,
        needs: &'static str,
    },
    #[error(
        "node {node} has no active request for {process}: only work of the open window can complete"
    )]
    NotActive { node: NodeName, process: Process },
}

/// The `last_result` a window change leaves on the node, if it sets one.
pub fn window_result(window: &WindowChange) -> Option<String> {
    match window {
        WindowChange::Finish => Some(crate::rollout::FINISHED.to_string()),
        WindowChange::Fail { cause, .. } => Some(format!("failed: {cause}")),
        WindowChange::Cancel { reason } => Some(format!("canceled: {reason}")),
        WindowChange::Postpone { reason } => Some(format!("postponed: {reason}")),
        _ => None,
    }
}

/// When a node may first take a slot for `processes`, asked at `now`: once their backoffs have
/// run out, and, with maintenance hours, when these next start after that. A node waiting for
/// its hours is not yet in the queue, so that it holds up no node within its hours.
pub fn eligible_at(
    backoffs: &[BackoffRecord],
    processes: &[&Process],
    now: Millis,
    hours: Option<&MaintenanceHours>,
) -> Millis {
    let backed_off = backoffs
        .iter()
        .filter(|b| processes.contains(&&b.process))
        .map(|b| b.until)
        .fold(now, Millis::max);
    hours.map_or(backed_off, |hours| hours.eligible_at(backed_off))
}

impl NodeOverview {
    /// A node with no request and no backoff.
    pub fn of(record: NodeRecord) -> NodeOverview {
        NodeOverview {
            record,
            open_requests: Vec::new(),
            backoffs: Vec::new(),
        }
    }

    /// Everything `write` does to this record at `now`, or why the record does not allow it.
    pub fn apply(&self, write: &Write, now: Millis) -> Result<Applied, RecordError> {
        let mut before = self.clone();
        before.open_requests.sort_by_key(|request| request.id);
        let mut applying = Applying {
            after: before.clone(),
            closed: Vec::new(),
            opened: Vec::new(),
            history: Vec::new(),
            now,
        };
        applying.write(write)?;
        let changed = applying.after != before
            || !applying.closed.is_empty()
            || !applying.opened.is_empty()
            || !applying.history.is_empty();
        Ok(Applied {
            after: applying.after,
            closed: applying.closed,
            opened: applying.opened,
            history: applying.history,
            changed,
        })
    }
}

struct Applying {
    after: NodeOverview,
    closed: Vec<RequestRecord>,
    opened: Vec<NewRequest>,
    history: Vec<Entry>,
    now: Millis,
}

impl Applying {
    fn node(&self) -> &NodeName {
        &self.after.record.node
    }

    fn state(&self) -> NodeState {
        self.after.record.state
    }

    fn write(&mut self, write: &Write) -> Result<(), RecordError> {
        match write {
            Write::Transition(transition) => self.transition(transition),
            Write::AddRequest { process, source } => {
                self.add_request(process, source);
                Ok(())
            }
            Write::CancelRequest { process } => {
                self.cancel_request(process);
                Ok(())
            }
            Write::CompleteRequest { process, outcome } => self.complete(process, outcome),
            Write::SetBlocked(blocked) => {
                let record = &mut self.after.record;
                if record.blocked.as_ref().map(|b| &b.reason) != blocked.as_ref().map(|b| &b.reason)
                {
                    record.blocked = blocked.clone();
                }
                Ok(())
            }
            Write::Unlock { reason } => {
                let record = &self.after.record;
                if record.slot.is_none() && !record.state.holds_slot() {
                    return Err(self.not_allowed("unlock", "holds a slot"));
                }
                let reason = format!("unlocked by an operator: {reason}");
                self.window(&WindowChange::Cancel { reason });
                let record = &mut self.after.record;
                record.state = NodeState::Idle;
                record.since = self.now;
                record.process = None;
                record.queued_at = None;
                Ok(())
            }
            Write::Retry => {
                if self.state() != NodeState::Failed {
                    return Err(self.not_allowed("retry", "is failed"));
                }
                self.after.record.state = NodeState::Maintaining;
                self.after.record.since = self.now;
                Ok(())
            }
        }
    }

    fn not_allowed(&self, write: &'static str, needs: &'static str) -> RecordError {
        RecordError::NotAllowed {
            node: self.node().clone(),
            state: self.state(),
            write,
            needs,
        }
    }

    fn transition(&mut self, t: &Transition) -> Result<(), RecordError> {
        if self.state() != t.from {
            return Err(RecordError::Conflict {
                node: self.node().clone(),
                expected: t.from,
                actual: self.state(),
            });
        }
        self.window(&t.window);
        let now = self.now;
        let record = &mut self.after.record;
        let clears_process = matches!(t.to, NodeState::Idle | NodeState::Queued);
        let f = &t.fields;
        record.state = t.to;
        record.since = now;
        record.process = if clears_process {
            None
        } else {
            t.process.clone().or(record.process.take())
        };
        if clears_process && f.cordoned_by_rota.is_none() {
            record.pre_cordoned = false;
            record.cordoned_by_rota = false;
        } else {
            record.pre_cordoned = f.pre_cordoned.unwrap_or(record.pre_cordoned);
            record.cordoned_by_rota = f.cordoned_by_rota.unwrap_or(record.cordoned_by_rota);
        }
        if let Some(boot_id) = &f.boot_id {
            record.boot_id.clone_from(boot_id);
        }
        if let Some(at) = f.reboot_started_at {
            record.reboot_started_at = at;
        }
        if let Some(at) = f.reboot_deadline {
            record.reboot_deadline = at;
        }
        if let Some(at) = f.last_reboot_at {
            record.last_reboot_at = Some(at);
        }
        if let Some(group) = &f.group {
            record.group.clone_from(group);
        }
        match &t.window {
            WindowChange::Queue { queued_at } => record.queued_at = *queued_at,
            WindowChange::Open => record.queued_at = None,
            _ => {}
        }
        for (process, source) in &t.requests {
            self.add_request(process, source);
        }
        Ok(())
    }

    fn add_request(&mut self, process: &Process, source: &str) {
        let open = self
            .after
            .open_requests
            .iter()
            .any(|r| &r.process == process)
            || self.opened.iter().any(|r| &r.process == process);
        if !open {
            self.opened.push(NewRequest {
                process: process.clone(),
                source: source.to_string(),
                created_at: self.now,
            });
        }
    }

    fn cancel_request(&mut self, process: &Process) {
        self.close_where(RequestState::Canceled, |r| {
            &r.process == process && r.state == RequestState::Pending
        });
    }

    /// Closes the open requests that `which` picks into `to`; returns their processes.
    fn close_where(
        &mut self,
        to: RequestState,
        which: impl Fn(&RequestRecord) -> bool,
    ) -> Vec<Process> {
        let (closing, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.after.open_requests)
            .into_iter()
            .partition(|r| which(r));
        self.after.open_requests = open;
        closing
            .into_iter()
            .map(|mut request| {
                request.state = to;
                let process = request.process.clone();
                self.closed.push(request);
                process
            })
            .collect()
    }

    /// Moves the open requests in `from` to `to` (both open); returns their processes.
    fn move_open(&mut self, from: RequestState, to: RequestState) -> Vec<Process> {
        self.after
            .open_requests
            .iter_mut()
            .filter(|r| r.state == from)
            .map(|r| {
                r.state = to;
                r.process.clone()
            })
            .collect()
    }

    fn active(&self) -> Vec<Process> {
        self.after
            .open_requests
            .iter()
            .filter(|r| r.state == RequestState::Active)
            .map(|r| r.process.clone())
            .collect()
    }

    fn complete(&mut self, process: &Process, outcome: &Outcome) -> Result<(), RecordError> {
        if matches!(outcome, Outcome::Failed { .. }) && self.state() != NodeState::Maintaining {
            // Fail closed in the same write: a failure recorded without it would let a
            // restarted agent start the next attempt instead of waiting for an operator.
            return Err(RecordError::Conflict {
                node: self.node().clone(),
                expected: NodeState::Maintaining,
                actual: self.state(),
            });
        }
        if !self.active().contains(process) {
            return Err(RecordError::NotActive {
                node: self.node().clone(),
                process: process.clone(),
            });
        }
        let slot = self.after.record.slot;
        let (event, cause) = match outcome {
            Outcome::Succeeded { detail } => {
                self.close_where(RequestState::Done, |r| {
                    &r.process == process && r.state == RequestState::Active
                });
                self.after.backoffs.retain(|b| &b.process != process);
                (HistoryEvent::Finished, detail.clone())
            }
            Outcome::Failed { cause, policy } => {
                self.back_off(process, policy, cause);
                let record = &mut self.after.record;
                record.state = NodeState::Failed;
                record.since = self.now;
                record.last_result = Some(format!("failed: {cause}"));
                record.last_result_at = Some(self.now);
                (HistoryEvent::Failed, Some(cause.clone()))
            }
        };
        self.history.push(Entry {
            process: process.clone(),
            event,
            at: self.now,
            cause,
            slot,
            released: false,
        });
        Ok(())
    }

    /// Starts or lengthens the backoff of `process` by `policy` (docs/design.md §6).
    fn back_off(&mut self, process: &Process, policy: &BackoffPolicy, cause: &str) {
        let previous = self
            .after
            .backoffs
            .iter()
            .find(|b| &b.process == process)
            .map(|b| b.last_interval);
        let next = policy.next(previous);
        let next_ms = i64::try_from(next.as_millis()).unwrap_or(i64::MAX);
        let backoff = BackoffRecord {
            node: self.node().clone(),
            process: process.clone(),
            until: self.now.saturating_add(next_ms),
            last_interval: next,
            cause: cause.to_string(),
        };
        match self
            .after
            .backoffs
            .iter_mut()
            .find(|b| &b.process == process)
        {
            Some(existing) => *existing = backoff,
            None => {
                self.after.backoffs.push(backoff);
                self.after.backoffs.sort_by_key(|b| b.process.to_string());
            }
        }
    }

    /// One entry per process; the last carries `released` when the slot goes. A release with
    /// no request involved is recorded for the node's process (a reboot when it has none).
    fn record_each(
        &mut self,
        processes: Vec<Process>,
        event: HistoryEvent,
        cause: Option<&str>,
        releases: bool,
    ) {
        let processes = if processes.is_empty() && releases {
            vec![self.fallback()]
        } else {
            processes
        };
        let count = processes.len();
        for (i, process) in processes.into_iter().enumerate() {
            self.history.push(Entry {
                process,
                event,
                at: self.now,
                cause: cause.map(str::to_string),
                slot: self.after.record.slot,
                released: releases && i + 1 == count,
            });
        }
    }

    fn fallback(&self) -> Process {
        self.after.record.process.clone().unwrap_or(Process::Reboot)
    }

    /// What a window change does to the requests, the history, the backoffs and the slot.
    fn window(&mut self, window: &WindowChange) {
        use RequestState as R;
        if let Some(result) = window_result(window) {
            self.after.record.last_result = Some(result);
            self.after.record.last_result_at = Some(self.now);
        }
        match window {
            WindowChange::None | WindowChange::Queue { .. } => {}
            WindowChange::Open | WindowChange::Join => {
                let started = self.move_open(R::Pending, R::Active);
                self.record_each(started, HistoryEvent::Started, None, false);
            }
            WindowChange::Finish => {
                let done = self.close_where(R::Done, |r| r.state == R::Active);
                self.after.backoffs.retain(|b| !done.contains(&b.process));
                // With no request left, the release gets an entry of its own.
                let event = if done.is_empty() {
                    HistoryEvent::Released
                } else {
                    HistoryEvent::Finished
                };
                self.record_each(done, event, None, true);
            }
            WindowChange::Fail {
                cause,
                policy,
                keep_slot,
            } => {
                let failed = if *keep_slot {
                    self.active()
                } else {
                    self.move_open(R::Active, R::Pending)
                };
                let failed = if failed.is_empty() {
                    vec![self.fallback()]
                } else {
                    failed
                };
                for process in &failed {
                    self.back_off(process, policy, cause);
                }
                self.record_each(failed, HistoryEvent::Failed, Some(cause), !keep_slot);
            }
            WindowChange::Cancel { reason } => {
                let canceled = self.close_where(R::Canceled, |r| r.state == R::Active);
                self.record_each(canceled, HistoryEvent::Canceled, Some(reason), true);
            }
            WindowChange::Postpone { reason } => {
                let postponed = self.move_open(R::Active, R::Pending);
                self.record_each(postponed, HistoryEvent::Postponed, Some(reason), true);
            }
        }
        if window.releases_slot() {
            self.after.record.slot = None;
        }
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;

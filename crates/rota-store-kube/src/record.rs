//! A RotaNode's status as rota-core's record of the node, and rota-core's answer to a write
//! ([`Applied`]) back into the status: the ids of new entries and requests, the procedures the
//! node ran, and the ended window that moves to a `RotaWindow`. No rule of its own.

use std::time::Duration;

use rota_core::{Applied, Blocked, NodeName, Process};
use rota_kube_api::crd::{
    BackoffStatus, BlockedStatus, HistoryStatus, RequestStateName, RequestStatus, RotaNodeStatus,
    StepStatus, Timestamp,
};
use rota_kube_api::window::RotaWindowSpec;
use rota_store::{
    BackoffRecord, HistoryEntry, Millis, NodeOverview, NodeRecord, RequestRecord, StepRecord,
};

/// History entries a RotaNode holds at most before they move to a `RotaWindow` even though no
/// window ended (a node that queues and leaves the queue again and again).
pub const HISTORY_LIMIT: usize = 32;

/// A node idle since `now`, with nothing recorded.
pub fn new_status(now: Millis) -> RotaNodeStatus {
    RotaNodeStatus {
        state: rota_core::NodeState::Idle,
        since: Timestamp(now),
        process: None,
        slot: None,
        session: None,
        pre_cordoned: false,
        cordoned_by_rota: false,
        boot_id: None,
        reboot_started_at: None,
        reboot_deadline: None,
        last_reboot_at: None,
        queued_at: None,
        last_result: None,
        last_result_at: None,
        group: None,
        blocked: None,
        requests: Vec::new(),
        backoff: Vec::new(),
        history: Vec::new(),
        steps: Vec::new(),
        closed: Vec::new(),
        procedures: Vec::new(),
        windows: Vec::new(),
        last_id: 0,
    }
}

/// The node's record as rota-core reads it.
pub fn overview(node: &NodeName, status: &RotaNodeStatus) -> NodeOverview {
    NodeOverview {
        record: node_record(node, status),
        open_requests: status
            .requests
            .iter()
            .map(|r| request_record(node, r))
            .collect(),
        backoffs: status
            .backoff
            .iter()
            .map(|b| backoff_record(node, b))
            .collect(),
    }
}

pub fn node_record(node: &NodeName, status: &RotaNodeStatus) -> NodeRecord {
    NodeRecord {
        node: node.clone(),
        state: status.state,
        since: status.since.0,
        process: status.process.clone(),
        slot: status.slot,
        pre_cordoned: status.pre_cordoned,
        cordoned_by_rota: status.cordoned_by_rota,
        boot_id: status.boot_id.clone(),
        reboot_started_at: status.reboot_started_at.map(|t| t.0),
        reboot_deadline: status.reboot_deadline.map(|t| t.0),
        last_reboot_at: status.last_reboot_at.map(|t| t.0),
        queued_at: status.queued_at.map(|t| t.0),
        last_result: status.last_result.clone(),
        last_result_at: status.last_result_at.map(|t| t.0),
        group: status.group.clone(),
        blocked: status.blocked.as_ref().map(|b| Blocked {
            reason: b.reason.clone(),
            since: b.since.0,
        }),
    }
}

pub fn request_record(node: &NodeName, r: &RequestStatus) -> RequestRecord {
    RequestRecord {
        id: r.id,
        node: node.clone(),
        process: r.process.clone(),
        source: r.source.clone(),
        created_at: r.created_at.0,
        state: r.state.into(),
    }
}

pub fn history_entry(node: &NodeName, h: &HistoryStatus) -> HistoryEntry {
    HistoryEntry {
        id: h.id,
        node: node.clone(),
        process: h.process.clone(),
        event: h.event,
        at: h.at.0,
        cause: h.cause.clone(),
        slot: h.slot,
        released: h.released,
    }
}

pub fn step_record(node: &NodeName, s: &StepStatus) -> StepRecord {
    StepRecord {
        node: node.clone(),
        state: s.state,
        at: s.at.0,
        note: s.note.clone(),
    }
}

fn backoff_record(node: &NodeName, b: &BackoffStatus) -> BackoffRecord {
    BackoffRecord {
        node: node.clone(),
        process: b.process.clone(),
        until: b.until.0,
        last_interval: Duration::from_secs(b.last_interval_seconds),
        cause: b.cause.clone(),
    }
}

fn request_status(r: &RequestRecord) -> RequestStatus {
    RequestStatus {
        id: r.id,
        process: r.process.clone(),
        source: r.source.clone(),
        created_at: Timestamp(r.created_at),
        state: r.state.into(),
    }
}

/// What [`apply`] did besides the status.
#[derive(Debug, Default)]
pub struct Persisted {
    /// The requests the write opened, with their ids.
    pub opened: Vec<RequestRecord>,
    /// The window that ended, to create before the status is written.
    pub window: Option<RotaWindowSpec>,
    /// Windows no longer kept, to delete after the status is written.
    pub dropped: Vec<String>,
}

/// Writes rota-core's answer into `status`, which it was decided on, at `now`: the record, its
/// requests and backoffs, and what the write appends. A procedure the node ran before gets no
/// new request (it runs once per node, ever). When an entry gives the slot back (the window
/// ended), or the history grew past [`HISTORY_LIMIT`], what the status recorded since the last
/// window moves to a `RotaWindow` named in `status.windows`, of which the node keeps `kept`.
pub fn apply(
    status: &mut RotaNodeStatus,
    node: &NodeName,
    rota_node: &str,
    applied: &Applied,
    kept: usize,
) -> Persisted {
    let record = &applied.after.record;
    let released = status.slot.is_some() && record.slot.is_none();
    let blocked = record.blocked.as_ref().map(|b| &b.reason);
    if record.state != status.state || record.since != status.since.0 {
        status.steps.push(StepStatus {
            state: record.state,
            at: Timestamp(record.since),
            note: blocked.cloned(),
        });
    } else if let Some(reason) = blocked
        && status.blocked.as_ref().map(|b| &b.reason) != Some(reason)
        && let Some(step) = status.steps.last_mut()
    {
        // As the SQL stores' steps_note: the step keeps what last held the node back in it.
        step.note = Some(reason.clone());
    }
    set_record(status, record);
    status.requests = applied
        .after
        .open_requests
        .iter()
        .map(request_status)
        .collect();
    for open in &status.requests {
        if let Some(ran) = status.procedures.iter_mut().find(|r| r.id == open.id) {
            ran.state = open.state;
        }
    }
    status.backoff = applied
        .after
        .backoffs
        .iter()
        .map(|b| BackoffStatus {
            process: b.process.clone(),
            until: Timestamp(b.until),
            last_interval_seconds: b.last_interval.as_secs(),
            cause: b.cause.clone(),
        })
        .collect();
    for closed in &applied.closed {
        let closed = request_status(closed);
        remember_procedure(status, &closed);
        status.closed.push(closed);
    }
    let mut opened = Vec::new();
    for new in &applied.opened {
        if matches!(new.process, Process::Mop(_))
            && status.procedures.iter().any(|r| r.process == new.process)
        {
            continue;
        }
        status.last_id += 1;
        let request = RequestStatus {
            id: status.last_id,
            process: new.process.clone(),
            source: new.source.clone(),
            created_at: Timestamp(new.created_at),
            state: RequestStateName::Pending,
        };
        remember_procedure(status, &request);
        opened.push(request_record(node, &request));
        status.requests.push(request);
    }
    for entry in &applied.history {
        status.last_id += 1;
        status.history.push(HistoryStatus {
            id: status.last_id,
            process: entry.process.clone(),
            event: entry.event,
            at: Timestamp(entry.at),
            cause: entry.cause.clone(),
            slot: entry.slot,
            released: entry.released,
        });
    }
    let ended = released || applied.history.iter().any(|e| e.released);
    let mut persisted = Persisted {
        opened,
        ..Persisted::default()
    };
    if (ended && !status.history.is_empty()) || status.history.len() > HISTORY_LIMIT {
        let window = RotaWindowSpec {
            node: node.to_string(),
            history: std::mem::take(&mut status.history),
            steps: std::mem::take(&mut status.steps),
            closed: std::mem::take(&mut status.closed),
        };
        status.windows.push(window.name(rota_node));
        let excess = status.windows.len().saturating_sub(kept.max(1));
        persisted.dropped = status.windows.drain(..excess).collect();
        persisted.window = Some(window);
    }
    persisted
}

/// Keeps `request` among the procedures the node ran, in its latest state.
fn remember_procedure(status: &mut RotaNodeStatus, request: &RequestStatus) {
    if !matches!(request.process, Process::Mop(_)) {
        return;
    }
    match status
        .procedures
        .iter_mut()
        .find(|r| r.process == request.process)
    {
        Some(known) if known.id == request.id => known.state = request.state,
        Some(_) => {}
        None => status.procedures.push(request.clone()),
    }
}

fn set_record(status: &mut RotaNodeStatus, record: &NodeRecord) {
    status.state = record.state;
    status.since = Timestamp(record.since);
    status.process = record.process.clone();
    status.slot = record.slot;
    status.pre_cordoned = record.pre_cordoned;
    status.cordoned_by_rota = record.cordoned_by_rota;
    status.boot_id = record.boot_id.clone();
    status.reboot_started_at = record.reboot_started_at.map(Timestamp);
    status.reboot_deadline = record.reboot_deadline.map(Timestamp);
    status.last_reboot_at = record.last_reboot_at.map(Timestamp);
    status.queued_at = record.queued_at.map(Timestamp);
    status.last_result = record.last_result.clone();
    status.last_result_at = record.last_result_at.map(Timestamp);
    status.group.clone_from(&record.group);
    status.blocked = record.blocked.as_ref().map(|b| BlockedStatus {
        reason: b.reason.clone(),
        since: Timestamp(b.since),
    });
}

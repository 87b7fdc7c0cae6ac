//! The pure half of the store: what a write does to a [`RotaNodeStatus`], and how a status
//! reads back as the store's records. The same rules as the SQLite store's SQL, on one object.

use std::time::Duration;

use rota_core::{BackoffPolicy, HistoryEvent, NodeName, NodeState, Process};
use rota_store::{
    BackoffRecord, Blocked, HistoryEntry, Millis, NodeRecord, Outcome, RequestRecord, RequestState,
    Transition, WindowChange,
};

use crate::crd::{
    BackoffStatus, HISTORY_LIMIT, HistoryStatus, RequestStateName, RequestStatus, RotaNodeStatus,
    SCHEMA, STEP_LIMIT, StepStatus, Timestamp,
};
use crate::history_ring::{bounded, last_stamp};
use crate::ids::{self, Stamp};
use crate::node_requests::trim_requests;
pub use crate::node_requests::{add_request, cancel_request, every_request, open_requests};
#[cfg(test)]
use crate::procedure_ledger::Ledger;

impl From<RequestStateName> for RequestState {
    fn from(state: RequestStateName) -> RequestState {
        match state {
            RequestStateName::Pending => RequestState::Pending,
            RequestStateName::Active => RequestState::Active,
            RequestStateName::Done => RequestState::Done,
            RequestStateName::Canceled => RequestState::Canceled,
        }
    }
}

impl RequestStateName {
    pub(crate) fn is_open(self) -> bool {
        matches!(self, RequestStateName::Pending | RequestStateName::Active)
    }
}

/// A fresh node's status: idle since `now`.
pub fn new_status(now: Millis, tag: u32) -> RotaNodeStatus {
    RotaNodeStatus {
        state: NodeState::Idle,
        since: Timestamp(now),
        tag,
        schema: SCHEMA,
        ..RotaNodeStatus::default()
    }
}

pub fn node_record(node: &NodeName, status: &RotaNodeStatus, slot: Option<u32>) -> NodeRecord {
    NodeRecord {
        node: node.clone(),
        state: status.state,
        since: status.since.0,
        process: status.process.clone(),
        slot,
        pre_cordoned: status.pre_cordoned,
        cordoned_by_rota: status.cordoned_by_rota,
        boot_id: status.boot_id.clone(),
        reboot_started_at: status.reboot_started_at.map(|t| t.0),
        reboot_deadline: status.reboot_deadline.map(|t| t.0),
        last_reboot_at: status.last_reboot_at.map(|t| t.0),
        queued_at: status.queued_at.map(|t| t.0),
        last_result: status.last_result.clone(),
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

pub fn backoff_record(node: &NodeName, b: &BackoffStatus) -> BackoffRecord {
    BackoffRecord {
        node: node.clone(),
        process: b.process.clone(),
        until: b.until.0,
        last_interval: Duration::from_secs(b.last_interval_seconds),
        cause: b.cause.clone(),
    }
}

/// Applies `transition` to a status in `transition.from` (the caller checked): its window
/// change, then the node fields, as one write. `slot` is the slot the node holds now.
pub fn apply_transition(
    status: &mut RotaNodeStatus,
    transition: &Transition,
    slot: Option<u32>,
    now: Millis,
) {
    apply_window(status, &transition.window, slot, now);
    let clears_process = matches!(transition.to, NodeState::Idle | NodeState::Queued);
    enter(status, transition.to, now);
    if clears_process {
        status.process = None;
    } else if let Some(process) = &transition.process {
        status.process = Some(process.clone());
    }
    let f = &transition.fields;
    if clears_process && f.cordoned_by_rota.is_none() {
        status.pre_cordoned = false;
        status.cordoned_by_rota = false;
    } else {
        status.pre_cordoned = f.pre_cordoned.unwrap_or(status.pre_cordoned);
        status.cordoned_by_rota = f.cordoned_by_rota.unwrap_or(status.cordoned_by_rota);
    }
    if let Some(boot_id) = &f.boot_id {
        status.boot_id.clone_from(boot_id);
    }
    if let Some(at) = f.reboot_started_at {
        status.reboot_started_at = at.map(Timestamp);
    }
    if let Some(at) = f.reboot_deadline {
        status.reboot_deadline = at.map(Timestamp);
    }
    if let Some(at) = f.last_reboot_at {
        status.last_reboot_at = Some(Timestamp(at));
    }
    match &transition.window {
        WindowChange::Queue { queued_at } => status.queued_at = queued_at.map(Timestamp),
        WindowChange::Open => status.queued_at = None,
        _ => {}
    }
    status.slot = if transition.window.releases_slot() {
        None
    } else {
        slot
    };
}

/// The node enters `state` at `now`: a step, recorded unless the state stays the same (the
/// oldest dropped past [`STEP_LIMIT`]).
pub fn enter(status: &mut RotaNodeStatus, state: NodeState, now: Millis) {
    if status.state != state {
        status.steps.push(StepStatus {
            state,
            at: Timestamp(now),
        });
        let over = status.steps.len().saturating_sub(STEP_LIMIT);
        status.steps.drain(..over);
    }
    status.state = state;
    status.since = Timestamp(now);
}

/// An operator's unlock: cancels the window (its active requests and the slot) and returns the
/// node to idle. The cordon flags stay, so that the agent uncordons what it cordoned.
pub fn apply_unlock(status: &mut RotaNodeStatus, reason: &str, slot: Option<u32>, now: Millis) {
    let cause = format!("unlocked by an operator: {reason}");
    apply_window(status, &WindowChange::Cancel { reason: cause }, slot, now);
    enter(status, NodeState::Idle, now);
    status.process = None;
    status.queued_at = None;
    status.slot = None;
}

/// Moves the requests in `from` to `to` and returns their processes, oldest first.
fn move_requests(
    status: &mut RotaNodeStatus,
    from: RequestStateName,
    to: RequestStateName,
    now: Millis,
) -> Vec<Process> {
    let closes = !to.is_open();
    let mut moved = Vec::new();
    for r in &mut status.requests {
        if r.state == from {
            r.state = to;
            if closes {
                r.finished_at = Some(Timestamp(now));
            }
            moved.push(r.process.clone());
        }
    }
    moved
}

fn apply_window(
    status: &mut RotaNodeStatus,
    window: &WindowChange,
    slot: Option<u32>,
    now: Millis,
) {
    let fallback = status.process.clone().unwrap_or(Process::Reboot);
    if let Some(result) = rota_core::window_result(window) {
        status.last_result = Some(bounded(&result));
    }
    let record = Record { slot, now };
    match window {
        WindowChange::None | WindowChange::Queue { .. } => {}
        WindowChange::Open | WindowChange::Join => {
            let started = move_requests(
                status,
                RequestStateName::Pending,
                RequestStateName::Active,
                now,
            );
            record.each(
                status,
                &started,
                &fallback,
                HistoryEvent::Started,
                None,
                false,
            );
        }
        WindowChange::Finish => {
            let done = move_requests(
                status,
                RequestStateName::Active,
                RequestStateName::Done,
                now,
            );
            status.backoff.retain(|b| !done.contains(&b.process));
            // With no request left, the release gets an entry of its own.
            let event = if done.is_empty() {
                HistoryEvent::Released
            } else {
                HistoryEvent::Finished
            };
            record.each(status, &done, &fallback, event, None, true);
        }
        WindowChange::Fail {
            cause,
            policy,
            keep_slot,
        } => {
            let failed = if *keep_slot {
                open_requests(status)
                    .filter(|r| r.state == RequestStateName::Active)
                    .map(|r| r.process.clone())
                    .collect()
            } else {
                move_requests(
                    status,
                    RequestStateName::Active,
                    RequestStateName::Pending,
                    now,
                )
            };
            let failed = if failed.is_empty() {
                vec![fallback.clone()]
            } else {
                failed
            };
            for process in &failed {
                record_backoff(status, process, policy, cause, now);
            }
            record.each(
                status,
                &failed,
                &fallback,
                HistoryEvent::Failed,
                Some(cause),
                !keep_slot,
            );
        }
        WindowChange::Cancel { reason } => {
            let canceled = move_requests(
                status,
                RequestStateName::Active,
                RequestStateName::Canceled,
                now,
            );
            record.each(
                status,
                &canceled,
                &fallback,
                HistoryEvent::Canceled,
                Some(reason),
                true,
            );
        }
        WindowChange::Postpone { reason } => {
            let postponed = move_requests(
                status,
                RequestStateName::Active,
                RequestStateName::Pending,
                now,
            );
            record.each(
                status,
                &postponed,
                &fallback,
                HistoryEvent::Postponed,
                Some(reason),
                true,
            );
        }
    }
    trim_requests(status);
}

struct Record {
    slot: Option<u32>,
    now: Millis,
}

impl Record {
    /// One history entry per process; the last one carries `released` when the slot goes (a
    /// release with no process to name still gets one entry, for `fallback`).
    fn each(
        &self,
        status: &mut RotaNodeStatus,
        processes: &[Process],
        fallback: &Process,
        event: HistoryEvent,
        cause: Option<&str>,
        releases: bool,
    ) {
        let fallback = [fallback.clone()];
        let processes = if processes.is_empty() && releases {
            &fallback[..]
        } else {
            processes
        };
        for (i, process) in processes.iter().enumerate() {
            let stamp: Stamp = ids::next(last_stamp(status), self.now);
            status.history.push(HistoryStatus {
                id: stamp.id(status.tag),
                process: process.clone(),
                event,
                at: Timestamp(stamp.at),
                cause: cause.map(str::to_string),
                slot: self.slot,
                released: releases && i + 1 == processes.len(),
            });
        }
        let excess = status.history.len().saturating_sub(HISTORY_LIMIT);
        status.history.drain(..excess);
    }
}

fn record_backoff(
    status: &mut RotaNodeStatus,
    process: &Process,
    policy: &BackoffPolicy,
    cause: &str,
    now: Millis,
) {
    let existing = status.backoff.iter_mut().find(|b| &b.process == process);
    let previous = existing
        .as_ref()
        .map(|b| Duration::from_secs(b.last_interval_seconds));
    let next = policy.next(previous).as_secs();
    let until =
        Timestamp(now.saturating_add(i64::try_from(next).unwrap_or(i64::MAX / 1000) * 1000));
    let entry = BackoffStatus {
        process: process.clone(),
        until,
        last_interval_seconds: next,
        cause: bounded(cause),
    };
    match existing {
        Some(b) => *b = entry,
        None => status.backoff.push(entry),
    }
}

/// Ends the active request for `process` without closing the window (see
/// `Store::complete_request`): a success closes it as done, records `finished` with the detail
/// and clears its backoff; a failure records `failed`, backs it off and keeps it active.
/// `None` when the node has no active request for `process`.
pub fn complete_request(
    status: &mut RotaNodeStatus,
    process: &Process,
    outcome: &Outcome,
    now: Millis,
) -> Option<RequestStatus> {
    let request = status
        .requests
        .iter_mut()
        .find(|r| r.state == RequestStateName::Active && &r.process == process)?;
    let (event, cause) = match outcome {
        Outcome::Succeeded { detail } => {
            request.state = RequestStateName::Done;
            request.finished_at = Some(Timestamp(now));
            (HistoryEvent::Finished, detail.as_deref())
        }
        Outcome::Failed { cause, .. } => (HistoryEvent::Failed, Some(cause.as_str())),
    };
    let request = request.clone();
    match outcome {
        Outcome::Succeeded { .. } => status.backoff.retain(|b| &b.process != process),
        Outcome::Failed { cause, policy } => {
            record_backoff(status, process, policy, cause, now);
            status.last_result = Some(bounded(&format!("failed: {cause}")));
        }
    }
    let record = Record {
        slot: status.slot,
        now,
    };
    record.each(
        status,
        std::slice::from_ref(process),
        process,
        event,
        cause,
        false,
    );
    trim_requests(status);
    Some(request)
}

#[cfg(test)]
mod tests {
    use rota_store::NodeFields;

    use super::*;

    const T: Millis = 1_800_000_000_000;

    fn policy() -> BackoffPolicy {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            maximum: Duration::from_secs(5),
            exponent: 2.0,
        }
    }

    fn name() -> NodeName {
        NodeName::new("node-a").expect("valid")
    }

    fn queued_with_request() -> RotaNodeStatus {
        let mut status = new_status(T, 3);
        add_request(
            &mut status,
            &Process::Reboot,
            "/run/reboot-needed",
            T,
            &Ledger::default(),
        );
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Idle, NodeState::Queued)
                .window(WindowChange::Queue { queued_at: Some(T) }),
            None,
            T + 1,
        );
        status
    }

    #[test]
    fn a_status_reads_back_as_the_record() {
        let status = RotaNodeStatus {
            state: NodeState::Rebooting,
            since: Timestamp(T),
            process: Some(Process::Mop("firmware".into())),
            pre_cordoned: true,
            boot_id: Some("b1".into()),
            reboot_deadline: Some(Timestamp(T + 900_000)),
            last_result: Some("finished".into()),
            ..new_status(T, 1)
        };
        let record = node_record(&name(), &status, Some(2));
        assert_eq!(record.state, NodeState::Rebooting);
        assert_eq!(record.since, T);
        assert_eq!(record.process, Some(Process::Mop("firmware".into())));
        assert_eq!(record.slot, Some(2));
        assert!(record.pre_cordoned && !record.cordoned_by_rota);
        assert_eq!(record.boot_id.as_deref(), Some("b1"));
        assert_eq!(record.reboot_deadline, Some(T + 900_000));
        assert_eq!(record.reboot_started_at, None);
    }

    #[test]
    fn a_status_survives_json_exactly() {
        let mut status = queued_with_request();
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Queued, NodeState::Draining)
                .window(WindowChange::Open)
                .process(Some(Process::Reboot)),
            Some(0),
            T + 1234,
        );
        let json = serde_json::to_value(&status).expect("serialise");
        assert_eq!(json["since"], "2027-01-15T08:00:01.234Z");
        assert_eq!(json["state"], "draining");
        let back: RotaNodeStatus = serde_json::from_value(json).expect("parse");
        assert_eq!(back, status);
    }

    #[test]
    fn opening_the_window_activates_requests_and_records_started() {
        let mut status = queued_with_request();
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Queued, NodeState::Draining)
                .window(WindowChange::Open)
                .process(Some(Process::Reboot))
                .fields(NodeFields {
                    cordoned_by_rota: Some(true),
                    ..NodeFields::default()
                }),
            Some(1),
            T + 10,
        );
        assert_eq!(status.queued_at, None);
        assert_eq!(status.slot, Some(1));
        assert!(status.cordoned_by_rota);
        assert_eq!(status.requests[0].state, RequestStateName::Active);
        assert_eq!(status.history.len(), 1);
        let h = &status.history[0];
        assert_eq!(
            (h.event, h.slot, h.released),
            (HistoryEvent::Started, Some(1), false)
        );
        assert_eq!(h.id, Stamp { at: T + 10, seq: 0 }.id(3));
    }

    #[test]
    fn a_failed_drain_requeues_backs_off_and_releases() {
        let mut status = queued_with_request();
        let open = Transition::new(NodeState::Queued, NodeState::Draining)
            .window(WindowChange::Open)
            .process(Some(Process::Reboot));
        let fail =
            Transition::new(NodeState::Draining, NodeState::Queued).window(WindowChange::Fail {
                cause: "pdb".into(),
                policy: policy(),
                keep_slot: false,
            });
        let mut intervals = Vec::new();
        for round in 0..3 {
            apply_transition(&mut status, &open, Some(0), T + round * 10);
            apply_transition(&mut status, &fail, Some(0), T + round * 10 + 5);
            intervals.push(status.backoff[0].last_interval_seconds);
        }
        assert_eq!(intervals, vec![1, 2, 4]);
        assert_eq!(status.requests[0].state, RequestStateName::Pending);
        assert_eq!(status.slot, None);
        assert!(!status.cordoned_by_rota);
        let last = status.history.last().expect("entry");
        assert!(last.released && last.event == HistoryEvent::Failed);
        assert_eq!(status.last_result.as_deref(), Some("failed: pdb"));
    }

    #[test]
    fn finishing_clears_backoff_and_closes_requests() {
        let mut status = queued_with_request();
        status.backoff.push(BackoffStatus {
            process: Process::Reboot,
            until: Timestamp(T),
            last_interval_seconds: 4,
            cause: "x".into(),
        });
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
            Some(0),
            T + 2,
        );
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Verifying, NodeState::Idle).window(WindowChange::Finish),
            Some(0),
            T + 3,
        );
        assert!(status.backoff.is_empty());
        assert_eq!(open_requests(&status).count(), 0);
        assert_eq!(status.requests[0].finished_at, Some(Timestamp(T + 3)));
        assert!(status.history.last().is_some_and(|h| h.released));
    }

    #[test]
    fn history_keeps_the_last_fifty_with_increasing_ids() {
        let mut status = new_status(T, 9);
        let join =
            Transition::new(NodeState::Draining, NodeState::Draining).window(WindowChange::Join);
        for i in 0..60 {
            add_request(
                &mut status,
                &Process::Mop(format!("m{i}")),
                "test",
                T,
                &Ledger::default(),
            );
            apply_transition(&mut status, &join, Some(0), T);
        }
        assert_eq!(status.history.len(), HISTORY_LIMIT);
        assert!(status.history.windows(2).all(|w| w[0].id < w[1].id));
        assert!(status.history.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn completing_a_request_ends_only_that_one() {
        let mut status = new_status(T, 2);
        let first = Process::Mop("first".into());
        let second = Process::Mop("second".into());
        add_request(&mut status, &first, "procedure", T, &Ledger::default());
        add_request(&mut status, &second, "procedure", T, &Ledger::default());
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
            Some(4),
            T + 1,
        );
        let failed = Outcome::Failed {
            cause: "exit 3".into(),
            policy: policy(),
        };
        let request = complete_request(&mut status, &second, &failed, T + 2).expect("active");
        assert_eq!(request.state, RequestStateName::Active);
        assert_eq!(status.backoff[0].last_interval_seconds, 1);
        assert_eq!(status.last_result.as_deref(), Some("failed: exit 3"));
        let done = Outcome::Succeeded {
            detail: Some("ok".into()),
        };
        let request = complete_request(&mut status, &second, &done, T + 3).expect("active");
        assert_eq!(request.state, RequestStateName::Done);
        assert!(status.backoff.is_empty());
        let last = status.history.last().expect("entry");
        assert_eq!(
            (last.event, last.cause.as_deref(), last.slot, last.released),
            (HistoryEvent::Finished, Some("ok"), Some(4), false)
        );
        assert_eq!(open_requests(&status).count(), 1, "first is still active");
        assert!(complete_request(&mut status, &second, &done, T + 4).is_none());
    }

    #[test]
    fn unlock_cancels_and_keeps_the_cordon_marks() {
        let mut status = queued_with_request();
        apply_transition(
            &mut status,
            &Transition::new(NodeState::Queued, NodeState::Draining)
                .window(WindowChange::Open)
                .fields(NodeFields {
                    cordoned_by_rota: Some(true),
                    ..NodeFields::default()
                }),
            Some(0),
            T + 2,
        );
        apply_unlock(&mut status, "disk replaced", Some(0), T + 3);
        assert_eq!(status.state, NodeState::Idle);
        assert!(status.cordoned_by_rota);
        let last = status.history.last().expect("entry");
        assert_eq!(last.event, HistoryEvent::Canceled);
        assert!(last.released);
        assert!(
            last.cause
                .as_deref()
                .is_some_and(|c| c.contains("disk replaced"))
        );
    }
}

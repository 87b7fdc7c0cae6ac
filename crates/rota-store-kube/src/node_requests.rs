//! A node's requests in its RotaNode, pure: adding one (a procedure's only once per node,
//! ever), canceling one, bounding the closed ones, and finding every one again, with those
//! that moved to the node's procedure ledger (see `procedure_ledger`).

use rota_core::Process;
use rota_store::Millis;

use crate::crd::{
    ArchivedRequest, CLOSED_REQUEST_LIMIT, RequestStateName, RequestStatus, RotaNodeStatus,
    Timestamp,
};
use crate::ids;
use crate::procedure_ledger::Ledger;

/// The node's open (pending or active) requests, oldest first.
pub fn open_requests(status: &RotaNodeStatus) -> impl Iterator<Item = &RequestStatus> {
    status.requests.iter().filter(|r| r.state.is_open())
}

/// Records a pending request for `process` unless an open one exists, or, for a procedure,
/// any request in `status` or `ledger` (which the caller made current enough, see
/// `procedure_ledger::stale`); returns that request and whether it is new.
pub fn add_request(
    status: &mut RotaNodeStatus,
    process: &Process,
    source: &str,
    now: Millis,
    ledger: &Ledger,
) -> (RequestStatus, bool) {
    if let Some(open) = open_requests(status).find(|r| &r.process == process) {
        return (open.clone(), false);
    }
    if let Some(once) = procedure_request(status, process, ledger) {
        return (once, false);
    }
    let last = status
        .requests
        .iter()
        .max_by_key(|r| r.id)
        .map(|r| ids::stamp_of(r.id, r.created_at.0));
    let stamp = ids::next(last, now);
    let request = RequestStatus::pending(
        stamp.id(status.tag),
        process.clone(),
        source,
        Timestamp(stamp.at),
    );
    status.requests.push(request.clone());
    (request, true)
}

/// Cancels the pending request for `process`; returns whether there was one.
pub fn cancel_request(status: &mut RotaNodeStatus, process: &Process, now: Millis) -> bool {
    let mut canceled = false;
    for r in &mut status.requests {
        if r.state == RequestStateName::Pending && &r.process == process {
            r.state = RequestStateName::Canceled;
            r.finished_at = Some(Timestamp(now));
            canceled = true;
        }
    }
    trim_requests(status);
    canceled
}

/// Keeps every open request and the most recent closed ones; a procedure's request that goes
/// is kept in `procedure_requests` instead, in short (see [`procedure_request`]).
pub(crate) fn trim_requests(status: &mut RotaNodeStatus) {
    let closed = status
        .requests
        .iter()
        .filter(|r| !r.state.is_open())
        .count();
    let mut drop = closed.saturating_sub(CLOSED_REQUEST_LIMIT);
    let mut archived = Vec::new();
    status.requests.retain(|r| {
        if drop > 0 && !r.state.is_open() {
            drop -= 1;
            if matches!(r.process, Process::Mop(_)) {
                archived.push(ArchivedRequest {
                    id: r.id,
                    process: r.process.clone(),
                    source: r.source.clone(),
                    state: r.state,
                });
            }
            false
        } else {
            true
        }
    });
    status.procedure_requests.extend(archived);
}

/// The node's request for a procedure in any state, if it ever had one: a procedure runs at
/// most once per node, so a closed one is returned as it is instead of making a new one.
fn procedure_request(
    status: &RotaNodeStatus,
    process: &Process,
    ledger: &Ledger,
) -> Option<RequestStatus> {
    if !matches!(process, Process::Mop(_)) {
        return None;
    }
    every_request(status, ledger)
        .filter(|r| &r.process == process)
        .max_by_key(|r| r.id)
}

/// Every request the node ever had that it still knows: the kept ones, the archived procedure
/// requests and those of its ledger (dated by their ids), each id once, the RotaNode's first.
pub fn every_request<'a>(
    status: &'a RotaNodeStatus,
    ledger: &'a Ledger,
) -> impl Iterator<Item = RequestStatus> + 'a {
    let archived = status
        .procedure_requests
        .iter()
        .chain(
            ledger
                .requests
                .iter()
                .filter(|l| !status.procedure_requests.iter().any(|r| r.id == l.id)),
        )
        .filter(|r| !status.requests.iter().any(|k| k.id == r.id))
        .map(|r| RequestStatus {
            id: r.id,
            process: r.process.clone(),
            source: r.source.clone(),
            created_at: Timestamp(ids::at_of(r.id)),
            state: r.state,
            finished_at: None,
        });
    status.requests.iter().cloned().chain(archived)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Millis = 1_800_000_000_000;

    fn new_status() -> RotaNodeStatus {
        crate::status::new_status(T, 0)
    }

    #[test]
    fn closed_requests_are_bounded_and_open_ones_kept() {
        let mut status = new_status();
        for i in 0..40 {
            let process = Process::Mop(format!("m{i}"));
            add_request(&mut status, &process, "test", T + i, &Ledger::default());
            cancel_request(&mut status, &process, T + i);
        }
        add_request(
            &mut status,
            &Process::Reboot,
            "test",
            T + 100,
            &Ledger::default(),
        );
        assert_eq!(status.requests.len(), CLOSED_REQUEST_LIMIT + 1);
        assert_eq!(open_requests(&status).count(), 1);
        let (again, created) = add_request(
            &mut status,
            &Process::Reboot,
            "other",
            T + 200,
            &Ledger::default(),
        );
        assert!(!created);
        assert_eq!(again.source, "test");
    }

    #[test]
    fn a_procedure_is_requested_once_even_after_its_request_left_the_list() {
        let mut status = new_status();
        let kernel = Process::Mop("kernel".into());
        let (first, created) =
            add_request(&mut status, &kernel, "procedure", T, &Ledger::default());
        assert!(created);
        cancel_request(&mut status, &kernel, T + 1);
        for i in 0..CLOSED_REQUEST_LIMIT {
            let process = Process::Mop(format!("other{i}"));
            add_request(
                &mut status,
                &process,
                "procedure",
                T + 2,
                &Ledger::default(),
            );
            cancel_request(&mut status, &process, T + 2);
        }
        assert!(status.requests.iter().all(|r| r.process != kernel));
        assert_eq!(status.procedure_requests.len(), 1);
        let (again, created) =
            add_request(&mut status, &kernel, "procedure", T + 3, &Ledger::default());
        assert!(!created);
        assert_eq!(again.id, first.id);
        assert_eq!(again.state, RequestStateName::Canceled);
        assert_eq!(
            every_request(&status, &Ledger::default()).count(),
            CLOSED_REQUEST_LIMIT + 1
        );
        for _ in 0..CLOSED_REQUEST_LIMIT + 1 {
            add_request(
                &mut status,
                &Process::Reboot,
                "sentinel",
                T + 4,
                &Ledger::default(),
            );
            cancel_request(&mut status, &Process::Reboot, T + 4);
        }
        assert!(
            status.procedure_requests.len() == CLOSED_REQUEST_LIMIT + 1,
            "closed reboots are forgotten, procedures are not"
        );
    }

    #[test]
    fn a_procedure_found_only_in_the_ledger_is_not_requested_again_and_listed_once() {
        let mut status = new_status();
        let kernel = Process::Mop("kernel".into());
        let moved = ArchivedRequest {
            id: 7,
            process: kernel.clone(),
            source: "procedure".into(),
            state: RequestStateName::Done,
        };
        let ledger = Ledger {
            moves: 1,
            requests: vec![moved.clone()],
        };
        status.procedure_ledger = 1;
        let (again, created) = add_request(&mut status, &kernel, "procedure", T, &ledger);
        assert!(!created);
        assert_eq!((again.id, again.state), (7, RequestStateName::Done));
        let (_, created) = add_request(&mut status, &kernel, "procedure", T, &Ledger::default());
        assert!(created, "without the ledger the node would run it again");
        // A move whose RotaNode write was lost: the same request in both places.
        let mut both = new_status();
        both.procedure_requests.push(moved);
        assert_eq!(every_request(&both, &ledger).count(), 1);
    }
}

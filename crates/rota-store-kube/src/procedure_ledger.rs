//! A node's procedure ledger, pure: where the closed procedure requests go once the RotaNode
//! holds more than a few, and how readers find a procedure's request again.
//!
//! A procedure runs at most once per node, ever, so its closed request must be remembered for
//! as long as the node is: not pruned when the Procedure is deleted (a GitOps re-sync that
//! deletes and re-creates it would run a non-idempotent procedure again), and not read from
//! the Procedure's status (written in the background, and lost with the object). In the
//! RotaNode, rewritten at every write and sent to every watcher, each one would cost about 85
//! bytes for good. So past [`INLINE_PROCEDURES`], a write of the RotaNode first moves them all
//! to the node's ledger, the RotaWindow `<rotanode>-procedures` (outside the history's ring),
//! and then, in the same compare-and-swap, removes them and counts the move in
//! `status.procedureLedger`.
//!
//! The ledger is a union: a move adds entries by id and never removes one, so a writer that
//! dies between the two writes, or loses its compare-and-swap, leaves entries that are also
//! still in the RotaNode, and the next move adds them again to no effect. A request is closed
//! for good before it moves, so the two copies agree; where they might not (a RotaNode read
//! before the move), the RotaNode's wins. The count in the RotaNode tells a reader whether it
//! needs the ledger at all (never while 0, so a node that never had more than a few
//! procedures never reads it), and how current the ledger it knows must be: one that counts
//! fewer moves is read again.

use rota_core::Process;

use crate::crd::{ArchivedRequest, RotaNodeStatus};

/// Archived procedure requests a RotaNode keeps; one more moves them all to the ledger.
pub const INLINE_PROCEDURES: usize = 4;

/// A node's ledger as a reader knows it: its requests after `moves` moves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub moves: u64,
    pub requests: Vec<ArchivedRequest>,
}

/// Whether a write of `status` moves its archived procedure requests to the ledger first.
pub fn due(status: &RotaNodeStatus) -> bool {
    status.procedure_requests.len() > INLINE_PROCEDURES
}

/// The ledger after `status`'s archived requests moved in: each id once, one more move. The
/// ledger's own copy of an id is kept: both are the same closed request.
pub fn with_moved(ledger: &Ledger, status: &RotaNodeStatus) -> Ledger {
    let mut requests = ledger.requests.clone();
    for archived in &status.procedure_requests {
        if !requests.iter().any(|r| r.id == archived.id) {
            requests.push(archived.clone());
        }
    }
    requests.sort_by_key(|r| r.id);
    Ledger {
        moves: ledger.moves.max(status.procedure_ledger) + 1,
        requests,
    }
}

/// The move is written to the ledger (now at `moves`): the RotaNode lets the requests go and
/// counts it.
pub fn commit(status: &mut RotaNodeStatus, moves: u64) {
    status.procedure_requests.clear();
    status.procedure_ledger = status.procedure_ledger.max(moves);
}

/// Whether looking for `process`'s request in `status` needs a more current ledger than
/// `known`: a procedure the RotaNode has no request for, on a node whose requests moved to
/// the ledger more often than `known` counts.
pub fn stale(status: &RotaNodeStatus, process: &Process, known: &Ledger) -> bool {
    matches!(process, Process::Mop(_))
        && status.procedure_ledger > known.moves
        && !status.requests.iter().any(|r| &r.process == process)
        && !status
            .procedure_requests
            .iter()
            .any(|r| &r.process == process)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RequestStateName;

    fn archived(id: i64, name: &str) -> ArchivedRequest {
        ArchivedRequest {
            id,
            process: Process::Mop(name.into()),
            source: "procedure".into(),
            state: RequestStateName::Done,
        }
    }

    fn status_with(names: &[&str]) -> RotaNodeStatus {
        RotaNodeStatus {
            procedure_requests: names
                .iter()
                .zip(1..)
                .map(|(name, id)| archived(id, name))
                .collect(),
            ..RotaNodeStatus::default()
        }
    }

    #[test]
    fn requests_move_once_there_are_more_than_the_inline_few() {
        assert!(!due(&status_with(&["a", "b", "c", "d"])));
        assert!(due(&status_with(&["a", "b", "c", "d", "e"])));
    }

    #[test]
    fn a_move_adds_each_request_once_and_counts_itself() {
        let mut status = status_with(&["a", "b", "c", "d", "e"]);
        let first = with_moved(&Ledger::default(), &status);
        assert_eq!(first.moves, 1);
        assert_eq!(first.requests.len(), 5);
        // The RotaNode's write was lost: the next move adds nothing twice.
        let again = with_moved(&first, &status);
        assert_eq!(again.moves, 2);
        assert_eq!(again.requests, first.requests);
        commit(&mut status, again.moves);
        assert!(status.procedure_requests.is_empty());
        assert_eq!(status.procedure_ledger, 2);
        // A ledger read before a move of another writer counts on from the RotaNode's count.
        status.procedure_requests.push(archived(9, "f"));
        status.procedure_ledger = 7;
        assert_eq!(with_moved(&first, &status).moves, 8);
    }

    #[test]
    fn only_a_procedure_the_rota_node_no_longer_holds_needs_the_ledger() {
        let mut status = status_with(&["a"]);
        status.procedure_ledger = 2;
        let known = Ledger {
            moves: 1,
            requests: Vec::new(),
        };
        let gone = Process::Mop("gone".into());
        assert!(
            stale(&status, &gone, &known),
            "moved since the ledger was read"
        );
        assert!(
            !stale(&status, &Process::Mop("a".into()), &known),
            "still inline"
        );
        assert!(
            !stale(&status, &Process::Reboot, &known),
            "reboots are not kept"
        );
        let current = Ledger {
            moves: 2,
            requests: Vec::new(),
        };
        assert!(!stale(&status, &gone, &current));
        status.procedure_ledger = 0;
        assert!(!stale(&status, &gone, &Ledger::default()), "never moved");
    }
}

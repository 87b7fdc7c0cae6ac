//! FleetLock, the reboot lock protocol of Fedora CoreOS's update agent (Zincati): what a
//! client's `pre-reboot` and `steady-state` do to its node, decided from the node's record
//! (docs/design.md §11). `rota fleetlock` carries the answer out.
//!
//! The lock is the node's window: a `pre-reboot` queues the node, and is granted only once the
//! node holds a slot and has been drained, since the host reboots as soon as it is answered
//! 200. A `steady-state` gives the lock back: before the reboot it ends the window, after it
//! it is the host's word that it is back, which the platform's boot id confirms where it has
//! one.

use crate::lifecycle::NodeState;
use crate::names::Process;
use crate::record::NodeRecord;
use crate::{MaintenanceHours, Millis};

/// Why a `pre-reboot` is refused for now. The client asks again later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Queued: other nodes hold the slots, or are ahead in the queue.
    WaitingForSlot,
    /// The node holds a slot and is being drained.
    Draining,
    /// Outside the maintenance hours.
    OutsideHours,
    /// A blocker holds the node back (the reason is in its record).
    Blocked,
    /// The fleet is paused.
    Paused,
    /// The node's last FleetLock window failed and its backoff has not run out.
    BackingOff,
    /// The node rebooted and is being verified.
    Verifying,
    /// The node's window failed: it keeps its slot and cordon until an operator acts.
    Failed,
    /// The node has a window, or requests, of other work than FleetLock's.
    OtherWork,
}

impl Refusal {
    pub const ALL: [Refusal; 9] = [
        Refusal::WaitingForSlot,
        Refusal::Draining,
        Refusal::OutsideHours,
        Refusal::Blocked,
        Refusal::Paused,
        Refusal::BackingOff,
        Refusal::Verifying,
        Refusal::Failed,
        Refusal::OtherWork,
    ];

    /// The protocol's `kind` of the refusal: few distinct values, since Zincati uses it as a
    /// metric label.
    pub fn kind(self) -> &'static str {
        match self {
            Refusal::WaitingForSlot => "waiting_for_slot",
            Refusal::Draining => "draining",
            Refusal::OutsideHours => "outside_hours",
            Refusal::Blocked => "blocked",
            Refusal::Paused => "paused",
            Refusal::BackingOff => "backing_off",
            Refusal::Verifying => "verifying",
            Refusal::Failed => "failed",
            Refusal::OtherWork => "other_work",
        }
    }
}

/// What the node's record says about a FleetLock request, besides the record itself.
#[derive(Clone, Copy, Debug)]
pub struct Look<'a> {
    pub record: &'a NodeRecord,
    /// The node has an open `fleetlock` request.
    pub requested: bool,
    /// The node has open requests of other processes.
    pub other_requests: bool,
    pub paused: bool,
    pub hours: Option<&'a MaintenanceHours>,
    pub now: Millis,
    /// The node's boot id as its platform reports it now (a Kubernetes Node's); `None` where
    /// only the client's `steady-state` tells that it rebooted.
    pub boot_id: Option<&'a str>,
}

impl Look<'_> {
    fn within_hours(&self) -> bool {
        self.hours
            .is_none_or(|hours| hours.contains_millis(self.now))
    }

    /// The node is busy with something else than a FleetLock window.
    fn other_work(&self) -> bool {
        let window = !matches!(self.record.state, NodeState::Idle | NodeState::Queued);
        self.other_requests || (window && self.record.process.as_ref() != Some(&Process::FleetLock))
    }

    /// The host has not rebooted since its reboot was recorded, as far as anyone can tell.
    fn same_boot(&self) -> bool {
        self.boot_id
            .is_none_or(|now| self.record.boot_id.as_deref() == Some(now))
    }
}

/// What a `pre-reboot` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// Record a `fleetlock` request: the node queues (refused as waiting for now).
    Queue,
    /// Queued and free to go: ask the store for a slot.
    TakeSlot,
    /// Drained and holding its slot: record the reboot's start, fenced, and grant.
    StartReboot,
    /// Already granted on this boot: grant again (the lock is recursive).
    Granted,
    /// Drained, but the maintenance hours ended: give the slot back, nothing failed.
    Postpone,
    Refused(Refusal),
}

/// What a `pre-reboot` does to the node `look` describes.
pub fn pre_reboot(look: &Look) -> Lock {
    if look.other_work() {
        return Lock::Refused(Refusal::OtherWork);
    }
    let record = look.record;
    match record.state {
        NodeState::Idle => Lock::Queue,
        NodeState::Queued if !look.requested => Lock::Queue,
        NodeState::Queued => {
            if look.paused {
                Lock::Refused(Refusal::Paused)
            } else if !look.within_hours() {
                Lock::Refused(Refusal::OutsideHours)
            } else if record.queued_at.is_some_and(|at| at > look.now) {
                Lock::Refused(Refusal::BackingOff)
            } else if record.blocked.is_some() {
                Lock::Refused(Refusal::Blocked)
            } else {
                Lock::TakeSlot
            }
        }
        NodeState::Draining => Lock::Refused(Refusal::Draining),
        NodeState::Maintaining if look.paused => Lock::Refused(Refusal::Paused),
        NodeState::Maintaining if !look.within_hours() => Lock::Postpone,
        NodeState::Maintaining => Lock::StartReboot,
        NodeState::Rebooting if look.same_boot() => Lock::Granted,
        NodeState::Rebooting | NodeState::Verifying => Lock::Refused(Refusal::Verifying),
        NodeState::Failed => Lock::Refused(Refusal::Failed),
    }
}

/// What a `steady-state` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unlock {
    /// The client holds nothing: nothing to give back.
    Nothing,
    /// Queued: the client no longer waits; its request is withdrawn.
    Withdraw,
    /// The node holds its slot but the client never rebooted: the window ends, the node is
    /// uncordoned, nothing failed.
    EndWindow,
    /// The client is back from its reboot: the verification starts.
    BootChanged,
    /// The client says it is back, but the node's boot id has not changed yet: refused, so
    /// that it asks again; the reboot's deadline fails the window if the boot id never does.
    NotRebooted,
}

/// What a `steady-state` does to the node `look` describes.
pub fn steady_state(look: &Look) -> Unlock {
    let record = look.record;
    let ours = record.process.as_ref() == Some(&Process::FleetLock);
    match record.state {
        NodeState::Queued if look.requested && !look.other_requests => Unlock::Withdraw,
        NodeState::Draining | NodeState::Maintaining if ours => Unlock::EndWindow,
        NodeState::Rebooting if ours && look.same_boot() && look.boot_id.is_some() => {
            Unlock::NotRebooted
        }
        NodeState::Rebooting if ours => Unlock::BootChanged,
        _ => Unlock::Nothing,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use crate::names::NodeName;
    use crate::record::Blocked;

    const NOW: Millis = 1_000_000;

    fn record(state: NodeState, process: Option<Process>) -> NodeRecord {
        let mut record = NodeRecord::new(NodeName::new("fcos-1").unwrap(), state, 0);
        record.process = process;
        record.boot_id = Some("boot-a".into());
        record.queued_at = Some(0);
        record
    }

    fn look(record: &NodeRecord) -> Look<'_> {
        Look {
            record,
            requested: true,
            other_requests: false,
            paused: false,
            hours: None,
            now: NOW,
            boot_id: None,
        }
    }

    use NodeState::*;
    const FL: Option<Process> = Some(Process::FleetLock);

    #[test]
    fn a_pre_reboot_is_granted_only_once_the_node_is_drained_and_holds_its_slot() {
        let cases = [
            (Idle, None, Lock::Queue),
            (Queued, None, Lock::TakeSlot),
            (Draining, FL, Lock::Refused(Refusal::Draining)),
            (Maintaining, FL, Lock::StartReboot),
            (Rebooting, FL, Lock::Granted),
            (Verifying, FL, Lock::Refused(Refusal::Verifying)),
            (Failed, FL, Lock::Refused(Refusal::Failed)),
        ];
        for (state, process, expected) in cases {
            let record = record(state, process);
            assert_eq!(pre_reboot(&look(&record)), expected, "{state}");
        }
    }

    #[test]
    fn a_queued_node_is_told_what_holds_it_back_first_the_pause() {
        let mut queued = record(Queued, None);
        let base = look(&queued);
        assert_eq!(
            pre_reboot(&Look {
                requested: false,
                ..base
            }),
            Lock::Queue
        );
        assert_eq!(
            pre_reboot(&Look {
                paused: true,
                ..base
            }),
            Lock::Refused(Refusal::Paused)
        );
        let closed = MaintenanceHours::parse(["Sat 02:00-03:00 UTC"]).unwrap();
        let outside = Look {
            hours: Some(&closed),
            now: 0,
            ..base
        };
        assert_eq!(pre_reboot(&outside), Lock::Refused(Refusal::OutsideHours));
        queued.queued_at = Some(NOW + 1);
        assert_eq!(
            pre_reboot(&look(&queued)),
            Lock::Refused(Refusal::BackingOff)
        );
        queued.queued_at = Some(NOW);
        queued.blocked = Some(Blocked {
            reason: "pods".into(),
            since: 0,
        });
        assert_eq!(pre_reboot(&look(&queued)), Lock::Refused(Refusal::Blocked));
    }

    #[test]
    fn a_drained_node_does_not_reboot_while_the_fleet_is_paused_or_outside_its_hours() {
        let drained = record(Maintaining, FL);
        let paused = Look {
            paused: true,
            ..look(&drained)
        };
        assert_eq!(pre_reboot(&paused), Lock::Refused(Refusal::Paused));
        let closed = MaintenanceHours::parse(["Sat 02:00-03:00 UTC"]).unwrap();
        let outside = Look {
            hours: Some(&closed),
            now: 0,
            ..look(&drained)
        };
        assert_eq!(pre_reboot(&outside), Lock::Postpone);
    }

    #[test]
    fn a_node_busy_with_other_work_is_never_granted() {
        for state in [Draining, Maintaining, Rebooting, Verifying, Failed] {
            let record = record(state, Some(Process::Reboot));
            assert_eq!(
                pre_reboot(&look(&record)),
                Lock::Refused(Refusal::OtherWork),
                "{state}"
            );
            assert_eq!(steady_state(&look(&record)), Unlock::Nothing, "{state}");
        }
        let idle = record(Idle, None);
        let with_other = Look {
            other_requests: true,
            ..look(&idle)
        };
        assert_eq!(pre_reboot(&with_other), Lock::Refused(Refusal::OtherWork));
    }

    #[test]
    fn a_host_that_rebooted_is_granted_no_more() {
        let rebooting = record(Rebooting, FL);
        let same = Look {
            boot_id: Some("boot-a"),
            ..look(&rebooting)
        };
        assert_eq!(pre_reboot(&same), Lock::Granted);
        let new = Look {
            boot_id: Some("boot-b"),
            ..look(&rebooting)
        };
        assert_eq!(pre_reboot(&new), Lock::Refused(Refusal::Verifying));
    }

    #[test]
    fn a_steady_state_gives_back_what_the_client_holds_and_nothing_else() {
        let cases = [
            (Idle, None, None, Unlock::Nothing),
            (Queued, None, None, Unlock::Withdraw),
            (Draining, FL, None, Unlock::EndWindow),
            (Maintaining, FL, None, Unlock::EndWindow),
            (Rebooting, FL, None, Unlock::BootChanged),
            (Rebooting, FL, Some("boot-b"), Unlock::BootChanged),
            (Rebooting, FL, Some("boot-a"), Unlock::NotRebooted),
            (Verifying, FL, None, Unlock::Nothing),
            (Failed, FL, None, Unlock::Nothing),
        ];
        for (state, process, boot_id, expected) in cases {
            let record = record(state, process);
            let look = Look {
                boot_id,
                ..look(&record)
            };
            assert_eq!(steady_state(&look), expected, "{state} {boot_id:?}");
        }
        let queued = record(Queued, None);
        let not_asked = Look {
            requested: false,
            ..look(&queued)
        };
        assert_eq!(steady_state(&not_asked), Unlock::Nothing);
    }

    #[test]
    fn the_kinds_are_few_and_distinct() {
        let kinds: std::collections::BTreeSet<&str> =
            Refusal::ALL.iter().map(|r| r.kind()).collect();
        assert_eq!(kinds.len(), Refusal::ALL.len());
    }
}

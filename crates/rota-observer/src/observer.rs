//! What the agent tells whoever watches it (metrics, notifications) without knowing who: the
//! agent crate stays free of HTTP and of any metrics or webhook library, and the watchers free
//! of the agent.

use rota_blockers::Block;
use rota_core::{Event, NodeState, Process};
use rota_store::{NodeRecord, RequestRecord};

/// How one request's work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkOutcome {
    Finished,
    Failed,
    Canceled,
    /// The maintenance hours ended first: the work waits until they start again.
    Postponed,
}

impl WorkOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkOutcome::Finished => "finished",
            WorkOutcome::Failed => "failed",
            WorkOutcome::Canceled => "canceled",
            WorkOutcome::Postponed => "postponed",
        }
    }
}

/// A write the agent sends to the store that changes the node's record or proves its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreWrite {
    /// A transition of the node's record; `fenced` when it proves the slot in the same write.
    Transition {
        from: NodeState,
        to: NodeState,
        fenced: bool,
    },
    /// The proof, right before anything disruptive, that the session still holds the slot.
    Fence,
}

impl std::fmt::Display for StoreWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreWrite::Transition {
                from,
                to,
                fenced: false,
            } => write!(f, "transition {from}->{to}"),
            StoreWrite::Transition {
                from,
                to,
                fenced: true,
            } => write!(f, "fenced_transition {from}->{to}"),
            StoreWrite::Fence => f.write_str("fence"),
        }
    }
}

/// Called by the agent as it works. Every method must return at once: the agent waits for
/// each call, and a slow observer would delay maintenance. Each has an empty default, so an
/// observer implements only what it needs.
pub trait AgentObserver: Send + Sync {
    /// The agent's session opened (`true`), or ended: closed, or superseded (`false`).
    fn session(&self, _current: bool) {}
    /// Whether the agent's last store access succeeded.
    fn store_access(&self, _ok: bool) {}
    /// The store could not serve the agent for now, and why (told after `store_access(false)`).
    fn store_unavailable(&self, _cause: &str) {}
    /// An access to the host's files failed (`Some` with the cause), or one succeeded again
    /// outside `failed` (`None`).
    fn host_error(&self, _cause: Option<&str>) {}
    /// The node's record as read at the start of a pass of the agent's loop, or as written
    /// by a transition.
    fn record(&self, _record: &NodeRecord) {}
    /// The node's open requests, each time the agent reads them.
    fn requests(&self, _open: &[RequestRecord]) {}
    /// A write the agent is about to send (whether or not the store then takes it).
    fn store_write(&self, _write: StoreWrite) {}
    /// A committed lifecycle transition, with the node's record before and after it.
    fn transition(&self, _before: &NodeRecord, _after: &NodeRecord, _event: &Event) {}
    /// The drain is about to start.
    fn drain_started(&self, _record: &NodeRecord) {}
    /// The reboot command is about to start.
    fn reboot_started(&self, _record: &NodeRecord) {}
    /// What holds the node back before it is disrupted (every reason in one text, the first
    /// one's kind), or `None` once nothing does; told at each check.
    fn blocked(&self, _block: Option<&Block>) {}
    /// The work of one request ended (`cause` says why it failed or was canceled).
    fn work_ended(&self, _process: &Process, _outcome: WorkOutcome, _cause: Option<&str>) {}
    /// Whether now is within the maintenance hours (always `true` without configured hours),
    /// each time the agent checks before anything disruptive.
    fn within_hours(&self, _within: bool) {}
    /// The failure budget as counted before taking a slot: nodes that failed since the rollout
    /// began, and the budget.
    fn failure_budget(&self, _failed: u32, _budget: u32) {}
}

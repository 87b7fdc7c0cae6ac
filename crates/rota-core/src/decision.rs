//! What the core decides one lifecycle event makes happen besides changing the state: the
//! node's maintenance window and its requests ([`WindowChange`]), the uncordon that must come
//! first, and whether the decision may let a waiting node take its turn ([`wakes`]).
//! [`Lifecycle::apply`] decides all of it; the agent and the stores carry it out.

use crate::backoff::BackoffPolicy;
use crate::lifecycle::{Lifecycle, NodeState};

/// Unix time in milliseconds: the one time unit the stores speak.
pub type Millis = i64;

/// What a transition does to the node's maintenance window and its requests.
#[derive(Clone, Debug, PartialEq)]
pub enum WindowChange {
    /// The window is unchanged.
    None,
    /// The node entered the queue (or left it): `queued_at` is set (or cleared) as given.
    Queue { queued_at: Option<Millis> },
    /// The slot was taken: pending requests become active and each gets a `started` entry.
    Open,
    /// Requests that arrived while the window is open join it (`started` each).
    Join,
    /// The window closed successfully: active requests are done, each gets `finished`, their
    /// backoffs are cleared, and the slot is released.
    Finish,
    /// The window's work failed: each active request gets `failed` with the cause and a backoff
    /// by `policy`. With `keep_slot` the node keeps its slot and its requests stay active (fail
    /// closed); without, the requests go back to pending and the slot is released.
    Fail {
        cause: String,
        policy: BackoffPolicy,
        keep_slot: bool,
    },
    /// An operator canceled the window: active requests are canceled (`canceled` each, with the
    /// reason) and the slot is released.
    Cancel { reason: String },
    /// The maintenance hours ended before the node could drain, run its next procedure or
    /// reboot: the window ends, active
    /// requests go back to pending (each gets `postponed`, with the reason), the slot is released,
    /// and no backoff is recorded: the work waits for the hours to start again. Requests already
    /// done stay done.
    Postpone { reason: String },
}

impl WindowChange {
    /// Whether the change gives the node's slot back.
    pub fn releases_slot(&self) -> bool {
        matches!(
            self,
            WindowChange::Finish
                | WindowChange::Cancel { .. }
                | WindowChange::Postpone { .. }
                | WindowChange::Fail {
                    keep_slot: false,
                    ..
                }
        )
    }
}

/// Whether a transition from `from` to `to` with `window` may let a waiting node go on: a slot
/// given back, or a waiter leaving the queue. Taking a slot never does (one free slot fewer, one
/// waiter ahead fewer). A store counts one change for such a transition, however many of the two
/// it is.
pub fn wakes(from: NodeState, to: NodeState, window: &WindowChange) -> bool {
    window.releases_slot() || (from == NodeState::Queued && to == NodeState::Idle)
}

/// Everything one lifecycle event makes happen, in the order the caller carries it out: the
/// uncordon (while the node still holds its slot), then one write of the new state with the
/// window change.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The state the event arrived in.
    pub from: NodeState,
    /// The lifecycle after the event.
    pub next: Lifecycle,
    /// Uncordon the node before the write (only ever when rota cordoned it).
    pub uncordon: bool,
    /// What the write does to the window and its requests.
    pub window: WindowChange,
}

impl Decision {
    /// Whether the decision may let a waiting node go on (see [`wakes`]).
    pub fn wakes(&self) -> bool {
        wakes(self.from, self.next.state, &self.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeState as S;

    fn fail(keep_slot: bool) -> WindowChange {
        WindowChange::Fail {
            cause: "x".into(),
            policy: BackoffPolicy::DEFAULT,
            keep_slot,
        }
    }

    #[test]
    fn a_release_or_a_waiter_leaving_wakes_and_nothing_else_does() {
        let releases = [
            WindowChange::Finish,
            WindowChange::Cancel { reason: "r".into() },
            WindowChange::Postpone { reason: "r".into() },
            fail(false),
        ];
        for window in &releases {
            assert!(window.releases_slot(), "{window:?}");
            assert!(wakes(S::Verifying, S::Idle, window), "{window:?}");
        }
        let keeps = [
            WindowChange::None,
            WindowChange::Queue { queued_at: Some(1) },
            WindowChange::Open,
            WindowChange::Join,
            fail(true),
        ];
        for window in &keeps {
            assert!(!window.releases_slot(), "{window:?}");
            assert!(!wakes(S::Queued, S::Draining, window), "{window:?}");
            assert!(!wakes(S::Idle, S::Queued, window), "{window:?}");
        }
        let leaves = WindowChange::Queue { queued_at: None };
        assert!(wakes(S::Queued, S::Idle, &leaves));
    }
}

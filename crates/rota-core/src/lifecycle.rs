//! The node lifecycle of docs/design.md §3 as a pure state machine.
//!
//! [`Lifecycle::apply`] maps a state and an event to a [`Decision`]: the next state, the uncordon
//! to do first, and what the write does to the maintenance window (open it, fail it, give the
//! slot back, back off). Every pair not listed in docs/design.md §3 is an error, never a silent
//! no-op, so a caller that lost track of the state finds out at once.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::backoff::BackoffPolicy;
use crate::decision::{Decision, Millis, WindowChange};

/// Where a node is in its maintenance lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Nothing to do.
    Idle,
    /// A request waits for a slot (and for backoff, the maintenance hours and blockers).
    Queued,
    /// Holds a slot; cordoned, pods are being evicted.
    Draining,
    /// Holds a slot; procedures run.
    Maintaining,
    /// Holds a slot; the reboot command ran, waiting for a new boot id.
    Rebooting,
    /// Holds a slot; checking the node is healthy again.
    Verifying,
    /// Holds its slot and stays cordoned until an operator retries or unlocks (fail closed).
    Failed,
}

/// A state name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid node state {value:?}: expected idle, queued, draining, maintaining, rebooting, verifying or failed"
)]
pub struct NodeStateError {
    /// The rejected value.
    pub value: String,
}

impl NodeState {
    /// Every state, in lifecycle order.
    pub const ALL: [NodeState; 7] = [
        NodeState::Idle,
        NodeState::Queued,
        NodeState::Draining,
        NodeState::Maintaining,
        NodeState::Rebooting,
        NodeState::Verifying,
        NodeState::Failed,
    ];

    /// The lowercase name used in storage and output.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Idle => "idle",
            NodeState::Queued => "queued",
            NodeState::Draining => "draining",
            NodeState::Maintaining => "maintaining",
            NodeState::Rebooting => "rebooting",
            NodeState::Verifying => "verifying",
            NodeState::Failed => "failed",
        }
    }

    /// Whether a node in this state holds one of the cluster-wide slots.
    pub fn holds_slot(self) -> bool {
        matches!(
            self,
            NodeState::Draining
                | NodeState::Maintaining
                | NodeState::Rebooting
                | NodeState::Verifying
                | NodeState::Failed
        )
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeState {
    type Err = NodeStateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| NodeStateError {
                value: s.to_owned(),
            })
    }
}

/// A node's lifecycle state with the cordon bookkeeping needed to undo only what rota did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lifecycle {
    /// The current state.
    pub state: NodeState,
    /// The node was already cordoned (by someone else) when rota acquired its slot.
    pub pre_cordoned: bool,
    /// rota cordoned the node and must uncordon it when the window ends.
    pub cordoned_by_rota: bool,
}

/// Why a window's work failed, and how the failed process backs off.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Recorded in the history of each failed request.
    pub cause: String,
    /// The backoff the failure starts (or lengthens).
    pub policy: BackoffPolicy,
}

impl Failure {
    /// A failure with `cause`, backing off by `policy`.
    pub fn new(cause: impl Into<String>, policy: BackoffPolicy) -> Failure {
        Failure {
            cause: cause.into(),
            policy,
        }
    }

    /// The window change of this failure: with `keep_slot` the node fails closed.
    fn window(&self, keep_slot: bool) -> WindowChange {
        WindowChange::Fail {
            cause: self.cause.clone(),
            policy: self.policy,
            keep_slot,
        }
    }
}

const NO_FAILURE: Failure = Failure {
    cause: String::new(),
    policy: BackoffPolicy::DEFAULT,
};

/// Why a queued node that was granted a slot just before a restart gives it back when its last
/// request is withdrawn.
pub const GRANT_UNUSED: &str = "no request left when the slot was granted";

/// Something that happened to a node, with what the caller knows of it that the core cannot
/// (the time the work may start, why it failed).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A request arrived while the node was idle: it queues, to take a slot from
    /// `eligible_at` on (the end of its work's backoff, or now).
    Requested {
        /// When the node may first take a slot.
        eligible_at: Millis,
    },
    /// Requests that arrived while the node drains or maintains join the open window. Later
    /// (rebooting, verifying, failed) the window's work is done or stopped: a request joined
    /// there would be marked done by the health check without having run.
    Joined,
    /// The last request was withdrawn while queued.
    Canceled {
        /// A slot was granted just before a restart, and the node was never cordoned: the
        /// slot goes back at once.
        granted: bool,
    },
    /// The node acquired a slot; `pre_cordoned` says whether it was already cordoned.
    SlotAcquired {
        /// The node was cordoned before rota touched it.
        pre_cordoned: bool,
    },
    /// Every pod was evicted.
    Drained,
    /// The drain failed or timed out.
    DrainFailed(Failure),
    /// No work of the window needs a drain (procedures with `drain: false`): the node is
    /// neither cordoned nor drained, so nothing is uncordoned at the end either.
    DrainSkipped,
    /// The reboot command was started.
    RebootStarted,
    /// All work finished and no reboot was asked for.
    WorkDone,
    /// A procedure failed.
    WorkFailed(Failure),
    /// The node came back with a new boot id.
    BootChanged,
    /// The node kept its boot id past the reboot deadline.
    RebootTimedOut(Failure),
    /// The node passed its health checks.
    Healthy,
    /// The node failed its health checks.
    Unhealthy(Failure),
    /// An operator retries a failed node.
    Retry,
    /// An operator releases a node's slot, abandoning its window.
    Unlock {
        /// Recorded in the history of each canceled request.
        reason: String,
    },
    /// The maintenance hours ended before the node could drain, run its next procedure or
    /// reboot: the node gives its slot back and waits for the hours to start
    /// again, with nothing failed and no backoff.
    HoursEnded {
        /// Recorded in the history of each postponed request.
        reason: String,
    },
}

impl Event {
    /// The snake_case name used in errors, logs and history causes.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Requested { .. } => "requested",
            Event::Joined => "joined",
            Event::Canceled { .. } => "canceled",
            Event::SlotAcquired { .. } => "slot_acquired",
            Event::Drained => "drained",
            Event::DrainFailed(_) => "drain_failed",
            Event::DrainSkipped => "drain_skipped",
            Event::RebootStarted => "reboot_started",
            Event::WorkDone => "work_done",
            Event::WorkFailed(_) => "work_failed",
            Event::BootChanged => "boot_changed",
            Event::RebootTimedOut(_) => "reboot_timed_out",
            Event::Healthy => "healthy",
            Event::Unhealthy(_) => "unhealthy",
            Event::Retry => "retry",
            Event::Unlock { .. } => "unlock",
            Event::HoursEnded { .. } => "hours_ended",
        }
    }

    /// One event of each kind (`SlotAcquired` with `pre_cordoned: false`, `Canceled` with
    /// `granted: false`, empty causes and reasons).
    pub const KINDS: [Event; 17] = [
        Event::Requested { eligible_at: 0 },
        Event::Joined,
        Event::Canceled { granted: false },
        Event::SlotAcquired {
            pre_cordoned: false,
        },
        Event::Drained,
        Event::DrainFailed(NO_FAILURE),
        Event::DrainSkipped,
        Event::RebootStarted,
        Event::WorkDone,
        Event::WorkFailed(NO_FAILURE),
        Event::BootChanged,
        Event::RebootTimedOut(NO_FAILURE),
        Event::Healthy,
        Event::Unhealthy(NO_FAILURE),
        Event::Retry,
        Event::Unlock {
            reason: String::new(),
        },
        Event::HoursEnded {
            reason: String::new(),
        },
    ];
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An event that is not allowed in the current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionError {
    /// The state the event arrived in.
    pub from: NodeState,
    /// The event's name (see [`Event::name`]).
    pub event: String,
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = Lifecycle {
            state: self.from,
            pre_cordoned: false,
            cordoned_by_rota: false,
        };
        let allowed: Vec<&str> = Event::KINDS
            .iter()
            .filter(|event| from.apply(event).is_ok())
            .map(Event::name)
            .collect();
        write!(
            f,
            "invalid transition: event {} in state {} (allowed in {}: {})",
            self.event,
            self.from,
            self.from,
            allowed.join(", ")
        )
    }
}

impl std::error::Error for TransitionError {}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::idle()
    }
}

impl Lifecycle {
    /// A node with nothing to do.
    pub fn idle() -> Lifecycle {
        Lifecycle {
            state: NodeState::Idle,
            pre_cordoned: false,
            cordoned_by_rota: false,
        }
    }

    /// Whether the node holds one of the cluster-wide slots.
    pub fn holds_slot(&self) -> bool {
        self.state.holds_slot()
    }

    /// This lifecycle in `state`, keeping the cordon bookkeeping.
    fn to(self, state: NodeState) -> Lifecycle {
        Lifecycle { state, ..self }
    }

    /// The end of a window: back to `state` (idle or queued) with the window changed by
    /// `window` (which gives the slot back), the cordon undone first if rota made it.
    fn release(self, state: NodeState, window: WindowChange) -> Decision {
        Decision {
            from: self.state,
            next: Lifecycle {
                state,
                pre_cordoned: false,
                cordoned_by_rota: false,
            },
            uncordon: self.cordoned_by_rota,
            window,
        }
    }

    /// A decision to enter `next` with `window` and nothing to uncordon.
    fn enter(self, next: Lifecycle, window: WindowChange) -> Decision {
        Decision {
            from: self.state,
            next,
            uncordon: false,
            window,
        }
    }

    /// Everything `event` makes happen (the next lifecycle, the uncordon, the window change),
    /// or an error if it is not allowed in the current state.
    pub fn apply(&self, event: &Event) -> Result<Decision, TransitionError> {
        use NodeState as S;
        use WindowChange as W;
        let this = *self;
        let decision = match (self.state, event) {
            (S::Idle, Event::Requested { eligible_at }) => this.enter(
                Lifecycle::idle().to(S::Queued),
                W::Queue {
                    queued_at: Some(*eligible_at),
                },
            ),
            (S::Draining | S::Maintaining, Event::Joined) => this.enter(this, W::Join),
            (S::Queued, Event::Canceled { granted: true }) => this.release(
                S::Idle,
                W::Cancel {
                    reason: GRANT_UNUSED.to_owned(),
                },
            ),
            (S::Queued, Event::Canceled { granted: false }) => {
                this.enter(Lifecycle::idle(), W::Queue { queued_at: None })
            }
            (S::Queued, Event::SlotAcquired { pre_cordoned }) => {
                let next = Lifecycle {
                    state: S::Draining,
                    pre_cordoned: *pre_cordoned,
                    cordoned_by_rota: !pre_cordoned,
                };
                this.enter(next, W::Open)
            }
            (S::Draining, Event::Drained) => this.enter(this.to(S::Maintaining), W::None),
            (S::Draining, Event::DrainSkipped) => {
                let next = Lifecycle {
                    cordoned_by_rota: false,
                    ..this.to(S::Maintaining)
                };
                this.enter(next, W::None)
            }
            (S::Draining, Event::DrainFailed(failure)) => {
                this.release(S::Queued, failure.window(false))
            }
            (S::Draining | S::Maintaining, Event::HoursEnded { reason }) => this.release(
                S::Queued,
                W::Postpone {
                    reason: reason.clone(),
                },
            ),
            (S::Maintaining, Event::RebootStarted) => this.enter(this.to(S::Rebooting), W::None),
            (S::Maintaining, Event::WorkDone) => this.enter(this.to(S::Verifying), W::None),
            (S::Maintaining, Event::WorkFailed(failure))
            | (S::Rebooting, Event::RebootTimedOut(failure))
            | (S::Verifying, Event::Unhealthy(failure)) => {
                this.enter(this.to(S::Failed), failure.window(true))
            }
            (S::Rebooting, Event::BootChanged) => this.enter(this.to(S::Verifying), W::None),
            (S::Verifying, Event::Healthy) => this.release(S::Idle, W::Finish),
            (S::Failed, Event::Retry) => this.enter(this.to(S::Maintaining), W::None),
            (state, Event::Unlock { reason }) if state.holds_slot() => this.release(
                S::Idle,
                W::Cancel {
                    reason: reason.clone(),
                },
            ),
            (from, event) => {
                return Err(TransitionError {
                    from,
                    event: event.name().to_owned(),
                });
            }
        };
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeState as S;
    use WindowChange as W;

    /// The expected outcome of an event: the next state, whether to uncordon first, and the
    /// window change.
    type Expected = Option<(NodeState, bool, WindowChange)>;

    fn failure() -> Failure {
        Failure::new("it broke", BackoffPolicy::DEFAULT)
    }

    fn fail(keep_slot: bool) -> WindowChange {
        W::Fail {
            cause: "it broke".into(),
            policy: BackoffPolicy::DEFAULT,
            keep_slot,
        }
    }

    /// The table of docs/design.md §3, written out independently of `apply`.
    fn expected(state: NodeState, event: &Event, by_rota: bool) -> Expected {
        let held = state.holds_slot();
        match (state, event) {
            (S::Idle, Event::Requested { eligible_at }) => Some((
                S::Queued,
                false,
                W::Queue {
                    queued_at: Some(*eligible_at),
                },
            )),
            (S::Draining | S::Maintaining, Event::Joined) => Some((state, false, W::Join)),
            (S::Queued, Event::Canceled { granted: false }) => {
                Some((S::Idle, false, W::Queue { queued_at: None }))
            }
            (S::Queued, Event::Canceled { granted: true }) => Some((
                S::Idle,
                false,
                W::Cancel {
                    reason: "no request left when the slot was granted".into(),
                },
            )),
            (S::Queued, Event::SlotAcquired { .. }) => Some((S::Draining, false, W::Open)),
            (S::Draining, Event::Drained | Event::DrainSkipped) => {
                Some((S::Maintaining, false, W::None))
            }
            (S::Draining, Event::DrainFailed(_)) => Some((S::Queued, by_rota, fail(false))),
            (S::Draining | S::Maintaining, Event::HoursEnded { reason }) => Some((
                S::Queued,
                by_rota,
                W::Postpone {
                    reason: reason.clone(),
                },
            )),
            (S::Maintaining, Event::RebootStarted) => Some((S::Rebooting, false, W::None)),
            (S::Maintaining, Event::WorkDone) => Some((S::Verifying, false, W::None)),
            (S::Maintaining, Event::WorkFailed(_))
            | (S::Rebooting, Event::RebootTimedOut(_))
            | (S::Verifying, Event::Unhealthy(_)) => Some((S::Failed, false, fail(true))),
            (S::Rebooting, Event::BootChanged) => Some((S::Verifying, false, W::None)),
            (S::Verifying, Event::Healthy) => Some((S::Idle, by_rota, W::Finish)),
            (S::Failed, Event::Retry) => Some((S::Maintaining, false, W::None)),
            (_, Event::Unlock { reason }) if held => Some((
                S::Idle,
                by_rota,
                W::Cancel {
                    reason: reason.clone(),
                },
            )),
            _ => None,
        }
    }

    /// Every kind of event, with the payloads the table checks, and both values of each flag.
    fn all_events() -> Vec<Event> {
        let mut events: Vec<Event> = Event::KINDS
            .iter()
            .map(|event| match event {
                Event::Requested { .. } => Event::Requested { eligible_at: 42 },
                Event::DrainFailed(_) => Event::DrainFailed(failure()),
                Event::WorkFailed(_) => Event::WorkFailed(failure()),
                Event::RebootTimedOut(_) => Event::RebootTimedOut(failure()),
                Event::Unhealthy(_) => Event::Unhealthy(failure()),
                Event::Unlock { .. } => Event::Unlock {
                    reason: "operator".into(),
                },
                Event::HoursEnded { .. } => Event::HoursEnded {
                    reason: "closed".into(),
                },
                other => other.clone(),
            })
            .collect();
        events.push(Event::SlotAcquired { pre_cordoned: true });
        events.push(Event::Canceled { granted: true });
        events
    }

    /// Every cordon bookkeeping a node in `state` can have.
    fn flag_combinations(state: NodeState) -> Vec<(bool, bool)> {
        if state.holds_slot() {
            vec![(false, true), (true, false)]
        } else {
            vec![(false, false)]
        }
    }

    #[test]
    fn every_state_event_pair_matches_the_table() {
        let mut checked = 0;
        for state in NodeState::ALL {
            for (pre_cordoned, cordoned_by_rota) in flag_combinations(state) {
                let before = Lifecycle {
                    state,
                    pre_cordoned,
                    cordoned_by_rota,
                };
                for event in all_events() {
                    checked += 1;
                    let got = before.apply(&event);
                    match expected(state, &event, cordoned_by_rota) {
                        None => {
                            let err = got.expect_err("pair must be rejected");
                            assert_eq!(err.from, state);
                            assert_eq!(err.event, event.name());
                        }
                        Some((next_state, uncordon, window)) => {
                            let decision = match got {
                                Ok(decision) => decision,
                                Err(err) => panic!("{state} {event}: {err}"),
                            };
                            let after = decision.next;
                            assert_eq!(decision.from, state, "{state} {event}");
                            assert_eq!(after.state, next_state, "{state} {event}");
                            assert_eq!(decision.uncordon, uncordon, "{state} {event}");
                            assert_eq!(decision.window, window, "{state} {event}");
                            if matches!(next_state, S::Idle | S::Queued) {
                                assert!(!after.pre_cordoned && !after.cordoned_by_rota);
                            } else if let Event::SlotAcquired { pre_cordoned } = event {
                                assert_eq!(after.pre_cordoned, pre_cordoned);
                                assert_eq!(after.cordoned_by_rota, !pre_cordoned);
                            } else if event == Event::DrainSkipped {
                                // Nothing was cordoned, so nothing may be uncordoned later.
                                assert!(!after.cordoned_by_rota, "{state} {event}");
                                assert_eq!(after.pre_cordoned, pre_cordoned);
                            } else {
                                assert_eq!(
                                    (after.pre_cordoned, after.cordoned_by_rota),
                                    (pre_cordoned, cordoned_by_rota),
                                    "{state} {event} keeps the cordon"
                                );
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, (1 + 1 + 5 * 2) * 19);
    }

    #[test]
    fn only_a_release_or_a_waiter_leaving_wakes_waiters() {
        for state in NodeState::ALL {
            for (pre_cordoned, cordoned_by_rota) in flag_combinations(state) {
                let before = Lifecycle {
                    state,
                    pre_cordoned,
                    cordoned_by_rota,
                };
                for event in all_events() {
                    let Ok(decision) = before.apply(&event) else {
                        continue;
                    };
                    let gives_back = state.holds_slot() && !decision.next.holds_slot();
                    let leaves_queue = state == S::Queued && decision.next.state == S::Idle;
                    assert_eq!(
                        decision.wakes(),
                        gives_back || leaves_queue,
                        "{state} {event}"
                    );
                }
            }
        }
    }

    #[test]
    fn transition_error_names_event_state_and_allowed() {
        let err = Lifecycle::idle()
            .apply(&Event::Drained)
            .expect_err("drained is invalid in idle");
        assert_eq!(
            err.to_string(),
            "invalid transition: event drained in state idle (allowed in idle: requested)"
        );
    }

    /// Runs `events` from idle, returning the last lifecycle, the uncordons and the window
    /// changes in order.
    fn run(events: &[Event]) -> (Lifecycle, Vec<bool>, Vec<WindowChange>) {
        let mut node = Lifecycle::idle();
        let (mut uncordons, mut windows) = (Vec::new(), Vec::new());
        for event in events {
            let decision = match node.apply(event) {
                Ok(decision) => decision,
                Err(err) => panic!("{err}"),
            };
            node = decision.next;
            uncordons.push(decision.uncordon);
            windows.push(decision.window);
        }
        (node, uncordons, windows)
    }

    #[test]
    fn a_full_window_with_reboot() {
        let (node, uncordons, windows) = run(&[
            Event::Requested { eligible_at: 7 },
            Event::SlotAcquired {
                pre_cordoned: false,
            },
            Event::Drained,
            Event::RebootStarted,
            Event::BootChanged,
            Event::Healthy,
        ]);
        assert_eq!(node, Lifecycle::idle());
        assert_eq!(uncordons, [false, false, false, false, false, true]);
        assert_eq!(
            windows,
            [
                W::Queue { queued_at: Some(7) },
                W::Open,
                W::None,
                W::None,
                W::None,
                W::Finish
            ]
        );
    }

    #[test]
    fn the_hours_ending_after_the_drain_postpone_without_failure() {
        let ended = Event::HoursEnded {
            reason: "closed".into(),
        };
        let (node, uncordons, windows) = run(&[
            Event::Requested { eligible_at: 0 },
            Event::SlotAcquired {
                pre_cordoned: false,
            },
            Event::Drained,
            ended.clone(),
        ]);
        assert_eq!(node.state, S::Queued);
        assert!(!node.cordoned_by_rota && !node.pre_cordoned);
        assert_eq!(uncordons.last(), Some(&true));
        assert_eq!(
            windows.last(),
            Some(&W::Postpone {
                reason: "closed".into()
            }),
            "no failure and no backoff"
        );
        // A node cordoned by someone else stays cordoned.
        let pre = Lifecycle {
            state: S::Draining,
            pre_cordoned: true,
            cordoned_by_rota: false,
        };
        let decision = match pre.apply(&ended) {
            Ok(decision) => decision,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(decision.next.state, S::Queued);
        assert!(!decision.uncordon);
        assert!(decision.window.releases_slot());
        // Once the reboot started, the maintenance hours no longer matter.
        for state in [S::Rebooting, S::Verifying, S::Failed, S::Queued, S::Idle] {
            let node = Lifecycle { state, ..pre };
            assert!(node.apply(&ended).is_err(), "{state}");
        }
    }

    #[test]
    fn state_names_round_trip() -> Result<(), serde_json::Error> {
        for state in NodeState::ALL {
            assert_eq!(state.to_string().parse::<NodeState>(), Ok(state));
            assert_eq!(serde_json::to_string(&state)?, format!("\"{state}\""));
        }
        let err = "Idle".parse::<NodeState>().expect_err("case matters");
        assert!(err.to_string().contains("\"Idle\""));
        Ok(())
    }

    #[test]
    fn slot_holding_states() {
        let holding: Vec<NodeState> = NodeState::ALL
            .into_iter()
            .filter(|s| s.holds_slot())
            .collect();
        assert_eq!(
            holding,
            vec![
                S::Draining,
                S::Maintaining,
                S::Rebooting,
                S::Verifying,
                S::Failed
            ]
        );
    }
}

//! The node lifecycle of docs/design.md §3 as a pure state machine.
//!
//! [`Lifecycle::apply`] maps a state and an event to the next state and the effects the caller
//! must carry out (cordon, release the slot, record history, back off). Every pair not listed
//! in docs/design.md §3 is an error, never a silent no-op, so a caller that lost track of the
//! state finds out at once.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a node is in its maintenance lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Nothing to do.
    Idle,
    /// A request waits for a slot (and for backoff, the window and blockers).
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

/// Something that happened to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A request arrived. Outside `idle` it joins the current or next window.
    Requested,
    /// The last request was withdrawn while queued.
    Canceled,
    /// The node acquired a slot; `pre_cordoned` says whether it was already cordoned.
    SlotAcquired {
        /// The node was cordoned before rota touched it.
        pre_cordoned: bool,
    },
    /// Every pod was evicted.
    Drained,
    /// The drain failed or timed out.
    DrainFailed,
    /// No work of the window needs a drain (procedures with `drain: false`): the node is
    /// neither cordoned nor drained, so nothing is uncordoned at the end either.
    DrainSkipped,
    /// The reboot command was started.
    RebootStarted,
    /// All work finished and no reboot was asked for.
    WorkDone,
    /// A procedure failed.
    WorkFailed,
    /// The node came back with a new boot id.
    BootChanged,
    /// The node kept its boot id past the reboot deadline.
    RebootTimedOut,
    /// The node passed its health checks.
    Healthy,
    /// The node failed its health checks.
    Unhealthy,
    /// An operator retries a failed node.
    Retry,
    /// An operator releases a node's slot, abandoning its window.
    Unlock,
    /// The maintenance window closed before the next disruptive step (the drain, a
    /// procedure, the reboot) could start: the node gives its slot back and waits for the next
    /// window, with nothing failed and no backoff.
    WindowClosed,
}

impl Event {
    /// The snake_case name used in errors, logs and history causes.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Requested => "requested",
            Event::Canceled => "canceled",
            Event::SlotAcquired { .. } => "slot_acquired",
            Event::Drained => "drained",
            Event::DrainFailed => "drain_failed",
            Event::DrainSkipped => "drain_skipped",
            Event::RebootStarted => "reboot_started",
            Event::WorkDone => "work_done",
            Event::WorkFailed => "work_failed",
            Event::BootChanged => "boot_changed",
            Event::RebootTimedOut => "reboot_timed_out",
            Event::Healthy => "healthy",
            Event::Unhealthy => "unhealthy",
            Event::Retry => "retry",
            Event::Unlock => "unlock",
            Event::WindowClosed => "window_closed",
        }
    }

    /// One event of each kind (`SlotAcquired` with `pre_cordoned: false`).
    pub const KINDS: [Event; 16] = [
        Event::Requested,
        Event::Canceled,
        Event::SlotAcquired {
            pre_cordoned: false,
        },
        Event::Drained,
        Event::DrainFailed,
        Event::DrainSkipped,
        Event::RebootStarted,
        Event::WorkDone,
        Event::WorkFailed,
        Event::BootChanged,
        Event::RebootTimedOut,
        Event::Healthy,
        Event::Unhealthy,
        Event::Retry,
        Event::Unlock,
        Event::WindowClosed,
    ];
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Something the caller must do because of a transition, in the order listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Cordon the node.
    Cordon,
    /// Uncordon the node (only ever emitted when rota cordoned it).
    Uncordon,
    /// Release the node's slot.
    ReleaseSlot,
    /// Append `finished` to the history.
    RecordFinished,
    /// Append `failed` (with its cause) to the history.
    RecordFailed,
    /// Append `canceled` to the history.
    RecordCanceled,
    /// Append `postponed` (with the reason) to the history; the window's work waits for the
    /// next maintenance window.
    RecordPostponed,
    /// Store the next backoff for the failed process.
    BackOff,
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

    /// The end of a window: back to `state` (idle or queued) with the slot released and the
    /// cordon undone if rota made it. `record` is the history entry to write.
    fn release(self, state: NodeState, record: Effect, back_off: bool) -> (Lifecycle, Vec<Effect>) {
        let mut effects = Vec::with_capacity(4);
        if self.cordoned_by_rota {
            effects.push(Effect::Uncordon);
        }
        effects.push(Effect::ReleaseSlot);
        effects.push(record);
        if back_off {
            effects.push(Effect::BackOff);
        }
        let next = Lifecycle {
            state,
            pre_cordoned: false,
            cordoned_by_rota: false,
        };
        (next, effects)
    }

    /// The next lifecycle and the effects to carry out, or an error if `event` is not allowed
    /// in the current state.
    pub fn apply(&self, event: &Event) -> Result<(Lifecycle, Vec<Effect>), TransitionError> {
        use NodeState as S;
        let this = *self;
        let fail_closed = || {
            (
                this.to(S::Failed),
                vec![Effect::RecordFailed, Effect::BackOff],
            )
        };
        let outcome = match (self.state, *event) {
            (S::Idle, Event::Requested) => (Lifecycle::idle().to(S::Queued), Vec::new()),
            (_, Event::Requested) => (this, Vec::new()),
            (S::Queued, Event::Canceled) => (Lifecycle::idle(), vec![Effect::RecordCanceled]),
            (S::Queued, Event::SlotAcquired { pre_cordoned }) => {
                let next = Lifecycle {
                    state: S::Draining,
                    pre_cordoned,
                    cordoned_by_rota: !pre_cordoned,
                };
                let effects = if pre_cordoned {
                    Vec::new()
                } else {
                    vec![Effect::Cordon]
                };
                (next, effects)
            }
            (S::Draining, Event::Drained) => (this.to(S::Maintaining), Vec::new()),
            (S::Draining, Event::DrainSkipped) => {
                let next = Lifecycle {
                    cordoned_by_rota: false,
                    ..this.to(S::Maintaining)
                };
                (next, Vec::new())
            }
            (S::Draining, Event::DrainFailed) => {
                this.release(S::Queued, Effect::RecordFailed, true)
            }
            (S::Draining | S::Maintaining, Event::WindowClosed) => {
                this.release(S::Queued, Effect::RecordPostponed, false)
            }
            (S::Maintaining, Event::RebootStarted) => (this.to(S::Rebooting), Vec::new()),
            (S::Maintaining, Event::WorkDone) => (this.to(S::Verifying), Vec::new()),
            (S::Maintaining, Event::WorkFailed) => fail_closed(),
            (S::Rebooting, Event::BootChanged) => (this.to(S::Verifying), Vec::new()),
            (S::Rebooting, Event::RebootTimedOut) => fail_closed(),
            (S::Verifying, Event::Healthy) => this.release(S::Idle, Effect::RecordFinished, false),
            (S::Verifying, Event::Unhealthy) => fail_closed(),
            (S::Failed, Event::Retry) => (this.to(S::Maintaining), Vec::new()),
            (state, Event::Unlock) if state.holds_slot() => {
                this.release(S::Idle, Effect::RecordCanceled, false)
            }
            (from, event) => {
                return Err(TransitionError {
                    from,
                    event: event.name().to_owned(),
                });
            }
        };
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Effect as E;
    use NodeState as S;

    /// The expected outcome of an event: the next state and its effects, given whether rota
    /// cordoned the node.
    type Expected = Option<(NodeState, Vec<Effect>)>;

    fn uncordon_if(by_rota: bool, rest: &[Effect]) -> Vec<Effect> {
        let mut effects = if by_rota { vec![E::Uncordon] } else { vec![] };
        effects.extend_from_slice(rest);
        effects
    }

    /// The table of docs/design.md §3, written out independently of `apply`.
    fn expected(state: NodeState, event: &Event, by_rota: bool) -> Expected {
        let fail = Some((S::Failed, vec![E::RecordFailed, E::BackOff]));
        match (state, event) {
            (S::Idle, Event::Requested) => Some((S::Queued, vec![])),
            (s, Event::Requested) => Some((s, vec![])),
            (S::Queued, Event::Canceled) => Some((S::Idle, vec![E::RecordCanceled])),
            (S::Queued, Event::SlotAcquired { pre_cordoned: true }) => Some((S::Draining, vec![])),
            (
                S::Queued,
                Event::SlotAcquired {
                    pre_cordoned: false,
                },
            ) => Some((S::Draining, vec![E::Cordon])),
            (S::Draining, Event::Drained | Event::DrainSkipped) => Some((S::Maintaining, vec![])),
            (S::Draining, Event::DrainFailed) => Some((
                S::Queued,
                uncordon_if(by_rota, &[E::ReleaseSlot, E::RecordFailed, E::BackOff]),
            )),
            (S::Draining | S::Maintaining, Event::WindowClosed) => Some((
                S::Queued,
                uncordon_if(by_rota, &[E::ReleaseSlot, E::RecordPostponed]),
            )),
            (S::Maintaining, Event::RebootStarted) => Some((S::Rebooting, vec![])),
            (S::Maintaining, Event::WorkDone) => Some((S::Verifying, vec![])),
            (S::Maintaining, Event::WorkFailed) => fail,
            (S::Rebooting, Event::BootChanged) => Some((S::Verifying, vec![])),
            (S::Rebooting, Event::RebootTimedOut) => fail,
            (S::Verifying, Event::Healthy) => Some((
                S::Idle,
                uncordon_if(by_rota, &[E::ReleaseSlot, E::RecordFinished]),
            )),
            (S::Verifying, Event::Unhealthy) => fail,
            (S::Failed, Event::Retry) => Some((S::Maintaining, vec![])),
            (
                S::Draining | S::Maintaining | S::Rebooting | S::Verifying | S::Failed,
                Event::Unlock,
            ) => Some((
                S::Idle,
                uncordon_if(by_rota, &[E::ReleaseSlot, E::RecordCanceled]),
            )),
            _ => None,
        }
    }

    fn all_events() -> Vec<Event> {
        let mut events = Event::KINDS.to_vec();
        events.push(Event::SlotAcquired { pre_cordoned: true });
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
                        Some((next_state, effects)) => {
                            let (after, got_effects) = match got {
                                Ok(ok) => ok,
                                Err(err) => panic!("{state} {event}: {err}"),
                            };
                            assert_eq!(after.state, next_state, "{state} {event}");
                            assert_eq!(got_effects, effects, "{state} {event}");
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
        assert_eq!(checked, (1 + 1 + 5 * 2) * 17);
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

    #[test]
    fn a_full_window_with_reboot() {
        let mut node = Lifecycle::idle();
        let mut all_effects = Vec::new();
        for event in [
            Event::Requested,
            Event::SlotAcquired {
                pre_cordoned: false,
            },
            Event::Drained,
            Event::RebootStarted,
            Event::BootChanged,
            Event::Healthy,
        ] {
            let (next, effects) = match node.apply(&event) {
                Ok(ok) => ok,
                Err(err) => panic!("{err}"),
            };
            node = next;
            all_effects.extend(effects);
        }
        assert_eq!(node, Lifecycle::idle());
        assert_eq!(
            all_effects,
            vec![E::Cordon, E::Uncordon, E::ReleaseSlot, E::RecordFinished]
        );
    }

    #[test]
    fn a_window_closing_after_the_drain_postpones_without_failure() {
        let mut node = Lifecycle::idle();
        let mut all_effects = Vec::new();
        for event in [
            Event::Requested,
            Event::SlotAcquired {
                pre_cordoned: false,
            },
            Event::Drained,
            Event::WindowClosed,
        ] {
            let (next, effects) = match node.apply(&event) {
                Ok(ok) => ok,
                Err(err) => panic!("{err}"),
            };
            node = next;
            all_effects.extend(effects);
        }
        assert_eq!(node.state, S::Queued);
        assert!(!node.cordoned_by_rota && !node.pre_cordoned);
        assert_eq!(
            all_effects,
            vec![E::Cordon, E::Uncordon, E::ReleaseSlot, E::RecordPostponed],
            "no failure and no backoff"
        );
        // A node cordoned by someone else stays cordoned.
        let pre = Lifecycle {
            state: S::Draining,
            pre_cordoned: true,
            cordoned_by_rota: false,
        };
        let (after, effects) = match pre.apply(&Event::WindowClosed) {
            Ok(ok) => ok,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(after.state, S::Queued);
        assert_eq!(effects, vec![E::ReleaseSlot, E::RecordPostponed]);
        // Once the reboot started, the window no longer matters.
        for state in [S::Rebooting, S::Verifying, S::Failed, S::Queued, S::Idle] {
            let node = Lifecycle { state, ..pre };
            assert!(node.apply(&Event::WindowClosed).is_err(), "{state}");
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

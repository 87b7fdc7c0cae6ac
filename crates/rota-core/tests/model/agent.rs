//! The modelled agent: the state handlers of `crates/rota-agent/src/agent/states/` for a node
//! with one reboot request, cut into one action per write it persists (to the store, or a
//! change on the host) or read it acts on, so that a crash can fall between any two.
//!
//! Each state's handler, from the record read at [`Pc::Top`]:
//!
//! | state | actions, in order | mirrors |
//! |---|---|---|
//! | idle | commit `requested` with the sentinel's request | `states/idle.rs` |
//! | queued | read the slot `schedule` grants (the lowest free); compare-and-swap it; commit `slot_acquired` (a slot already held is re-adopted) | `states/queued.rs` |
//! | draining | fence; cordon (the drain's first part: its evictions change nothing the model keeps); commit `drained` | `states/draining.rs` |
//! | maintaining | fence; commit `reboot_started` with the boot id (the agent goes on to `start_reboot` at once; the model reads `rebooting` first, and does the same) | `states/maintaining.rs` |
//! | rebooting | new boot id: fence, commit `boot_changed`. Else without a marker of this boot: fence, then the reboot's actions in the order of [`RebootProtocol`]. Else wait for the deadline, then commit `reboot_timed_out` | `states/rebooting.rs`, `start_reboot` in `states/maintaining.rs` |
//! | verifying | fence; uncordon; commit `healthy` (it gives the slot back) | `states/verifying.rs`, `uncordon` in `commit.rs` |
//! | failed | nothing: an operator's turn | `states/mod.rs` |
//!
//! Every commit is `Lifecycle::apply` of the event on the record's lifecycle, written by the
//! store as the `Transition` of that decision (`commit_as` in `commit.rs`, [`transition`]),
//! which `NodeOverview::apply` carries out. After a fence that fails the agent does nothing
//! more: it pauses and reads again, which the model leaves out, since nothing would change.

use std::fmt;

use rota_core::{BackoffPolicy, Decision, Event, Failure, NodeState, Process, Transition};

use crate::host::Host;
use crate::store::{NOW, Store};

/// The order of the reboot's persisted actions on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebootProtocol {
    /// The marker, synced, then the spawn of the reboot command: the order before the fix.
    MarkerBeforeSpawn,
    /// The spawn, then the marker once the command exited successfully: the fix.
    MarkerAfterCommand,
}

/// A rule of rota's broken on purpose, for the tests that show a property catching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// The slot read free is written without the compare-and-swap.
    BlindSlotWrite,
    /// The reboot command runs before `rebooting` and the boot id are recorded.
    SpawnBeforeRecord,
}

/// Where an agent is within its state's handler: all it holds in memory, lost when it crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Between handlers: the next action reads the record and is the first of its state's
    /// handler (`run_handlers` in states/mod.rs).
    Top,
    /// queued: read this slot free; next, the compare-and-swap that takes it.
    Claim(u8),
    /// draining: cordoned; next, the write of `drained`.
    Cordoned,
    /// rebooting, [`RebootProtocol::MarkerBeforeSpawn`]: the marker is synced; next, the spawn.
    Marked,
    /// The reboot command runs as this agent's child (`Running::reboot`); next, its exit.
    Running,
    /// rebooting, [`RebootProtocol::MarkerAfterCommand`]: the command exited successfully;
    /// next, the marker.
    Exited,
    /// rebooting: the reboot was started; waits for the new boot, or for the deadline.
    Waiting,
    /// verifying: uncordoned; next, the write of `healthy`.
    Uncordoned,
    /// maintaining, [`Flaw::SpawnBeforeRecord`]: the command runs; next, `reboot_started`.
    SpawnedUnrecorded,
}

impl Pc {
    /// Whether a reboot command runs as this agent's child.
    pub fn child_running(self) -> bool {
        matches!(self, Pc::Running | Pc::SpawnedUnrecorded)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Agent {
    pub pc: Pc,
    /// Crashes so far, against the model's budget.
    pub crashes: u8,
}

/// One action of an agent.
#[derive(Clone, Debug, PartialEq)]
pub enum Does {
    /// Applies the event to the record's lifecycle and writes what the core decided.
    Commit(Event),
    /// Reads the slots and finds this one free, granted by `schedule`.
    ReadSlot(u8),
    /// The compare-and-swap on the slot read free.
    TakeSlot(u8),
    Cordon,
    Uncordon,
    /// Writes and syncs the marker naming this boot.
    WriteMarker,
    /// Spawns the reboot command.
    Spawn,
    /// The reboot command exits successfully: the reboot is due.
    CommandExits,
    /// Nothing left to start: waits for the new boot id or the reboot deadline.
    Wait,
}

impl fmt::Display for Does {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Does::Commit(event) => write!(f, "commits {event}"),
            Does::ReadSlot(slot) => write!(f, "reads slot {slot} free"),
            Does::TakeSlot(slot) => write!(f, "compare-and-swaps slot {slot}"),
            Does::Cordon => f.write_str("cordons"),
            Does::Uncordon => f.write_str("uncordons"),
            Does::WriteMarker => f.write_str("writes the reboot marker"),
            Does::Spawn => f.write_str("spawns the reboot command"),
            Does::CommandExits => f.write_str("sees the reboot command exit successfully"),
            Does::Wait => f.write_str("waits for the new boot or the reboot deadline"),
        }
    }
}

/// The reboot deadline passed on the same boot (`reboot_failed`).
pub fn timed_out() -> Event {
    Event::RebootTimedOut(Failure::new(
        "boot id unchanged after the reboot timeout",
        BackoffPolicy::DEFAULT,
    ))
}

/// Where the reboot sentinel's request comes from (its path, as the agent records it).
pub const SENTINEL: &str = "/var/run/reboot-required";

/// The write of `decision`, which the core made on `event`, with what the agent adds to it
/// (`commit_with` and its callers): the sentinel's request recorded with `requested`
/// (`states/idle.rs`), the process and the boot id with `reboot_started` (`states/maintaining.rs`;
/// its times are left out, as the model has no time).
pub fn transition(decision: Decision, event: &Event, host: &Host) -> Transition {
    let mut transition = Transition::of(decision);
    match event {
        Event::Requested { .. } => transition = transition.request(Process::Reboot, SENTINEL),
        Event::RebootStarted => {
            transition.process = Some(Process::Reboot);
            transition.fields.boot_id = Some(Some(host.boot_id()));
        }
        _ => {}
    }
    transition
}

/// What the agent of `node` does next, or `None` while it waits for something another node
/// or the machine does.
///
/// Time is not modelled: the reboot deadline passes only while the agent waits and no reboot
/// is due, as if a started reboot and an agent's restart always took less than
/// `--reboot-timeout`. Otherwise every started reboot could time out, a failure by design.
pub fn next(
    protocol: RebootProtocol,
    flaw: Option<Flaw>,
    store: &Store,
    host: &Host,
    agent: &Agent,
    node: u8,
) -> Option<Does> {
    let record = store.record(node);
    let holds_slot = store.holds_slot(node);
    // Anything disruptive, or a write that it follows at once, comes after the fence.
    let fence = |does: Does| holds_slot.then_some(does);
    match agent.pc {
        Pc::Top => match record.state() {
            NodeState::Idle => (host.sentinel && !record.open_request())
                .then_some(Does::Commit(Event::Requested { eligible_at: NOW })),
            NodeState::Queued if holds_slot => Some(Does::Commit(Event::SlotAcquired {
                pre_cordoned: host.cordoned,
            })),
            NodeState::Queued => store.turn(node).map(Does::ReadSlot),
            NodeState::Draining => fence(Does::Cordon),
            NodeState::Maintaining if flaw == Some(Flaw::SpawnBeforeRecord) => fence(Does::Spawn),
            NodeState::Maintaining => fence(Does::Commit(Event::RebootStarted)),
            NodeState::Rebooting if record.boot_id() != Some(host.boot_id().as_str()) => {
                fence(Does::Commit(Event::BootChanged))
            }
            NodeState::Rebooting if !host.marked() => fence(match protocol {
                RebootProtocol::MarkerBeforeSpawn => Does::WriteMarker,
                RebootProtocol::MarkerAfterCommand => Does::Spawn,
            }),
            NodeState::Rebooting => Some(Does::Wait),
            NodeState::Verifying => {
                let decision = record
                    .lifecycle()
                    .apply(&Event::Healthy)
                    .expect("verifying allows healthy");
                if decision.uncordon {
                    fence(Does::Uncordon)
                } else {
                    Some(Does::Commit(Event::Healthy))
                }
            }
            NodeState::Failed => None,
        },
        Pc::Claim(slot) => Some(Does::TakeSlot(slot)),
        Pc::Cordoned => Some(Does::Commit(Event::Drained)),
        Pc::Marked => Some(Does::Spawn),
        Pc::Running => Some(Does::CommandExits),
        Pc::Exited => Some(Does::WriteMarker),
        Pc::Waiting => (!host.reboot_due).then(|| Does::Commit(timed_out())),
        Pc::Uncordoned => Some(Does::Commit(Event::Healthy)),
        Pc::SpawnedUnrecorded => Some(Does::Commit(Event::RebootStarted)),
    }
}

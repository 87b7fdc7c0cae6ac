//! What a notification is about.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use rota_core::{NodeName, Process};

use crate::NotifyError;

/// The moments of a node's maintenance that are announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The node holds a slot and its drain began.
    DrainStarted,
    /// The node is about to reboot.
    Reboot,
    /// The work ended successfully and the slot was released.
    Finished,
    /// The work failed (the event's cause says why).
    Failed,
    /// The maintenance hours ended before the node could drain, run its next procedure or
    /// reboot: the slot went back and the work waits until they start again (the cause says
    /// which came next).
    Postponed,
}

impl EventKind {
    /// Every kind, in lifecycle order.
    pub const ALL: [EventKind; 5] = [
        EventKind::DrainStarted,
        EventKind::Reboot,
        EventKind::Finished,
        EventKind::Failed,
        EventKind::Postponed,
    ];

    /// The name used in payloads, templates and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::DrainStarted => "drain-started",
            EventKind::Reboot => "reboot",
            EventKind::Finished => "finished",
            EventKind::Failed => "failed",
            EventKind::Postponed => "postponed",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = NotifyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| NotifyError::EventKind {
                value: s.to_owned(),
            })
    }
}

/// One thing that happened to one node's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub node: NodeName,
    pub process: Process,
    /// Why the work failed; usually only set for [`EventKind::Failed`].
    pub cause: Option<String>,
    /// The slot the node holds.
    pub slot: Option<u32>,
    pub at: Timestamp,
}

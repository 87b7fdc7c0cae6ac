//! The objects the protocol keeps on the API server, and the machines it steers.

use std::fmt;

/// What a node's agent writes into its RotaNode's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The node wants a turn.
    Queued,
    /// The agent took a grant up: once its fence passes, it may disrupt the node.
    Window,
    /// Nothing left to do.
    Idle,
}

/// A node's `RotaNode`: `spec.grant` is the scheduler's to write, `status` the agent's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RotaNode {
    /// The slot granted, naming the Lease `rota-slot-<i>`.
    pub grant: Option<u8>,
    pub status: Status,
}

impl fmt::Display for RotaNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.grant {
            Some(slot) => write!(f, "{:?} with grant {slot}", self.status),
            None => write!(f, "{:?}", self.status),
        }
    }
}

/// The Lease `rota-slot-<i>`: its `holderIdentity`, a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub holder: Option<u8>,
}

/// A node's machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Host {
    /// Disrupted: cordoned, drained, rebooting. The Node keeps it across agent restarts.
    pub out: bool,
    /// Its turn's work is done (the reboot happened, the sentinel is gone): a restarted agent
    /// finds it so and does not do it again.
    pub done: bool,
}

//! The crate's error type, for callers that want one type for every failure of this crate.

use crate::fleet::FleetError;
use crate::lifecycle::{NodeStateError, TransitionError};
use crate::names::NameError;
use crate::priority::PriorityError;
use crate::window::WindowError;

/// Any error of this crate; each variant's message names the bad value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An invalid priority.
    #[error(transparent)]
    Priority(#[from] PriorityError),
    /// An invalid node name, process or history event.
    #[error(transparent)]
    Name(#[from] NameError),
    /// An unknown node state name.
    #[error(transparent)]
    NodeState(#[from] NodeStateError),
    /// An event not allowed in the node's state.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// An event the fleet model refused.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// A malformed maintenance window.
    #[error(transparent)]
    Window(#[from] WindowError),
}

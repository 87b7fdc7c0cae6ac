use rota_actions::ActionError;
use rota_core::TransitionError;
use thiserror::Error;

use crate::protocol::{Kind, Rejection};

/// What went wrong while the server moved a host's node along its lifecycle.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] rota_store::Error),
    #[error(transparent)]
    Action(#[from] ActionError),
    #[error(transparent)]
    Transition(#[from] TransitionError),
    #[error("TLS: {path}: {reason}")]
    Tls { path: String, reason: String },
    #[error("cannot read the client ids of {path}: {reason}")]
    Ids { path: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The protocol's answer: an unreachable store is the client's to wait out (503); the rest
    /// is the server's fault.
    pub fn rejection(&self) -> Rejection {
        match self {
            Error::Store(e) if e.is_unavailable() => Rejection::new(
                Kind::StoreUnavailable,
                format!("rota's store cannot be reached ({e}); nothing was granted, ask again"),
            ),
            e => Rejection::new(Kind::Internal, e.to_string()),
        }
    }
}

use rota_core::{NodeName, ProcedureError, RecordError};

use crate::model::Session;

/// Everything that can go wrong in a store. Each variant names the value at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "session {session} of node {node} is no longer current (superseded or expired): write refused"
    )]
    Fenced { node: NodeName, session: i64 },
    #[error(
        "session {session} of node {node} expired (not renewed within its TTL) and nobody took \
         the node over: a new session may carry on"
    )]
    Expired { node: NodeName, session: i64 },
    /// A write the node's record does not allow, as rota-core decided it.
    #[error(transparent)]
    Refused(#[from] RecordError),
    #[error("node {node} is not known to the store")]
    NoSuchNode { node: NodeName },
    #[error(
        "procedure {name} already exists with a different spec: procedures are immutable, submit the change under a new name"
    )]
    ProcedureConflict { name: String },
    #[error(transparent)]
    Procedure(#[from] ProcedureError),
    #[error("invalid store URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("{location} is not a rota database: {reason}")]
    NotRota { location: String, reason: String },
    #[error(
        "{location} has schema version {found}, newer than this rota binary supports ({supported}): upgrade rota; nothing was changed"
    )]
    SchemaTooNew {
        location: String,
        found: i64,
        supported: i64,
    },
    #[error("invalid concurrency {value}: expected an integer 1..=1000")]
    Concurrency { value: u32 },
    #[error("stored value {value:?} in {column} is not valid: {reason}")]
    Corrupt {
        column: &'static str,
        value: String,
        reason: String,
    },
    /// A node's record that does not read (a value edited by hand, or written by a newer rota):
    /// the node, then the field and the value.
    #[error("the record of node {node} does not read: {source}")]
    Record {
        node: String,
        #[source]
        source: Box<Error>,
    },
    /// A failure of a store implemented outside this crate (the Kubernetes store), which
    /// carries its own context (the verb and resource that failed).
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// Such a store could not be reached, or could not serve the call for now (a restart, an
    /// overload, the network): the same call may succeed a moment later.
    #[error(transparent)]
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
    #[error("{context}: {source}")]
    Database {
        context: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Why `session`'s renewal was refused: `Expired` while it is still its node's latest
    /// session (nobody took the node over), else `Fenced`.
    pub fn renewal_refused(session: &Session, still_latest: bool) -> Error {
        let (node, session) = (session.node.clone(), session.id);
        if still_latest {
            Error::Expired { node, session }
        } else {
            Error::Fenced { node, session }
        }
    }

    /// Whether the store could not be reached or ended the connection (a restart, a failover,
    /// the network): the same call may succeed a moment later. Errors about what was asked (a
    /// refused write, a bad value, a missing permission) are not.
    pub fn is_unavailable(&self) -> bool {
        let source = match self {
            Error::Unavailable(_) => return true,
            Error::Database { source, .. } => source,
            _ => return false,
        };
        match source {
            sqlx::Error::Io(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            // SQLSTATE class 08 is a connection exception, 57P01-57P03 a server shutting down,
            // crashed or starting, class 53 a server out of resources (too many connections,
            // out of memory, a full disk).
            sqlx::Error::Database(e) => e.code().is_some_and(|code| {
                code.starts_with("08") || code.starts_with("57P") || code.starts_with("53")
            }),
            _ => false,
        }
    }

    /// Why a write of `node` found no record it may write: the agent's `session` is not
    /// current (or its node has no record), or an operator named a node the store does not know.
    pub(crate) fn unwritable(node: &NodeName, session: Option<&Session>) -> Error {
        match session {
            Some(session) => Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            },
            None => Error::NoSuchNode { node: node.clone() },
        }
    }

    /// This error as part of `node`'s record; a database that is unavailable stays what it is,
    /// so that the caller sees it (and tries again).
    pub(crate) fn of_node(self, node: &str) -> Error {
        match self {
            Error::Record { .. } => self,
            source if source.is_unavailable() => source,
            source => Error::Record {
                node: node.to_string(),
                source: Box::new(source),
            },
        }
    }
}

/// Adds the boundary's context to a database error.
pub(crate) trait Context<T> {
    fn context(self, context: &'static str) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, sqlx::Error> {
    fn context(self, context: &'static str) -> Result<T> {
        self.map_err(|source| Error::Database { context, source })
    }
}

//! The write operations, each over the writer's connection inside the batch transaction
//! that the [writer](super::writer) opened. An operation of several statements runs in a
//! savepoint of its own, so that its failure undoes it alone and not its batch.
//!
//! One module per concern; the shared steps (the session check, the savepoint, the refusal)
//! are here.

use rota_core::{NodeName, NodeState};
use sqlx::SqliteConnection;

use crate::error::{Context, Error, Result};
use crate::model::{NodeRecord, Session, now_millis};
use crate::sqlite::queries::fetch_node;

fn typed<T>(result: Result<T>) -> Result<T> {
    result
}

/// Runs `$body` (which may `return` early) in a savepoint on `$conn`: released when the body
/// succeeds, rolled back to when it fails.
macro_rules! atomically {
    ($conn:ident, $body:block) => {{
        sqlx::query("SAVEPOINT op")
            .execute(&mut *$conn)
            .await
            .context("opening a savepoint")?;
        let result = $crate::sqlite::writes::typed(async { $body }.await);
        match result {
            Ok(value) => {
                sqlx::query("RELEASE op")
                    .execute(&mut *$conn)
                    .await
                    .context("releasing a savepoint")?;
                Ok(value)
            }
            Err(e) => {
                sqlx::query("ROLLBACK TO op")
                    .execute(&mut *$conn)
                    .await
                    .context("rolling back a savepoint")?;
                sqlx::query("RELEASE op")
                    .execute(&mut *$conn)
                    .await
                    .context("releasing a savepoint")?;
                Err(e)
            }
        }
    }};
}

mod operator;
mod requests;
mod sessions;
mod settings;
mod slots;
mod windows;

pub(super) use operator::{
    operator_cancel, operator_request, record_action, retry, submit_procedure, unlock,
};
pub(super) use requests::{add_request, cancel_request, complete_request, set_blocked};
pub(super) use sessions::{close_session, fence, heartbeat, open_session};
pub(super) use settings::{set_concurrency, set_meta};
pub(super) use slots::acquire_slot;
pub(super) use windows::transition;

/// Refuses the write unless `session` is its node's current, unexpired session.
pub(super) async fn check_session(tx: &mut SqliteConnection, session: &Session) -> Result<()> {
    let current: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = ? AND s.id = ? AND s.superseded = 0 AND s.deadline > ?",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .bind(now_millis())
    .fetch_optional(&mut *tx)
    .await
    .context("checking the session")?;
    match current {
        Some(_) => Ok(()),
        None => Err(Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        }),
    }
}

/// Why a fenced write matched nothing: the session is gone, or the node is elsewhere.
pub(super) async fn refusal(
    conn: &mut sqlx::SqliteConnection,
    session: &Session,
    expected: NodeState,
) -> Error {
    let current: std::result::Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(
        "SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
         WHERE n.node = ? AND s.id = ? AND s.superseded = 0 AND s.deadline > ?",
    )
    .bind(session.node.as_str())
    .bind(session.id)
    .bind(now_millis())
    .fetch_optional(&mut *conn)
    .await;
    match current {
        Ok(None) => Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        },
        Ok(Some(_)) => match fetch_node(conn, &session.node).await {
            Ok(Some(record)) => Error::Conflict {
                node: session.node.clone(),
                expected,
                actual: record.state.to_string(),
            },
            Ok(None) => Error::NoSuchNode {
                node: session.node.clone(),
            },
            Err(e) => e,
        },
        Err(source) => Error::Database {
            context: "checking the session",
            source,
        },
    }
}

pub(super) fn expect_node(record: Option<NodeRecord>, node: &NodeName) -> Result<NodeRecord> {
    record.ok_or_else(|| Error::NoSuchNode { node: node.clone() })
}

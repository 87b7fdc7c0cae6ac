//! The write operations, each over the writer's connection inside the batch transaction
//! that the [writer](super::writer) opened. An operation of several statements runs in a
//! savepoint of its own, so that its failure undoes it alone and not its batch.
//!
//! One module per concern; the shared parts (the session check, the savepoint) are here.

use sqlx::SqliteConnection;

use crate::error::{Context, Error, Result};
use crate::model::{Session, now_millis};

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
mod record;
mod sessions;
mod settings;
mod slots;

pub(super) use operator::{record_audit, submit_procedure};
pub(super) use record::write;
pub(super) use sessions::{close_session, fence, heartbeat, open_session};
pub(super) use settings::set;
pub(super) use slots::acquire_slot;

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

//! The store for bare-metal fleets: one PostgreSQL database shared by every host's agent.
//!
//! It makes the statements both SQL stores share (`crate::sql`: a node's record and the queue,
//! each read in one statement, the fence and heartbeats, settings, procedures), and its own
//! write of a node's record: rota-core's answer persisted in one statement, a compare-and-swap
//! on the row's version (`record.rs`). Every wake-worthy write sends `NOTIFY rota_changes`,
//! which [`Store::changes`] follows (`changes.rs`), so that waiting agents on every host learn
//! of a released slot when it commits, without polling. An agent's handle holds one connection
//! (`connections.rs`).
//!
//! Exclusion comes from compare-and-swaps, row locks and keys, never from a check followed by
//! an insert: every write of a node's record writes its row, so two writes decided on the same
//! version cannot both commit; `open_session` locks the row to supersede a session, so a fenced
//! write and a new session are strictly ordered. A grant locks the node's row and then the slot
//! rows, and writes the node's row, so it never holds two slots; it updates a slot row only
//! while it has no holder, so a slot never has two holders (`migrations/postgres/0001_init.sql`).
//!
//! "Now" is always the database's clock (`rota_now_ms()`), and session deadlines are checked
//! in the writing statement itself, so an agent whose session expired cannot write however far
//! its own clock drifts.

mod changes;
mod connections;
mod open;
mod record;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Write};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use self::changes::OPERATOR_WAKES;
use self::connections::Connections;
pub(crate) use self::open::redact;
use crate::Store;
use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::Error;
use crate::error::{Context, Result};
use crate::model::{
    Acquire, Fleet, History, HistoryFilter, NodeOverview, Part, Pause, ProcedureRecord, Session,
    Setting, Settings, Writer, Written,
};
use crate::sql::{Sql, millis};
use sqlx::{Acquire as _, PgConnection, Postgres};

/// A [`Store`](crate::Store) in a PostgreSQL database. Clones share the connections, the
/// change counter and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    connections: Arc<Connections>,
    /// Tells this handle's own notifications apart: it counts them when it commits, so that
    /// its writer sees the change at once, and skips them when they come back from the server.
    origin: u64,
    changes: Arc<watch::Sender<u64>>,
    /// The LISTEN loop, which stops with the last clone.
    _listener: Arc<AbortOnDropHandle<()>>,
}

impl PostgresStore {
    /// One call on a connection of this handle, its statements each a transaction of its own.
    /// The connection goes back for the next call unless the database failed it.
    async fn call<T>(
        &self,
        context: &'static str,
        call: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.connections.checkout(context).await?;
        let answer = call(conn.connection().await.context(context)?).await;
        if !matches!(answer, Err(Error::Database { .. })) {
            conn.finish();
        }
        answer
    }

    /// One call in one transaction, committed with the notification of the wakes `wakes`
    /// counts in its answer.
    async fn transaction<T>(
        &self,
        context: &'static str,
        call: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
        wakes: impl FnOnce(&T) -> u64,
    ) -> Result<T> {
        let mut conn = self.connections.checkout(context).await?;
        let mut tx = conn.begin().await.context(context)?;
        match call(&mut tx).await {
            Ok(answer) => {
                self.commit(tx, wakes(&answer), context).await?;
                conn.finish();
                Ok(answer)
            }
            Err(e @ Error::Database { .. }) => Err(e),
            Err(e) => {
                tx.rollback().await.context(context)?;
                conn.finish();
                Err(e)
            }
        }
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let open = async |tx: &mut PgConnection| {
            Sql::<Postgres>::open_session(tx, node, millis(ttl)).await
        };
        self.transaction("opening a session", open, |_| 0).await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        let heartbeat = async |conn: &mut PgConnection| {
            Sql::<Postgres>::heartbeat(conn, session, millis(ttl)).await
        };
        self.call("extending the session", heartbeat).await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        let close =
            async |conn: &mut PgConnection| Sql::<Postgres>::close_session(conn, session).await;
        self.call("closing the session", close).await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        const CONTEXT: &str = "acquiring a slot";
        // A read-only look first, outside a transaction; then, in one transaction, the same
        // look with the node's row and the slot rows locked, and the grant.
        let waits = async |conn: &mut PgConnection| Sql::<Postgres>::waits(conn, session).await;
        if let Some(changes) = self.call(CONTEXT, waits).await? {
            return Ok(Acquire::Wait { changes });
        }
        let acquire = async |tx: &mut PgConnection| Sql::<Postgres>::acquire(tx, session).await;
        self.transaction(CONTEXT, acquire, |_| 0).await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let fence = async |conn: &mut PgConnection| {
            Sql::<Postgres>::fence(conn, session, millis(ttl)).await
        };
        self.call("checking slot ownership", fence).await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        record::write(self, writer, &write).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        let read = async |conn: &mut PgConnection| Sql::<Postgres>::record(conn, node, None).await;
        let read = self.call("reading the node's record", read).await?;
        Ok(read.map(|read| read.record))
    }

    async fn fleet(&self) -> Result<Fleet> {
        self.call("reading the fleet", Sql::<Postgres>::fleet).await
    }

    async fn settings(&self) -> Result<Settings> {
        self.call("reading the settings", Sql::<Postgres>::settings)
            .await
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        let set = async |tx: &mut PgConnection| Sql::<Postgres>::set(tx, &setting).await;
        self.transaction("changing the settings", set, |_| setting.wakes())
            .await
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        let submit =
            async |tx: &mut PgConnection| Sql::<Postgres>::submit_procedure(tx, spec).await;
        // A new procedure wakes every agent, which lists the procedures.
        let wakes = |(_, new): &(ProcedureRecord, bool)| if *new { OPERATOR_WAKES } else { 0 };
        self.transaction("submitting a procedure", submit, wakes)
            .await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        self.call("reading procedures", Sql::<Postgres>::procedures)
            .await
    }

    async fn read_history(&self, filter: &HistoryFilter, part: Part) -> Result<History> {
        let read =
            async |conn: &mut PgConnection| Sql::<Postgres>::read_history(conn, filter, part).await;
        self.call("reading history", read).await
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        let write =
            async |conn: &mut PgConnection| Sql::<Postgres>::record_audit(conn, record).await;
        self.call("writing an audit record", write).await
    }
}

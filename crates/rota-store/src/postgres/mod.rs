//! The store for bare-metal fleets: one PostgreSQL database shared by every host's agent.
//!
//! The rules are rota-core's, as in the SQLite store: every write of a node's record (a
//! transition, a request added, canceled or completed, a blocked reason, an operator's unlock,
//! retry, request or cancel) is two statements on the writer's connection (`record.rs`): one
//! reads the node's whole record (its row, slot, open requests and backoffs) with its row's
//! version (`xmin`), whether the writer's session is current and what time it is;
//! [`NodeOverview::apply`](rota_core::NodeOverview::apply) decides; one statement persists the
//! difference (with the write's NOTIFY) only if the row is still that version and the session
//! still current, a compare-and-swap that commits all of it or nothing. A write that lost it
//! reads and decides again. A handle's own last write of a node stands for the read of its
//! next write of it (`record::Known`). A slot is granted in a transaction that locks the node's row, reads
//! the queue and the slot rows (`FOR UPDATE`), and takes the slot
//! [`schedule`](rota_core::schedule) names only while it is free (`slots.rs`); a waiter whose
//! turn has not come learns it from one read-only statement and takes no lock.
//!
//! Exclusion comes from compare-and-swaps, row locks and keys, never from a check followed by
//! an insert: every write of a node's record writes its row, so two writes decided on the same
//! version cannot both commit; `open_session` locks the row to supersede a session, so a fenced
//! write and a new session are strictly ordered. A grant writes the node's row under its lock,
//! so it never holds two slots; a grant updates a slot row only while it has no holder, so a
//! slot never has two holders (the schema's slot rows, `migrations/postgres/0001_init.sql`).
//!
//! "Now" is always the database's clock (`rota_now_ms()`), and session deadlines are checked
//! in the writing statement itself, so an agent whose session expired cannot write however far
//! its own clock drifts.
//!
//! [`Store::changes`] follows `NOTIFY rota_changes` sent inside every wake-worthy write, so
//! waiting agents on every host learn of a released slot when it commits, without polling.
//!
//! The [`Store`] impl below hands each call to the file of its concern, so that the calls that
//! share a table and its locks are read together.

mod audit;
mod changes;
mod connections;
mod open;
mod procedures;
mod queries;
mod record;
mod sessions;
mod settings;
mod slots;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Write};
use tokio::sync::watch;

use self::changes::ListenerTask;
use self::connections::Connections;
pub(crate) use self::open::redact;
use self::record::Known;
use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Context, Result};
use crate::model::{
    Acquire, Fleet, History, HistoryFilter, NodeOverview, Parts, Pause, ProcedureRecord, Session,
    Setting, Settings, Writer, Written,
};
use crate::{Store, reads};
use sqlx::Postgres;

/// A [`Store`](crate::Store) in a PostgreSQL database. Clones share the connections, the
/// change counter and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    connections: Arc<Connections>,
    location: String,
    /// Tells this handle's own notifications apart: it counts them when it commits, so that
    /// its writer sees the change at once, and skips them when they come back from the server.
    origin: u64,
    changes: Arc<watch::Sender<u64>>,
    _listener: Arc<ListenerTask>,
    /// Each node's record as this handle last wrote it (see [`record::Known`]).
    known: Arc<Mutex<HashMap<NodeName, Known>>>,
}

impl PostgresStore {
    fn known(&self, node: &NodeName) -> Option<Known> {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
    }

    fn remember(&self, node: &NodeName, known: Known) {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.clone(), known);
    }

    /// The node was written by another write, or may have been: its next write reads it.
    fn forget(&self, node: &NodeName) {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        sessions::open_session(self, node, ttl).await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        sessions::heartbeat(self, session, ttl).await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        sessions::close_session(self, session).await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        slots::try_acquire_slot(self, session).await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        slots::fence(self, session, ttl).await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        record::write(self, writer, &write).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        record::record(self, node).await
    }

    async fn fleet(&self) -> Result<Fleet> {
        let mut conn = self.connections.checkout("reading the fleet").await?;
        let fleet =
            reads::fleet::<Postgres>(conn.connection().await.context("reading the fleet")?).await?;
        conn.finish();
        Ok(fleet)
    }

    async fn settings(&self) -> Result<Settings> {
        let mut conn = self.connections.checkout("reading the settings").await?;
        let settings =
            reads::settings::<Postgres>(conn.connection().await.context("reading the settings")?)
                .await?;
        conn.finish();
        Ok(settings)
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        settings::set(self, &setting).await
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        procedures::submit_procedure(self, spec).await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        let mut conn = self.connections.checkout("reading procedures").await?;
        let procedures =
            reads::procedures::<Postgres>(conn.connection().await.context("reading procedures")?)
                .await?;
        conn.finish();
        Ok(procedures)
    }

    async fn read_history(&self, filter: &HistoryFilter, parts: Parts) -> Result<History> {
        const CONTEXT: &str = "reading history";
        let mut conn = self.connections.checkout(CONTEXT).await?;
        let history = reads::read_history::<Postgres>(
            conn.connection().await.context(CONTEXT)?,
            filter,
            parts,
        )
        .await?;
        conn.finish();
        Ok(history)
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        audit::record(self, record).await
    }
}

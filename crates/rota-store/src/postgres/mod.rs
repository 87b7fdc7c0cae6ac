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
//! reads and decides again. A slot is granted in a transaction that locks the node's row, reads
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

mod actions;
mod changes;
mod connections;
mod history;
mod nodes;
mod open;
mod operator;
mod pause;
mod procedures;
mod queries;
mod record;
mod requests;
mod sessions;
mod slots;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Process};
use tokio::sync::watch;

use self::changes::ListenerTask;
use self::connections::Connections;
pub(crate) use self::open::redact;
use crate::actions::{ActionRecord, NewAction, os_actor};
use crate::error::Result;
use crate::model::{
    Acquire, BackoffRecord, Blocked, HistoryEntry, HistoryFilter, Millis, NodeOverview, NodeRecord,
    Outcome, Pause, ProcedureRecord, RequestRecord, Session, SlotHolder, StepRecord, Transition,
};
use crate::{AgentStore, AuditStore, OperatorStore, ProcedureStore, ReadStore};

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
}

#[async_trait]
impl AgentStore for PostgresStore {
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

    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        requests::add_request(self, session, process, source).await
    }

    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool> {
        nodes::set_blocked(self, session, blocked).await
    }

    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        requests::cancel_request(self, session, process).await
    }

    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord> {
        requests::complete_request(self, session, process, outcome).await
    }

    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        nodes::transition(self, session, transition).await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[async_trait]
impl OperatorStore for PostgresStore {
    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        slots::set_concurrency(self, concurrency).await
    }

    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        operator::unlock(self, node, reason).await
    }

    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        operator::retry(self, node).await
    }

    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        operator::request(self, node, process, source).await
    }

    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool> {
        operator::cancel(self, node, process).await
    }

    async fn pause(&self, reason: &str) -> Result<Pause> {
        pause::pause(self, reason).await
    }

    async fn resume(&self) -> Result<Option<Pause>> {
        pause::resume(self).await
    }
}

#[async_trait]
impl ProcedureStore for PostgresStore {
    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        procedures::submit_procedure(self, spec).await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        procedures::procedures(self).await
    }
}

#[async_trait]
impl ReadStore for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn concurrency(&self) -> Result<Option<u32>> {
        slots::concurrency(self).await
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        slots::slot_holders(self).await
    }

    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        requests::open_requests(self, node).await
    }

    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        requests::all_requests(self).await
    }

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        nodes::node(self, node).await
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        nodes::nodes(self).await
    }

    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>> {
        history::backoffs(self, node).await
    }

    async fn overview(&self) -> Result<Vec<NodeOverview>> {
        nodes::overview(self).await
    }

    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        history::history(self, filter).await
    }

    async fn steps(&self, filter: &HistoryFilter) -> Result<Vec<StepRecord>> {
        history::steps(self, filter).await
    }

    async fn paused(&self) -> Result<Option<Pause>> {
        pause::paused(self).await
    }

    async fn resumed_at(&self) -> Result<Option<Millis>> {
        pause::resumed_at(self).await
    }
}

#[async_trait]
impl AuditStore for PostgresStore {
    async fn actor(&self) -> Result<String> {
        Ok(os_actor())
    }

    async fn record_action(&self, action: &NewAction) -> Result<ActionRecord> {
        actions::record(self, action).await
    }

    async fn actions(&self, filter: &HistoryFilter) -> Result<Vec<ActionRecord>> {
        actions::list(self, filter).await
    }
}

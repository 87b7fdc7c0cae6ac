//! The store for bare-metal fleets: one PostgreSQL database shared by every host's agent.
//!
//! Exclusion comes from row locks and keys, never from a check followed by an insert: every
//! write that reads a node's state before changing it first locks the node's row (`FOR
//! UPDATE`), which is also what `open_session` locks to supersede a session, so a fenced write
//! and a new session are strictly ordered. Slot grants share no lock: each slot is a row that a
//! grant updates only while it has no holder, so grants that meet on a slot are ordered by its
//! row lock, and a node takes and gives back its slot only under its own row lock, so it never
//! holds two (migration `0011`; `rota_acquire_slot` in migration `0003` says why the queue order
//! holds without a lock).
//!
//! Every write is one statement, so one round trip: a call of one of the migrations' PL/pgSQL
//! functions (`rota_transition`, `rota_acquire_slot`, `rota_open_session`, `rota_retry`) where
//! it reads before it writes, which runs in the statement's own transaction and takes the locks
//! above inside the server. Only `unlock` and `set_concurrency` are multi-statement transactions.
//!
//! "Now" is always the database's clock (`rota_now_ms()`), and session deadlines are checked
//! inside the writing statement, so an agent whose session expired cannot write however far
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
mod requests;
mod sessions;
mod slots;
mod windows;

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

use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Process, Write};
use tokio::sync::watch;

use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Error, Result};
use crate::model::{
    Acquire, BackoffRecord, Blocked, Fleet, History, HistoryEntry, HistoryFilter, Millis,
    NodeOverview, NodeRecord, Outcome, Part, Pause, ProcedureRecord, RequestRecord, Session,
    Setting, Settings, SlotHolder, StepRecord, Transition, Writer, Written,
};

/// rota's state, on any substrate: what a store must do, and nothing a caller can derive.
/// A store persists; rota-core decides (every [`Write`] is
/// [`NodeOverview::apply`](rota_core::NodeOverview::apply)'s, every grant
/// [`schedule`](rota_core::schedule())'s). Callers hold an `Arc<dyn Store>` and use the
/// conveniences of [`StoreExt`].
#[async_trait]
pub trait Store: Send + Sync {
    /// Starts a new session for `node`, superseding every earlier one, and creates the node's
    /// record (idle) if it has none. The session expires `ttl` after its last heartbeat.
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session>;

    /// Extends the session's deadline. Fails with `Expired` if the session ran out but is
    /// still the node's latest (nobody took the node over: a new session may carry on), and
    /// with `Fenced` if it was superseded.
    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()>;

    /// Ends the session now (graceful shutdown). The node keeps whatever slot it holds.
    async fn close_session(&self, session: &Session) -> Result<()>;

    /// Takes the slot [`schedule`](rota_core::schedule()) gives the session's node, or
    /// re-adopts the one it already holds; else says how many changes to wait for.
    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire>;

    /// Compare-and-swap check right before anything disruptive: the session is current and its
    /// node holds a slot (returned). Also extends the session like a heartbeat.
    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32>;

    /// Applies one [`Write`] to the writer's node as rota-core decides it, atomically: the
    /// record, its requests, backoffs, history and steps, or nothing. An agent's write is
    /// refused when its session is no longer current (fencing); an operator's needs a known
    /// node. A [`Writer::Fenced`] write also proves the fence (see [`Store::fence`]);
    /// substrates whose writes are round trips send both at once, so a refused fence may
    /// leave the write done, as a fence refused right after it would.
    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written>;

    /// A counter that grows by one after every committed write that may let a waiting agent go
    /// on: a slot released, a node leaving the queue without a slot, an operator's command (a
    /// new concurrency jumps it [`WAKE_ALL`] ahead, as it may free many slots at once).
    /// Waiters re-read the store when it changes; an idle agent waits for a jump.
    fn changes(&self) -> watch::Receiver<u64>;

    /// The node's whole record: its row, its open (pending or active) requests oldest first,
    /// and its backoffs.
    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>>;

    /// Every node's record and every slot's holder, read at once: a fixed number of requests
    /// or statements whatever the fleet's size (`rota status` at every refresh).
    async fn fleet(&self) -> Result<Fleet>;

    /// The fleet's settings: its concurrency, its pause and the start of its rollout.
    async fn settings(&self) -> Result<Settings>;

    /// Changes one of the fleet's settings. A new concurrency or a resume wakes every waiter.
    /// Every resume, of a paused fleet or not, starts a new rollout: its time is recorded
    /// before the pause is lifted. Returns the pause the change set or lifted (`None` for a
    /// concurrency, or a resume of a fleet that was not paused).
    async fn set(&self, setting: Setting) -> Result<Option<Pause>>;

    /// Records a procedure once: a new name is stored, the same spec again changes nothing
    /// (`false`), and another spec under a taken name is refused (`ProcedureConflict`).
    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)>;

    /// Every procedure, in the order they were submitted.
    async fn procedures(&self) -> Result<Vec<ProcedureRecord>>;

    /// The past that `filter` lets through, oldest first, of the `part` asked for: history
    /// entries, steps (bounded: a node keeps them for about as many windows as its history),
    /// audit records (of the filter's node and process; none for an event) and requests ever made.
    async fn read_history(&self, filter: &HistoryFilter, part: Part) -> Result<History>;

    /// Writes one audit record of an operator command, with the store's time. Records are
    /// written once; agents never read them.
    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord>;
}

/// What every caller may derive from a [`Store`]'s methods, written once for every store: the
/// writes by name, and reads of one part of a record, of the fleet or of the past.
#[async_trait]
pub trait StoreExt: Store {
    /// Records a request for `process` on the session's node unless an open (pending or active)
    /// one exists; returns the open request and whether it was created now. A procedure's
    /// request (`mop/<name>`) is made at most once per node, ever.
    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        request_added(self, Writer::Agent(session), process, source).await
    }

    /// Cancels the node's pending request for `process`, if any; returns whether there was one.
    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        let write = Write::CancelRequest {
            process: process.clone(),
        };
        Ok(self.write(Writer::Agent(session), write).await?.changed)
    }

    /// Records how one active request of the session's open window ended. A success closes
    /// the request and leaves the window open. A failure leaves the request active and, in the
    /// same write, fails the node closed (maintaining → failed, keeping slot and cordon).
    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord> {
        let write = Write::CompleteRequest {
            process: process.clone(),
            outcome: outcome.clone(),
        };
        self.write(Writer::Agent(session), write)
            .await?
            .request
            .ok_or_else(|| {
                Error::Refused(rota_core::RecordError::NotActive {
                    node: session.node.clone(),
                    process: process.clone(),
                })
            })
    }

    /// Applies one lifecycle transition atomically (see [`Transition`]) and returns the new record.
    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        let written = self
            .write(Writer::Agent(session), Write::Transition(transition))
            .await?;
        Ok(written.record)
    }

    /// A transition that something disruptive follows at once (the window's first cordon, the
    /// reboot), with the fence's proof (see [`Writer::Fenced`]).
    async fn fenced_transition(
        &self,
        session: &Session,
        transition: Transition,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        let written = self
            .write(Writer::Fenced(session, ttl), Write::Transition(transition))
            .await?;
        Ok(written.record)
    }

    /// Records why the session's node holds back (`Some`), or that nothing holds it any more
    /// (`None`). Writes nothing when the stored reason is already that one (its `since` then
    /// stays); returns whether it wrote.
    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool> {
        let write = Write::SetBlocked(blocked.cloned());
        Ok(self.write(Writer::Agent(session), write).await?.changed)
    }

    /// Operator: gives a node's slot back and returns it to idle, canceling its window, with the
    /// reason in history. The node stays marked as cordoned by rota so that its agent uncordons it.
    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        let write = Write::Unlock {
            reason: reason.to_string(),
        };
        Ok(self.write(Writer::Operator(node), write).await?.record)
    }

    /// Operator: lets a failed node try its window's work again (it keeps slot and cordon).
    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        Ok(self
            .write(Writer::Operator(node), Write::Retry)
            .await?
            .record)
    }

    /// Operator: asks for `process` on a known `node` without a session (`rota request`); an
    /// open request for it (for a procedure: any request ever) is returned as it is.
    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        request_added(self, Writer::Operator(node), process, source).await
    }

    /// Operator: withdraws the node's pending request for `process` (`rota cancel`); returns
    /// whether there was one. Work already in a window is given up with `unlock`.
    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool> {
        let write = Write::CancelRequest {
            process: process.clone(),
        };
        match self.write(Writer::Operator(node), write).await {
            Ok(written) => Ok(written.changed),
            // Withdrawing from a node the store does not know withdraws nothing.
            Err(Error::NoSuchNode { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        if !(1..=1000).contains(&concurrency) {
            return Err(Error::Concurrency { value: concurrency });
        }
        self.set(Setting::Concurrency(concurrency)).await.map(drop)
    }

    /// Operator: pauses the whole fleet: no node takes a slot or starts a reboot until
    /// [`resume`](StoreExt::resume); windows already open go on to their end.
    async fn pause(&self, reason: &str) -> Result<Pause> {
        let setting = Setting::Pause {
            reason: reason.to_string(),
        };
        let pause = self.set(setting).await?;
        pause.ok_or_else(|| Error::Backend("the store set no pause".into()))
    }

    /// Operator: lifts the pause and starts a new rollout; returns the pause lifted, if any.
    async fn resume(&self) -> Result<Option<Pause>> {
        self.set(Setting::Resume).await
    }

    /// The rollout's failure budget, before a node takes a slot: at the budget, pauses the
    /// fleet (see [`BudgetCheck`](crate::BudgetCheck)).
    async fn enforce_failure_budget(&self) -> Result<crate::BudgetCheck> {
        crate::budget::enforce(self).await
    }

    /// The rollout's failure budget, counted, writing nothing.
    async fn failure_budget(&self) -> Result<crate::BudgetCheck> {
        crate::budget::look(self).await
    }

    /// The number of slots (`concurrency`), if it was ever set.
    async fn concurrency(&self) -> Result<Option<u32>> {
        Ok(self.settings().await?.concurrency)
    }

    /// The fleet's pause, if any.
    async fn paused(&self) -> Result<Option<Pause>> {
        Ok(self.settings().await?.pause)
    }

    /// When the fleet was last resumed (the start of the current rollout), if ever.
    async fn resumed_at(&self) -> Result<Option<Millis>> {
        Ok(self.settings().await?.resumed_at)
    }

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        Ok(self.record(node).await?.map(|r| r.record))
    }

    /// The node's open (pending or active) requests, oldest first.
    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        Ok(self
            .record(node)
            .await?
            .map(|r| r.open_requests)
            .unwrap_or_default())
    }

    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>> {
        Ok(self
            .record(node)
            .await?
            .map(|r| r.backoffs)
            .unwrap_or_default())
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        Ok(self
            .fleet()
            .await?
            .nodes
            .into_iter()
            .map(|r| r.record)
            .collect())
    }

    /// Every node with its open requests and backoffs.
    async fn overview(&self) -> Result<Vec<NodeOverview>> {
        Ok(self.fleet().await?.nodes)
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        Ok(self.fleet().await?.slots)
    }

    /// History entries matching `filter`, oldest first.
    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        Ok(self.read_history(filter, Part::Entries).await?.entries)
    }

    /// The steps of `filter.node` (every node's when `None`) between `filter.since` and
    /// `filter.until`, oldest first, each node's in the order they were taken.
    async fn steps(&self, filter: &HistoryFilter) -> Result<Vec<StepRecord>> {
        Ok(self.read_history(filter, Part::Steps).await?.steps)
    }

    /// The audit records that `filter` lets through, oldest first.
    async fn audit_records(&self, filter: &HistoryFilter) -> Result<Vec<AuditRecord>> {
        Ok(self.read_history(filter, Part::Audit).await?.audit)
    }

    /// Every request ever made, open or closed, oldest first.
    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        let filter = HistoryFilter::default();
        Ok(self.read_history(&filter, Part::Requests).await?.requests)
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

/// An added request's answer: the one the write opened, or the one that already stands for
/// `process`.
async fn request_added<S: Store + ?Sized>(
    store: &S,
    writer: Writer<'_>,
    process: &Process,
    source: &str,
) -> Result<(RequestRecord, bool)> {
    let write = Write::AddRequest {
        process: process.clone(),
        source: source.to_string(),
    };
    let written = store.write(writer, write).await?;
    let request = written.request.ok_or_else(|| Error::NoSuchNode {
        node: writer.node().clone(),
    })?;
    Ok((request, written.changed))
}

/// How far [`Store::changes`] jumps for a change that every agent should look at again (a new
/// concurrency, a pause, a lost notification channel, and in Kubernetes an operator's wake):
/// an idle agent waits for this much, past any number of slot handoffs.
pub const WAKE_ALL: u64 = 1 << 32;

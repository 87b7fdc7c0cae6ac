use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Process};
use tokio::sync::watch;

use crate::actions::{ActionRecord, NewAction};
use crate::error::Result;
use crate::model::{
    Acquire, BackoffRecord, Blocked, HistoryEntry, HistoryFilter, Millis, NodeOverview, NodeRecord,
    Outcome, Pause, ProcedureRecord, RequestRecord, Session, SlotHolder, StepRecord, Transition,
};

/// rota's state, on any substrate: the five parts below, by who uses them. Callers hold an
/// `Arc<dyn Store>`; a substrate implements each part.
pub trait Store: AgentStore + OperatorStore + ProcedureStore + ReadStore + AuditStore {}

impl<T: AgentStore + OperatorStore + ProcedureStore + ReadStore + AuditStore> Store for T {}

/// What an agent writes for its own node: its session, its slot, its requests, its lifecycle
/// steps. Every method that changes the node takes the writer's [`Session`] and refuses the
/// write when that session is no longer current (fencing).
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// Starts a new session for `node`, superseding every earlier one, and creates the node's
    /// record (idle) if it has none. The session expires `ttl` after its last heartbeat.
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session>;

    /// Extends the session's deadline. Fails with `Expired` if the session ran out but is
    /// still the node's latest (nobody took the node over: a new session may carry on), and
    /// with `Fenced` if it was superseded.
    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()>;

    /// Ends the session now (graceful shutdown). The node keeps whatever slot it holds.
    async fn close_session(&self, session: &Session) -> Result<()>;

    /// Takes a free slot for the session's node, or re-adopts the one it already holds. Nodes
    /// are served in queue order: a node gets a slot only when fewer live queued nodes are
    /// ahead of it than there are free slots.
    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire>;

    /// Compare-and-swap check right before a disruptive step: the session is current and its
    /// node holds a slot (returned). Also extends the session like a heartbeat.
    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32>;

    /// Records a request for `process` on the session's node unless an open (pending or active)
    /// one exists; returns the open request and whether it was created now. A procedure's
    /// request (`mop/<name>`) is made at most once per node, ever: when the node has one in any
    /// state (done and canceled included), that one is returned and nothing is created.
    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)>;

    /// Cancels the node's pending request for `process`, if any; returns whether there was one.
    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool>;

    /// Records how one active request of the session's open window ended (a procedure, while
    /// others go on); refused unless the request is active. A success closes the request and
    /// leaves the window open. A failure leaves the request active and, in the same write, fails
    /// the node closed (maintaining → failed, keeping slot and cordon; refused with `Conflict`
    /// from any other state), so that only an operator's retry starts another attempt.
    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord>;

    /// Applies one lifecycle step atomically (see [`Transition`]) and returns the new record.
    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord>;

    /// A transition that a disruptive step follows at once (the window's first cordon, the
    /// reboot): the transition and the fence's proof (see [`AgentStore::fence`]), which must
    /// both succeed before the step. Substrates whose writes are round trips send both at once,
    /// so a refused fence may leave the transition written, as a fence refused right after it
    /// would.
    async fn fenced_transition(
        &self,
        session: &Session,
        transition: Transition,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        self.fence(session, ttl).await?;
        self.transition(session, transition).await
    }

    /// Records why the session's node holds back (`Some`), or that nothing holds it any more
    /// (`None`). Writes nothing when the stored reason is already that one (its `since` then
    /// stays); returns whether it wrote. Fenced like every write of an agent.
    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool>;

    /// Has the next reads of `node` ask the store itself. A handle may answer its agent's
    /// reads of its own node from what it last wrote or read there (the Kubernetes store does,
    /// until an operator's wake or this call); the agent calls this at its periodic re-read,
    /// which is there to find the changes nobody announced. Stores that always ask ignore it.
    fn refresh(&self, _node: &NodeName) {}

    /// A counter that grows by one after every committed write that may let a waiting agent go
    /// on: a slot released, a node leaving the queue without a slot, an operator's action (a
    /// new concurrency jumps it [`WAKE_ALL`] ahead, as it may free many slots at once).
    /// Waiters re-read the store when it changes; an idle agent waits for a jump.
    fn changes(&self) -> watch::Receiver<u64>;
}

/// What an operator changes, without a session: the fleet's concurrency and pause, and one
/// node's window or requests.
#[async_trait]
pub trait OperatorStore: Send + Sync {
    async fn set_concurrency(&self, concurrency: u32) -> Result<()>;

    /// Operator: gives a node's slot back and returns it to idle, canceling its window, with the
    /// reason in history. The node stays marked as cordoned by rota so that its agent uncordons it.
    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord>;

    /// Operator: lets a failed node try its window's work again (it keeps slot and cordon).
    async fn retry(&self, node: &NodeName) -> Result<NodeRecord>;

    /// Operator: asks for `process` on a known `node` without a session (`rota request`); an
    /// open request for it (for a procedure: any request ever) is returned as it is.
    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)>;

    /// Operator: withdraws the node's pending request for `process` (`rota cancel`); returns
    /// whether there was one. Work already in a window is given up with `unlock`.
    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool>;

    /// Operator: pauses the whole fleet: no node takes a slot or starts a reboot until
    /// [`resume`](OperatorStore::resume); windows already open finish their other steps. A
    /// second pause replaces the reason.
    async fn pause(&self, reason: &str) -> Result<Pause>;

    /// Operator: lifts the pause; returns the one lifted, if any. Wakes every waiter. Every
    /// resume, of a paused fleet or not, starts a new rollout: its time is recorded (see
    /// [`resumed_at`](ReadStore::resumed_at)) before the pause is lifted.
    async fn resume(&self) -> Result<Option<Pause>>;
}

/// Maintenance procedures: submitted once, read by every agent.
#[async_trait]
pub trait ProcedureStore: Send + Sync {
    /// Records a procedure once: a new name is stored, the same spec again changes nothing
    /// (`false`), and another spec under a taken name is refused (`ProcedureConflict`).
    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)>;

    /// Every procedure, in the order they were submitted.
    async fn procedures(&self) -> Result<Vec<ProcedureRecord>>;
}

/// What anyone may read: nodes, requests, slots, backoffs, history and the fleet's settings.
#[async_trait]
pub trait ReadStore: Send + Sync {
    /// A short name of the substrate, for logs and JSON output.
    fn kind(&self) -> &'static str;

    /// The number of slots (`concurrency`), if it was ever set.
    async fn concurrency(&self) -> Result<Option<u32>>;

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>>;

    /// The node's open (pending or active) requests, oldest first.
    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>>;

    /// Every request ever made, open or closed, oldest first.
    async fn all_requests(&self) -> Result<Vec<RequestRecord>>;

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>>;

    async fn nodes(&self) -> Result<Vec<NodeRecord>>;

    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>>;

    /// Every node with its open requests and backoffs, read at once: a fixed number of
    /// requests or statements whatever the fleet's size (`rota status` at every refresh).
    async fn overview(&self) -> Result<Vec<NodeOverview>>;

    /// History entries matching `filter`, oldest first.
    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>>;

    /// The steps of `filter.node` (every node's when `None`) between `filter.since` and
    /// `filter.until`, oldest first, each node's in the order they were taken. Bounded: a node
    /// keeps its steps for about as many windows as its history.
    async fn steps(&self, filter: &HistoryFilter) -> Result<Vec<StepRecord>>;

    /// When the fleet was last resumed (the start of the current rollout), if ever.
    async fn resumed_at(&self) -> Result<Option<Millis>>;

    /// The fleet's pause, if any.
    async fn paused(&self) -> Result<Option<Pause>>;
}

/// The operators' audit trail: each operator command records what it did once it is done.
/// Records are written once; agents never read them.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Who this handle's operator is, as its actions are recorded: the API user in
    /// Kubernetes (as the API server authenticates it), `user@host` on the SQL stores.
    async fn actor(&self) -> Result<String>;

    /// Records one operator action, with the store's time.
    async fn record_action(&self, action: &NewAction) -> Result<ActionRecord>;

    /// The recorded actions that `filter` lets through (see [`ActionRecord::matches`]),
    /// oldest first.
    async fn actions(&self, filter: &HistoryFilter) -> Result<Vec<ActionRecord>>;
}

/// How far [`AgentStore::changes`] jumps for a change that every agent should look at again (a new
/// concurrency, a pause, a lost notification channel, and in Kubernetes an operator's wake):
/// an idle agent waits for this much, past any number of slot handoffs.
pub const WAKE_ALL: u64 = 1 << 32;

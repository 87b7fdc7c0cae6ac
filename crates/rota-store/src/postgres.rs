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

use std::hash::{BuildHasher, Hasher};
use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{HistoryEvent, NodeName, NodeState, ProcedureSpec, Process};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, PgConnection, Postgres, Row, Transaction};
use tokio::sync::{Semaphore, SemaphorePermit, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, BackoffRecord, Blocked, HistoryEntry, HistoryFilter, Millis, NodeRecord, Outcome,
    Pause, ProcedureRecord, RequestRecord, RequestState, Session, SlotHolder, Transition,
    WindowChange, decode_resumed_at,
};
use crate::retry_pauses::RetryPauses;
use crate::store::{Store, WAKE_ALL};

/// How far an operator's request, cancel or new procedure moves every agent's counter. Such a
/// change lets no waiter go on, but an idle agent would otherwise find it only at its next
/// `--store-poll` or `--procedure-poll`: it wakes every agent, which re-reads its node and
/// lists the procedures.
const OPERATOR_WAKES: u64 = WAKE_ALL;

/// The channel every wake-worthy write notifies; the payload is `ORIGIN:WAKES`.
const CHANNEL: &str = "rota_changes";

/// Connections per handle for store calls (the listener has one more of its own). Every call is
/// one short statement, so a few connections serve many concurrent callers, who queue here
/// instead of on the server: there, more runnable backends than cores get preempted while
/// holding a row lock or the NOTIFY lock, and everyone behind waits (`rota bench` with 32
/// sessions on 2 cores: 8 connections in all were almost twice as fast as 32, and as fast as
/// 4). A fleet's agents also stay far below `max_connections`.
const MAX_CONNECTIONS: usize = 7;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// A [`Store`] in a PostgreSQL database. Clones share the connections, the change counter and
/// the listener.
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

/// Stops the LISTEN loop when the last clone of the store is dropped.
struct ListenerTask(JoinHandle<()>);

impl Drop for ListenerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The connections of store calls. sqlx's pool (0.8) sends a Sync and waits for the server's
/// answer every time a connection comes back, a second round trip per call that also keeps the
/// connection from the next caller that long. These are handed back as they are. A connection
/// whose call did not finish (it failed, or its caller was cancelled halfway) may be out of
/// step with the server, so it is closed instead, and a new one is opened when needed. The idle
/// ones are closed with it: a call fails most often because the server ended its connections
/// (a restart, a failover), and then every idle connection is dead too, and would fail one
/// call each (test `a_database_restart_costs_at_most_one_failed_call_and_loses_nothing`).
struct Connections {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    permits: Semaphore,
}

impl Connections {
    fn new(options: PgConnectOptions) -> Connections {
        Connections {
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(MAX_CONNECTIONS),
        }
    }

    /// An idle connection, or a new one when none is idle and fewer than `MAX_CONNECTIONS`
    /// are in use; otherwise waits for one.
    async fn lease(&self, context: &'static str) -> Result<Lease<'_>> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)
            .context(context)?;
        let idle = self.idle().pop();
        let connection = match idle {
            Some(connection) => connection,
            None => PgConnection::connect_with(&self.options)
                .await
                .context(context)?,
        };
        Ok(Lease {
            connections: self,
            connection: Some(connection),
            _permit: permit,
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<PgConnection>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One connection while a call uses it. [`Lease::finish`] hands it back; a lease dropped
/// without it closes its connection and the idle ones (see [`Connections`]).
struct Lease<'a> {
    connections: &'a Connections,
    /// Taken out only by `finish` and `drop`, which end the lease.
    connection: Option<PgConnection>,
    _permit: SemaphorePermit<'a>,
}

impl Lease<'_> {
    /// The call is complete and the connection ready for the next one.
    fn finish(mut self) {
        if let Some(connection) = self.connection.take() {
            self.connections.idle().push(connection);
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.connection.take().is_some() {
            self.connections.idle().clear();
        }
    }
}

impl Deref for Lease<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.connection
            .as_ref()
            .expect("a lease holds its connection until it ends")
    }
}

impl DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.connection
            .as_mut()
            .expect("a lease holds its connection until it ends")
    }
}

/// The URL without its password, for messages and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// A random id for this handle, from the standard library's per-process random hash keys.
fn random_origin() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::UNIX_EPOCH
            .elapsed()
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://…` or `postgresql://…`) and applies
    /// migrations. A database holding other programs' tables, or a rota schema newer than this
    /// binary, is refused without changing anything.
    pub async fn open(url: &str) -> Result<PostgresStore> {
        let location = redact(url);
        let options = PgConnectOptions::from_str(url).map_err(|e| Error::Url {
            url: location.clone(),
            reason: e.to_string(),
        })?;
        // sqlx's pool serves the checks and migrations at start-up, then keeps the listener's
        // connection (and opens a new one when the listener reconnects).
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .map_err(|e| Error::Url {
                url: location.clone(),
                reason: format!("cannot connect: {e}"),
            })?;
        check_is_rota(&pool, &location).await?;
        MIGRATOR.run(&pool).await.map_err(|e| Error::NotRota {
            location: location.clone(),
            reason: format!("migration failed: {e}"),
        })?;

        // LISTEN before returning: no change committed after `open` may go unnoticed.
        let mut listener = PgListener::connect_with(&pool)
            .await
            .context("connecting the change listener")?;
        listener
            .listen(CHANNEL)
            .await
            .context("listening for changes")?;
        let (changes, _) = watch::channel(0);
        let changes = Arc::new(changes);
        let origin = random_origin();
        let task = tokio::spawn(follow_changes(listener, origin, changes.clone()));
        Ok(PostgresStore {
            connections: Arc::new(Connections::new(options)),
            location,
            origin,
            changes,
            _listener: Arc::new(ListenerTask(task)),
        })
    }

    /// The database's URL, without its password.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Notifies every listener of `wakes` inside the transaction (delivered only if it commits),
    /// commits, and counts the wakes for this handle's own waiters.
    async fn commit(
        &self,
        mut tx: Transaction<'_, Postgres>,
        wakes: u64,
        context: &'static str,
    ) -> Result<()> {
        if let Some(payload) = self.payload(wakes) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload)
                .execute(&mut *tx)
                .await
                .context(context)?;
        }
        tx.commit().await.context(context)?;
        self.woke(wakes);
        Ok(())
    }

    /// The notification of `wakes` from this handle, if any.
    fn payload(&self, wakes: u64) -> Option<String> {
        (wakes > 0).then(|| format!("{}:{wakes}", self.origin))
    }

    fn woke(&self, wakes: u64) {
        if wakes > 0 {
            self.changes.send_modify(|n| *n = n.wrapping_add(wakes));
        }
    }
}

/// Moves the change counter by every other handle's notifications. Notifications sent while
/// the connection was down are lost, so a reconnect wakes every waiter to re-read the store.
async fn follow_changes(mut listener: PgListener, origin: u64, changes: Arc<watch::Sender<u64>>) {
    let mut pauses = RetryPauses::new();
    loop {
        let received = listener.try_recv().await;
        if received.is_ok() {
            pauses.reset();
        }
        match received {
            Ok(Some(notification)) => {
                let payload = notification.payload();
                let parsed = payload.split_once(':').and_then(|(from, wakes)| {
                    Some((from.parse::<u64>().ok()?, wakes.parse().ok()?))
                });
                match parsed {
                    Some((from, _)) if from == origin => {}
                    Some((_, wakes)) => changes.send_modify(|n| *n = n.wrapping_add(wakes)),
                    None => debug!(payload, "ignoring a malformed change notification"),
                }
            }
            Ok(None) => {
                warn!("the change listener lost its connection; waking every waiter");
                changes.send_modify(|n| *n = n.wrapping_add(WAKE_ALL));
            }
            Err(e) => {
                let pause = pauses.next_pause();
                warn!(error = %e, pause = ?pause, "the change listener cannot reconnect; retrying");
                changes.send_modify(|n| *n = n.wrapping_add(WAKE_ALL));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Refuses a database that holds other programs' tables or a newer rota schema. Only tables in
/// the connection's current schema count, so a shared database can give rota a schema of its
/// own through `search_path`.
async fn check_is_rota(pool: &PgPool, location: &str) -> Result<()> {
    let not_rota = |e: sqlx::Error| Error::NotRota {
        location: location.to_string(),
        reason: e.to_string(),
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::TEXT FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY table_name",
    )
    .fetch_all(pool)
    .await
    .map_err(not_rota)?;
    // Only the migrations table: another agent is creating the schema right now.
    if tables.iter().all(|t| t == "_sqlx_migrations") {
        return Ok(());
    }
    if !tables.iter().any(|t| t == "rota_meta") {
        return Err(Error::NotRota {
            location: location.to_string(),
            reason: format!("it holds other tables ({})", tables.join(", ")),
        });
    }
    let found: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(pool)
        .await
        .map_err(not_rota)?;
    let supported = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    match found {
        Some(found) if found > supported => Err(Error::SchemaTooNew {
            location: location.to_string(),
            found,
            supported,
        }),
        _ => Ok(()),
    }
}

fn parse<T: FromStr>(column: &'static str, value: String) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e: T::Err| Error::Corrupt {
        column,
        reason: e.to_string(),
        value,
    })
}

fn request_state(value: String) -> Result<RequestState> {
    match value.as_str() {
        "pending" => Ok(RequestState::Pending),
        "active" => Ok(RequestState::Active),
        "done" => Ok(RequestState::Done),
        "canceled" => Ok(RequestState::Canceled),
        _ => Err(Error::Corrupt {
            column: "requests.state",
            value,
            reason: "expected pending, active, done or canceled".into(),
        }),
    }
}

fn slot_index(value: Option<i64>) -> Option<u32> {
    value.and_then(|v| u32::try_from(v).ok())
}

fn millis(d: Duration) -> i64 {
    // Capped far below i64::MAX so that `now + ttl` cannot overflow in SQL.
    i64::try_from(d.as_millis())
        .unwrap_or(i64::MAX)
        .min(1 << 52)
}

fn getter(context: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |source| Error::Database { context, source }
}

const NODE_COLUMNS: &str = "n.node, n.state, n.since, n.process, n.pre_cordoned, \
    n.cordoned_by_rota, n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, \
    n.queued_at, n.last_result, n.blocked_reason, n.blocked_since, s.slot";

fn node_record(row: &PgRow) -> Result<NodeRecord> {
    let get = getter("reading a node");
    Ok(NodeRecord {
        node: parse("nodes.node", row.try_get("node").map_err(&get)?)?,
        state: parse("nodes.state", row.try_get("state").map_err(&get)?)?,
        since: row.try_get("since").map_err(&get)?,
        process: row
            .try_get::<Option<String>, _>("process")
            .map_err(&get)?
            .map(|p| parse("nodes.process", p))
            .transpose()?,
        slot: slot_index(row.try_get("slot").map_err(&get)?),
        pre_cordoned: row.try_get("pre_cordoned").map_err(&get)?,
        cordoned_by_rota: row.try_get("cordoned_by_rota").map_err(&get)?,
        boot_id: row.try_get("boot_id").map_err(&get)?,
        reboot_started_at: row.try_get("reboot_started_at").map_err(&get)?,
        reboot_deadline: row.try_get("reboot_deadline").map_err(&get)?,
        last_reboot_at: row.try_get("last_reboot_at").map_err(&get)?,
        queued_at: row.try_get("queued_at").map_err(&get)?,
        last_result: row.try_get("last_result").map_err(&get)?,
        blocked: match row
            .try_get::<Option<String>, _>("blocked_reason")
            .map_err(&get)?
        {
            Some(reason) => Some(Blocked {
                reason,
                since: row
                    .try_get::<Option<i64>, _>("blocked_since")
                    .map_err(&get)?
                    .unwrap_or_default(),
            }),
            None => None,
        },
    })
}

const REQUEST_COLUMNS: &str = "id, node, process, source, created_at, state";

fn procedure_record(row: &PgRow) -> Result<ProcedureRecord> {
    let get = getter("reading a procedure");
    let json: String = row.try_get("spec").map_err(&get)?;
    ProcedureRecord::from_stored(&json, row.try_get("submitted_at").map_err(&get)?)
}

fn request_record(row: &PgRow) -> Result<RequestRecord> {
    let get = getter("reading a request");
    Ok(RequestRecord {
        id: row.try_get("id").map_err(&get)?,
        node: parse("requests.node", row.try_get("node").map_err(&get)?)?,
        process: parse("requests.process", row.try_get("process").map_err(&get)?)?,
        source: row.try_get("source").map_err(&get)?,
        created_at: row.try_get("created_at").map_err(&get)?,
        state: request_state(row.try_get("state").map_err(&get)?)?,
    })
}

/// The request that stands for `process` on `node`: its open one, or for a procedure any one
/// ever made (a procedure's request is made once per node).
async fn existing_request(
    conn: &mut PgConnection,
    node: &NodeName,
    process: &Process,
) -> Result<Option<PgRow>> {
    sqlx::query(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests WHERE node = $1 AND process = $2 \
         AND (state IN ('pending', 'active') OR process LIKE 'mop/%') \
         ORDER BY id DESC LIMIT 1"
    ))
    .bind(node.as_str())
    .bind(process.to_string())
    .fetch_optional(conn)
    .await
    .context("reading requests")
}

async fn fetch_node(conn: &mut PgConnection, node: &NodeName) -> Result<Option<NodeRecord>> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes n LEFT JOIN slots s ON s.holder = n.node \
         WHERE n.node = $1"
    );
    let row = sqlx::query(&sql)
        .bind(node.as_str())
        .fetch_optional(conn)
        .await
        .context("reading a node")?;
    row.as_ref().map(node_record).transpose()
}

/// The node's record, its row locked until the transaction ends, whether `session` is its
/// current unexpired session, and the database's "now" for every timestamp of the transaction.
struct Locked {
    record: NodeRecord,
    current: bool,
    now: Millis,
}

async fn lock_node(
    tx: &mut PgConnection,
    node: &NodeName,
    session: Option<&Session>,
) -> Result<Option<Locked>> {
    let sql = format!(
        "SELECT {NODE_COLUMNS}, rota_now_ms() AS now, EXISTS ( \
           SELECT 1 FROM sessions se WHERE se.id = n.session_id AND se.id = $2 \
             AND NOT se.superseded AND se.deadline > rota_now_ms()) AS current \
         FROM nodes n LEFT JOIN slots s ON s.holder = n.node WHERE n.node = $1 FOR UPDATE OF n"
    );
    let row = sqlx::query(&sql)
        .bind(node.as_str())
        .bind(session.map(|s| s.id))
        .fetch_optional(&mut *tx)
        .await
        .context("locking the node")?;
    let Some(row) = row else {
        return Ok(None);
    };
    let get = getter("locking the node");
    Ok(Some(Locked {
        record: node_record(&row)?,
        current: row.try_get("current").map_err(&get)?,
        now: row.try_get("now").map_err(&get)?,
    }))
}

/// What one window change does to the node's requests, history, backoff and slot: the
/// parameters of `rota_write_window` in the migrations.
struct WindowWrite {
    /// Requests in this state are the ones the change is about.
    from: RequestState,
    /// Where they move, or `None` when they stay (a failure that keeps its slot).
    to: Option<RequestState>,
    event: HistoryEvent,
    cause: Option<String>,
    /// Whether an entry is written for the node's process when no request was involved.
    fallback: bool,
    clears_backoff: bool,
    releases: bool,
    /// The normalised backoff policy of a failure: initial and maximum seconds, exponent.
    backoff: Option<(i64, i64, f64)>,
}

/// The node's `last_result` after a window change, if it sets one.
fn window_result(window: &WindowChange) -> Option<String> {
    match window {
        WindowChange::Finish => Some("finished".to_string()),
        WindowChange::Fail { cause, .. } => Some(format!("failed: {cause}")),
        WindowChange::Cancel { reason } => Some(format!("canceled: {reason}")),
        WindowChange::Postpone { reason } => Some(format!("postponed: {reason}")),
        _ => None,
    }
}

fn whole_seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// The writes of a window change, or `None` when it writes nothing beyond the node's row.
fn window_write(window: &WindowChange) -> Option<WindowWrite> {
    Some(match window {
        // The node's own row (and its place in the queue) is written with the transition.
        WindowChange::None | WindowChange::Queue { .. } => return None,
        WindowChange::Open | WindowChange::Join => WindowWrite {
            from: RequestState::Pending,
            to: Some(RequestState::Active),
            event: HistoryEvent::Started,
            cause: None,
            fallback: false,
            clears_backoff: false,
            releases: false,
            backoff: None,
        },
        WindowChange::Finish => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Done),
            event: HistoryEvent::Finished,
            cause: None,
            fallback: true,
            clears_backoff: true,
            releases: true,
            backoff: None,
        },
        WindowChange::Fail {
            cause,
            keep_slot,
            policy,
        } => {
            // rota_backoff_next computes BackoffPolicy::next of the normalised policy.
            let policy = policy.normalized();
            WindowWrite {
                from: RequestState::Active,
                to: (!keep_slot).then_some(RequestState::Pending),
                event: HistoryEvent::Failed,
                cause: Some(cause.clone()),
                fallback: true,
                clears_backoff: false,
                releases: !keep_slot,
                backoff: Some((
                    whole_seconds(policy.initial),
                    whole_seconds(policy.maximum),
                    policy.exponent,
                )),
            }
        }
        WindowChange::Cancel { reason } => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Canceled),
            event: HistoryEvent::Canceled,
            cause: Some(reason.clone()),
            fallback: true,
            clears_backoff: false,
            releases: true,
            backoff: None,
        },
        WindowChange::Postpone { reason } => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Pending),
            event: HistoryEvent::Postponed,
            cause: Some(reason.clone()),
            fallback: true,
            clears_backoff: false,
            releases: true,
            backoff: None,
        },
    })
}

/// A node write's outcome (`rota_node_write` in the migrations).
enum Written {
    Record(NodeRecord),
    /// The session is not current.
    Fenced,
    /// The node is in this state, not the one the write expected.
    Conflict(String),
    Missing,
    /// An operator's action does not apply to a node in this state.
    NotAllowed(NodeState),
}

fn written(row: &PgRow) -> Result<Written> {
    let get = getter("reading a write's outcome");
    let outcome: String = row.try_get("outcome").map_err(&get)?;
    let state = || -> Result<String> { row.try_get("state").map_err(&get) };
    Ok(match outcome.as_str() {
        "ok" => Written::Record(node_record(row)?),
        "fenced" => Written::Fenced,
        "conflict" => Written::Conflict(state()?),
        "missing" => Written::Missing,
        "not_allowed" => Written::NotAllowed(parse("nodes.state", state()?)?),
        _ => {
            return Err(Error::Corrupt {
                column: "rota_node_write.outcome",
                value: outcome,
                reason: "expected ok, fenced, conflict, missing or not_allowed".into(),
            });
        }
    })
}

/// Why a fenced write matched nothing: the session is gone, or the node is elsewhere.
async fn refusal(conn: &mut PgConnection, session: &Session, expected: NodeState) -> Error {
    match lock_node(conn, &session.node, Some(session)).await {
        Ok(Some(locked)) if locked.current => Error::Conflict {
            node: session.node.clone(),
            expected,
            actual: locked.record.state.to_string(),
        },
        Ok(_) => Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        },
        Err(e) => e,
    }
}

fn expect_node(record: Option<NodeRecord>, node: &NodeName) -> Result<NodeRecord> {
    record.ok_or_else(|| Error::NoSuchNode { node: node.clone() })
}

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let mut conn = self.connections.lease("opening a session").await?;
        let id: i64 = sqlx::query_scalar("SELECT rota_open_session($1, $2)")
            .bind(node.as_str())
            .bind(millis(ttl))
            .fetch_one(&mut *conn)
            .await
            .context("opening a session")?;
        conn.finish();
        Ok(Session {
            id,
            node: node.clone(),
        })
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        let mut conn = self.connections.lease("extending the session").await?;
        let extended = sqlx::query(
            "UPDATE sessions s SET deadline = rota_now_ms() + $3 FROM nodes n \
             WHERE s.id = $1 AND n.node = $2 AND n.session_id = s.id AND NOT s.superseded \
               AND s.deadline > rota_now_ms()",
        )
        .bind(session.id)
        .bind(session.node.as_str())
        .bind(millis(ttl))
        .execute(&mut *conn)
        .await
        .context("extending the session")?;
        if extended.rows_affected() > 0 {
            conn.finish();
            return Ok(());
        }
        let latest: Option<i64> = sqlx::query_scalar(
            "SELECT s.id FROM nodes n JOIN sessions s ON s.id = n.session_id \
             WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded",
        )
        .bind(session.node.as_str())
        .bind(session.id)
        .fetch_optional(&mut *conn)
        .await
        .context("checking the session")?;
        conn.finish();
        Err(Error::renewal_refused(session, latest.is_some()))
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        let mut conn = self.connections.lease("closing the session").await?;
        sqlx::query(
            "UPDATE sessions SET deadline = rota_now_ms() \
             WHERE id = $1 AND deadline > rota_now_ms()",
        )
        .bind(session.id)
        .execute(&mut *conn)
        .await
        .context("closing the session")?;
        conn.finish();
        Ok(())
    }

    async fn concurrency(&self) -> Result<Option<u32>> {
        let mut conn = self.connections.lease("reading the concurrency").await?;
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'concurrency'")
                .fetch_optional(&mut *conn)
                .await
                .context("reading the concurrency")?;
        conn.finish();
        value.map(|v| parse("rota_meta.concurrency", v)).transpose()
    }

    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        if !(1..=1000).contains(&concurrency) {
            return Err(Error::Concurrency { value: concurrency });
        }
        let mut conn = self.connections.lease("setting the concurrency").await?;
        let mut tx = conn.begin().await.context("setting the concurrency")?;
        sqlx::query(
            "INSERT INTO rota_meta (key, value) VALUES ('concurrency', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(concurrency.to_string())
        .execute(&mut *tx)
        .await
        .context("setting the concurrency")?;
        self.commit(tx, WAKE_ALL, "setting the concurrency").await?;
        conn.finish();
        Ok(())
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        // One call: the queue look, and the grant only for the front.
        let mut conn = self.connections.lease("acquiring a slot").await?;
        let granted: Option<i64> = sqlx::query_scalar("SELECT rota_acquire_slot($1, $2)")
            .bind(session.node.as_str())
            .bind(session.id)
            .fetch_one(&mut *conn)
            .await
            .context("acquiring a slot")?;
        conn.finish();
        match granted {
            None => Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            }),
            Some(wait) if wait < 0 => Ok(Acquire::Wait {
                changes: wait.unsigned_abs(),
            }),
            Some(slot) => u32::try_from(slot)
                .map(Acquire::Granted)
                .map_err(|e| Error::Corrupt {
                    column: "slots.slot",
                    value: slot.to_string(),
                    reason: e.to_string(),
                }),
        }
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let mut conn = self.connections.lease("checking slot ownership").await?;
        let slot: Option<i64> = sqlx::query_scalar(
            "UPDATE sessions s SET deadline = rota_now_ms() + $3 FROM nodes n, slots h \
             WHERE s.id = $1 AND n.node = $2 AND n.session_id = s.id AND h.holder = n.node \
               AND NOT s.superseded AND s.deadline > rota_now_ms() \
             RETURNING h.slot",
        )
        .bind(session.id)
        .bind(session.node.as_str())
        .bind(millis(ttl))
        .fetch_optional(&mut *conn)
        .await
        .context("checking slot ownership")?;
        conn.finish();
        slot_index(slot).ok_or_else(|| Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        })
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        let mut conn = self.connections.lease("reading slots").await?;
        let rows = sqlx::query("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
            .fetch_all(&mut *conn)
            .await
            .context("reading slots")?;
        conn.finish();
        rows.iter()
            .map(|row| {
                let get = getter("reading slots");
                Ok(SlotHolder {
                    slot: slot_index(row.try_get("slot").map_err(&get)?).unwrap_or(0),
                    node: parse("slots.holder", row.try_get("holder").map_err(&get)?)?,
                    acquired_at: row.try_get("acquired_at").map_err(&get)?,
                })
            })
            .collect()
    }

    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        // One statement: fenced by the session, and a no-op when the node already has an open
        // request for the process (the partial unique index decides, also between racers).
        let sql = format!(
            "INSERT INTO requests (node, process, source, created_at, state) \
             SELECT $1, $2, $3, rota_now_ms(), 'pending' WHERE EXISTS ( \
               SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
               WHERE n.node = $1 AND s.id = $4 AND NOT s.superseded \
                 AND s.deadline > rota_now_ms()) \
             ON CONFLICT DO NOTHING RETURNING {REQUEST_COLUMNS}"
        );
        let mut conn = self.connections.lease("recording a request").await?;
        let inserted = sqlx::query(&sql)
            .bind(session.node.as_str())
            .bind(process.to_string())
            .bind(source)
            .bind(session.id)
            .fetch_optional(&mut *conn)
            .await
            .context("recording a request")?;
        if let Some(row) = inserted {
            conn.finish();
            return Ok((request_record(&row)?, true));
        }
        let existing = existing_request(&mut conn, &session.node, process).await?;
        let refused = refusal(&mut conn, session, NodeState::Idle).await;
        if !matches!(refused, Error::Database { .. }) {
            conn.finish();
        }
        match existing {
            // Joining an open request still needs a current session.
            Some(row) if !matches!(refused, Error::Fenced { .. }) => {
                Ok((request_record(&row)?, false))
            }
            _ => Err(refused),
        }
    }

    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool> {
        const CONTEXT: &str = "recording why the node is blocked";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let mut tx = conn.begin().await.context(CONTEXT)?;
        let row = sqlx::query(
            "WITH current AS ( \
               SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
               WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded \
                 AND s.deadline > rota_now_ms() \
             ), changed AS ( \
               UPDATE nodes SET blocked_reason = $3, blocked_since = $4 \
               WHERE node = $1 AND blocked_reason IS DISTINCT FROM $3 \
                 AND EXISTS (SELECT 1 FROM current) RETURNING node) \
             SELECT EXISTS (SELECT 1 FROM current) AS current, \
               EXISTS (SELECT 1 FROM changed) AS changed",
        )
        .bind(session.node.as_str())
        .bind(session.id)
        .bind(blocked.map(|b| b.reason.as_str()))
        .bind(blocked.map(|b| b.since))
        .fetch_one(&mut *tx)
        .await
        .context(CONTEXT)?;
        let get = getter(CONTEXT);
        if !row.try_get::<bool, _>("current").map_err(&get)? {
            return Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            });
        }
        let changed: bool = row.try_get("changed").map_err(&get)?;
        // A node blocked no longer holds the queue up behind it.
        self.commit(tx, u64::from(changed), CONTEXT).await?;
        conn.finish();
        Ok(changed)
    }

    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        let mut conn = self.connections.lease("canceling a request").await?;
        let row = sqlx::query(
            "WITH current AS ( \
               SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
               WHERE n.node = $1 AND s.id = $2 AND NOT s.superseded \
                 AND s.deadline > rota_now_ms() \
             ), canceled AS ( \
               UPDATE requests SET state = 'canceled', finished_at = rota_now_ms() \
               WHERE node = $1 AND process = $3 AND state = 'pending' \
                 AND EXISTS (SELECT 1 FROM current) RETURNING id) \
             SELECT EXISTS (SELECT 1 FROM current) AS current, \
               (SELECT COUNT(*) FROM canceled) AS canceled",
        )
        .bind(session.node.as_str())
        .bind(session.id)
        .bind(process.to_string())
        .fetch_one(&mut *conn)
        .await
        .context("canceling a request")?;
        conn.finish();
        let get = getter("canceling a request");
        let current: bool = row.try_get("current").map_err(&get)?;
        if !current {
            return Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            });
        }
        let canceled: i64 = row.try_get("canceled").map_err(&get)?;
        Ok(canceled > 0)
    }

    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord> {
        const CONTEXT: &str = "completing a request";
        let node = &session.node;
        let mut conn = self.connections.lease(CONTEXT).await?;
        let mut tx = conn.begin().await.context(CONTEXT)?;
        let locked = lock_node(&mut tx, node, Some(session)).await?;
        if !locked.as_ref().is_some_and(|l| l.current) {
            return Err(Error::Fenced {
                node: node.clone(),
                session: session.id,
            });
        }
        if let (Outcome::Failed { .. }, Some(locked)) = (outcome, &locked)
            && locked.record.state != NodeState::Maintaining
        {
            return Err(Error::Conflict {
                node: node.clone(),
                expected: NodeState::Maintaining,
                actual: locked.record.state.to_string(),
            });
        }
        let (state, event, cause) = match outcome {
            Outcome::Succeeded { detail } => ("done", HistoryEvent::Finished, detail.as_deref()),
            Outcome::Failed { cause, .. } => ("active", HistoryEvent::Failed, Some(cause.as_str())),
        };
        let row = sqlx::query(&format!(
            "UPDATE requests SET state = $3, \
               finished_at = CASE WHEN $3 = 'done' THEN rota_now_ms() END \
             WHERE node = $1 AND process = $2 AND state = 'active' RETURNING {REQUEST_COLUMNS}"
        ))
        .bind(node.as_str())
        .bind(process.to_string())
        .bind(state)
        .fetch_optional(&mut *tx)
        .await
        .context(CONTEXT)?
        .ok_or_else(|| Error::NotActive {
            node: node.clone(),
            process: process.clone(),
        })?;
        match outcome {
            Outcome::Succeeded { .. } => {
                sqlx::query("DELETE FROM backoff WHERE node = $1 AND process = $2")
                    .bind(node.as_str())
                    .bind(process.to_string())
                    .execute(&mut *tx)
                    .await
                    .context(CONTEXT)?;
            }
            Outcome::Failed { cause, policy } => {
                let policy = policy.normalized();
                sqlx::query(
                    "INSERT INTO backoff (node, process, until, last_interval_s, cause) \
                     SELECT $1, $2, rota_now_ms() + next * 1000, next, $3 FROM ( \
                       SELECT rota_backoff_next( \
                         (SELECT last_interval_s FROM backoff WHERE node = $1 AND process = $2), \
                         $4, $5, $6) AS next) b \
                     ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
                       last_interval_s = excluded.last_interval_s, cause = excluded.cause",
                )
                .bind(node.as_str())
                .bind(process.to_string())
                .bind(cause)
                .bind(whole_seconds(policy.initial))
                .bind(whole_seconds(policy.maximum))
                .bind(policy.exponent)
                .execute(&mut *tx)
                .await
                .context(CONTEXT)?;
                // Fail closed in the same write: a failure recorded without it would let a
                // restarted agent start the next attempt instead of waiting for an operator.
                sqlx::query(
                    "UPDATE nodes SET last_result = $2, state = 'failed', since = rota_now_ms() \
                     WHERE node = $1",
                )
                .bind(node.as_str())
                .bind(format!("failed: {cause}"))
                .execute(&mut *tx)
                .await
                .context(CONTEXT)?;
            }
        }
        sqlx::query(
            "INSERT INTO history (node, process, event, at, cause, slot, released) \
             SELECT $1, $2, $3, rota_now_ms(), $4, (SELECT slot FROM slots WHERE holder = $1), \
               FALSE",
        )
        .bind(node.as_str())
        .bind(process.to_string())
        .bind(event.to_string())
        .bind(cause)
        .execute(&mut *tx)
        .await
        .context(CONTEXT)?;
        tx.commit().await.context(CONTEXT)?;
        conn.finish();
        request_record(&row)
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        spec.validate()?;
        let json = ProcedureRecord::stored_spec(spec)?;
        const CONTEXT: &str = "submitting a procedure";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let mut tx = conn.begin().await.context(CONTEXT)?;
        let inserted = sqlx::query(
            "INSERT INTO procedures (name, spec, submitted_at) VALUES ($1, $2, rota_now_ms()) \
             ON CONFLICT (name) DO NOTHING RETURNING spec, submitted_at",
        )
        .bind(&spec.name)
        .bind(&json)
        .fetch_optional(&mut *tx)
        .await
        .context(CONTEXT)?;
        let wakes = if inserted.is_some() {
            OPERATOR_WAKES
        } else {
            0
        };
        self.commit(tx, wakes, CONTEXT).await?;
        if let Some(row) = inserted {
            conn.finish();
            return Ok((procedure_record(&row)?, true));
        }
        let row = sqlx::query("SELECT spec, submitted_at FROM procedures WHERE name = $1")
            .bind(&spec.name)
            .fetch_one(&mut *conn)
            .await
            .context(CONTEXT)?;
        conn.finish();
        let existing = procedure_record(&row)?;
        if &existing.spec == spec {
            Ok((existing, false))
        } else {
            Err(Error::ProcedureConflict {
                name: spec.name.clone(),
            })
        }
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        let mut conn = self.connections.lease("reading procedures").await?;
        let rows = sqlx::query("SELECT spec, submitted_at FROM procedures ORDER BY seq")
            .fetch_all(&mut *conn)
            .await
            .context("reading procedures")?;
        conn.finish();
        rows.iter().map(procedure_record).collect()
    }

    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        let mut conn = self.connections.lease("reading requests").await?;
        let rows = sqlx::query(&format!(
            "SELECT {REQUEST_COLUMNS} FROM requests \
             WHERE node = $1 AND state IN ('pending', 'active') ORDER BY id"
        ))
        .bind(node.as_str())
        .fetch_all(&mut *conn)
        .await
        .context("reading requests")?;
        conn.finish();
        rows.iter().map(request_record).collect()
    }

    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        let mut conn = self.connections.lease("reading requests").await?;
        let rows = sqlx::query(&format!(
            "SELECT {REQUEST_COLUMNS} FROM requests ORDER BY id"
        ))
        .fetch_all(&mut *conn)
        .await
        .context("reading requests")?;
        conn.finish();
        rows.iter().map(request_record).collect()
    }

    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        // Taking a slot never lets another waiter go on (one free slot fewer, one waiter
        // ahead fewer); a release, or a waiter leaving the queue without one, may.
        let wakes = u64::from(
            transition.window.releases_slot()
                || (transition.from == NodeState::Queued && transition.to == NodeState::Idle),
        );
        let clears_process = matches!(transition.to, NodeState::Idle | NodeState::Queued);
        let f = &transition.fields;
        let queued_at = match &transition.window {
            WindowChange::Queue { queued_at } => Some(*queued_at),
            WindowChange::Open => Some(None),
            _ => None,
        };
        let window = window_write(&transition.window);
        let w = window.as_ref();
        let backoff = w.and_then(|w| w.backoff);
        let mut conn = self.connections.lease("recording a transition").await?;
        // With requests, migration 0010's overload also records them in the same call.
        let sql = if transition.requests.is_empty() {
            "SELECT * FROM rota_transition($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, \
             $29, $30, $31)"
        } else {
            "SELECT * FROM rota_transition($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, \
             $29, $30, $31, $32, $33)"
        };
        let mut query = sqlx::query(sql)
            .bind(session.node.as_str())
            .bind(session.id)
            .bind(transition.from.as_str())
            .bind(transition.to.as_str())
            .bind(clears_process)
            .bind(transition.process.as_ref().map(ToString::to_string))
            .bind(clears_process && f.cordoned_by_rota.is_none())
            .bind(f.pre_cordoned)
            .bind(f.cordoned_by_rota)
            .bind(f.boot_id.is_some())
            .bind(f.boot_id.clone().flatten())
            .bind(f.reboot_started_at.is_some())
            .bind(f.reboot_started_at.flatten())
            .bind(f.reboot_deadline.is_some())
            .bind(f.reboot_deadline.flatten())
            .bind(f.last_reboot_at)
            .bind(queued_at.is_some())
            .bind(queued_at.flatten())
            .bind(window_result(&transition.window))
            .bind(w.map(|w| w.from.as_str()))
            .bind(w.and_then(|w| w.to.map(RequestState::as_str)))
            .bind(w.map(|w| w.event.as_str()))
            .bind(w.and_then(|w| w.cause.as_deref()))
            .bind(
                w.filter(|w| w.fallback)
                    .map(|_| Process::Reboot.to_string()),
            )
            .bind(w.is_some_and(|w| w.clears_backoff))
            .bind(w.is_some_and(|w| w.releases))
            .bind(backoff.map(|b| b.0))
            .bind(backoff.map(|b| b.1))
            .bind(backoff.map(|b| b.2))
            .bind(CHANNEL)
            .bind(self.payload(wakes));
        if !transition.requests.is_empty() {
            let (processes, sources): (Vec<String>, Vec<&str>) = transition
                .requests
                .iter()
                .map(|(process, source)| (process.to_string(), source.as_str()))
                .unzip();
            query = query.bind(processes).bind(sources);
        }
        let row = query
            .fetch_one(&mut *conn)
            .await
            .context("recording a transition")?;
        conn.finish();
        match written(&row)? {
            Written::Record(record) => {
                self.woke(wakes);
                Ok(record)
            }
            Written::Conflict(actual) => Err(Error::Conflict {
                node: session.node.clone(),
                expected: transition.from,
                actual,
            }),
            // rota_transition refuses a write only as fenced or conflicting.
            _ => Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            }),
        }
    }

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        let mut conn = self.connections.lease("reading a node").await?;
        let record = fetch_node(&mut conn, node).await?;
        conn.finish();
        Ok(record)
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let sql = format!(
            "SELECT {NODE_COLUMNS} FROM nodes n LEFT JOIN slots s ON s.holder = n.node \
             ORDER BY n.node"
        );
        let mut conn = self.connections.lease("reading nodes").await?;
        let rows = sqlx::query(&sql)
            .fetch_all(&mut *conn)
            .await
            .context("reading nodes")?;
        conn.finish();
        rows.iter().map(node_record).collect()
    }

    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>> {
        let mut conn = self.connections.lease("reading backoff").await?;
        let rows = sqlx::query(
            "SELECT node, process, until, last_interval_s, cause FROM backoff WHERE node = $1 \
             ORDER BY process",
        )
        .bind(node.as_str())
        .fetch_all(&mut *conn)
        .await
        .context("reading backoff")?;
        conn.finish();
        rows.iter()
            .map(|row| {
                let get = getter("reading backoff");
                let secs: i64 = row.try_get("last_interval_s").map_err(&get)?;
                Ok(BackoffRecord {
                    node: parse("backoff.node", row.try_get("node").map_err(&get)?)?,
                    process: parse("backoff.process", row.try_get("process").map_err(&get)?)?,
                    until: row.try_get("until").map_err(&get)?,
                    last_interval: Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
                    cause: row.try_get("cause").map_err(&get)?,
                })
            })
            .collect()
    }

    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        let mut conn = self.connections.lease("reading history").await?;
        let rows = sqlx::query(
            "SELECT id, node, process, event, at, cause, slot, released FROM history \
             WHERE ($1::TEXT IS NULL OR node = $1) AND ($2::TEXT IS NULL OR process = $2) \
             AND ($3::TEXT IS NULL OR event = $3) AND ($4::BIGINT IS NULL OR at >= $4) \
             AND ($5::BIGINT IS NULL OR at <= $5) ORDER BY id",
        )
        .bind(filter.node.as_ref().map(NodeName::as_str))
        .bind(filter.process.as_ref().map(ToString::to_string))
        .bind(filter.event.map(HistoryEvent::as_str))
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&mut *conn)
        .await
        .context("reading history")?;
        conn.finish();
        rows.iter()
            .map(|row| {
                let get = getter("reading history");
                Ok(HistoryEntry {
                    id: row.try_get("id").map_err(&get)?,
                    node: parse("history.node", row.try_get("node").map_err(&get)?)?,
                    process: parse("history.process", row.try_get("process").map_err(&get)?)?,
                    event: parse("history.event", row.try_get("event").map_err(&get)?)?,
                    at: row.try_get("at").map_err(&get)?,
                    cause: row.try_get("cause").map_err(&get)?,
                    slot: slot_index(row.try_get("slot").map_err(&get)?),
                    released: row.try_get("released").map_err(&get)?,
                })
            })
            .collect()
    }

    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        let mut conn = self.connections.lease("unlocking a node").await?;
        let mut tx = conn.begin().await.context("unlocking a node")?;
        let locked = lock_node(&mut tx, node, None).await?;
        let Locked { record, now, .. } =
            locked.ok_or_else(|| Error::NoSuchNode { node: node.clone() })?;
        if record.slot.is_none() && !record.state.holds_slot() {
            return Err(Error::NotAllowed {
                node: node.clone(),
                state: record.state,
                action: "unlock",
                needs: "holds a slot",
            });
        }
        let window = WindowChange::Cancel {
            reason: format!("unlocked by an operator: {reason}"),
        };
        if let Some(w) = window_write(&window) {
            let fallback = record
                .process
                .as_ref()
                .map_or_else(|| Process::Reboot.to_string(), ToString::to_string);
            sqlx::query(
                "SELECT rota_write_window($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, NULL, \
                 $10)",
            )
            .bind(node.as_str())
            .bind(record.slot.map(i64::from))
            .bind(w.from.as_str())
            .bind(w.to.map(RequestState::as_str))
            .bind(w.event.as_str())
            .bind(w.cause.as_deref())
            .bind(w.fallback.then_some(fallback))
            .bind(w.clears_backoff)
            .bind(w.releases)
            .bind(now)
            .execute(&mut *tx)
            .await
            .context("recording the window")?;
        }
        sqlx::query(
            "UPDATE nodes SET state = 'idle', since = $1, process = NULL, queued_at = NULL, \
             last_result = $2 WHERE node = $3",
        )
        .bind(now)
        .bind(window_result(&window))
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .context("unlocking the node")?;
        let record = expect_node(fetch_node(&mut tx, node).await?, node)?;
        self.commit(tx, 1, "unlocking a node").await?;
        conn.finish();
        Ok(record)
    }

    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        let mut conn = self.connections.lease("retrying a node").await?;
        let row = sqlx::query("SELECT * FROM rota_retry($1, $2, $3)")
            .bind(node.as_str())
            .bind(CHANNEL)
            .bind(self.payload(1))
            .fetch_one(&mut *conn)
            .await
            .context("retrying a node")?;
        conn.finish();
        match written(&row)? {
            Written::Record(record) => {
                self.woke(1);
                Ok(record)
            }
            Written::NotAllowed(state) => Err(Error::NotAllowed {
                node: node.clone(),
                state,
                action: "retry",
                needs: "is failed",
            }),
            // rota_retry refuses only a missing node or one that is not failed.
            _ => Err(Error::NoSuchNode { node: node.clone() }),
        }
    }

    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        const CONTEXT: &str = "recording a request";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let mut tx = conn.begin().await.context(CONTEXT)?;
        let inserted = sqlx::query(&format!(
            "INSERT INTO requests (node, process, source, created_at, state) \
             SELECT $1, $2, $3, rota_now_ms(), 'pending' \
             WHERE EXISTS (SELECT 1 FROM nodes WHERE node = $1) \
             ON CONFLICT DO NOTHING RETURNING {REQUEST_COLUMNS}"
        ))
        .bind(node.as_str())
        .bind(process.to_string())
        .bind(source)
        .fetch_optional(&mut *tx)
        .await
        .context(CONTEXT)?;
        let wakes = if inserted.is_some() {
            OPERATOR_WAKES
        } else {
            0
        };
        self.commit(tx, wakes, CONTEXT).await?;
        if let Some(row) = inserted {
            conn.finish();
            return Ok((request_record(&row)?, true));
        }
        let existing = existing_request(&mut conn, node, process).await?;
        conn.finish();
        match existing {
            Some(row) => Ok((request_record(&row)?, false)),
            None => Err(Error::NoSuchNode { node: node.clone() }),
        }
    }

    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool> {
        const CONTEXT: &str = "canceling a request";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let mut tx = conn.begin().await.context(CONTEXT)?;
        let done = sqlx::query(
            "UPDATE requests SET state = 'canceled', finished_at = rota_now_ms() \
             WHERE node = $1 AND process = $2 AND state = 'pending'",
        )
        .bind(node.as_str())
        .bind(process.to_string())
        .execute(&mut *tx)
        .await
        .context(CONTEXT)?;
        let canceled = done.rows_affected() > 0;
        let wakes = if canceled { OPERATOR_WAKES } else { 0 };
        self.commit(tx, wakes, CONTEXT).await?;
        conn.finish();
        Ok(canceled)
    }

    async fn pause(&self, reason: &str) -> Result<Pause> {
        const CONTEXT: &str = "pausing the fleet";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let since: Millis = sqlx::query_scalar("SELECT rota_now_ms()")
            .fetch_one(&mut *conn)
            .await
            .context(CONTEXT)?;
        let pause = Pause {
            reason: reason.to_string(),
            since,
        };
        sqlx::query(
            "INSERT INTO rota_meta (key, value) VALUES ('paused', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(pause.encode())
        .execute(&mut *conn)
        .await
        .context(CONTEXT)?;
        conn.finish();
        Ok(pause)
    }

    async fn resume(&self) -> Result<Option<Pause>> {
        const CONTEXT: &str = "resuming the fleet";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let mut tx = conn.begin().await.context(CONTEXT)?;
        // A new rollout starts now, by the database's clock like every history entry.
        sqlx::query(
            "INSERT INTO rota_meta (key, value) VALUES ('resumed_at', rota_now_ms()::TEXT) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .execute(&mut *tx)
        .await
        .context(CONTEXT)?;
        let value: Option<String> =
            sqlx::query_scalar("DELETE FROM rota_meta WHERE key = 'paused' RETURNING value")
                .fetch_optional(&mut *tx)
                .await
                .context(CONTEXT)?;
        // Every waiter may go on now.
        self.commit(tx, WAKE_ALL, CONTEXT).await?;
        conn.finish();
        Pause::decode("rota_meta.paused", value.as_deref())
    }

    async fn paused(&self) -> Result<Option<Pause>> {
        let mut conn = self.connections.lease("reading the pause").await?;
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'paused'")
                .fetch_optional(&mut *conn)
                .await
                .context("reading the pause")?;
        conn.finish();
        Pause::decode("rota_meta.paused", value.as_deref())
    }

    async fn resumed_at(&self) -> Result<Option<Millis>> {
        const CONTEXT: &str = "reading the last resume";
        let mut conn = self.connections.lease(CONTEXT).await?;
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'resumed_at'")
                .fetch_optional(&mut *conn)
                .await
                .context(CONTEXT)?;
        conn.finish();
        decode_resumed_at("rota_meta.resumed_at", value.as_deref())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(
            redact("postgres://rota:secret@db:5432/rota"),
            "postgres://rota:***@db:5432/rota"
        );
        assert_eq!(
            redact("postgres://rota@127.0.0.1/rota"),
            "postgres://rota@127.0.0.1/rota"
        );
        assert_eq!(redact("postgresql://db/rota"), "postgresql://db/rota");
    }
}

//! The store for bare-metal fleets: one PostgreSQL database shared by every host's agent.
//!
//! Exclusion comes from row locks, never from a check followed by an insert: every write that
//! reads a node's state before changing it first locks the node's row (`FOR UPDATE`), which is
//! also what `open_session` locks to supersede a session, so a fenced write and a new session
//! are strictly ordered; slot grants additionally take one transaction-scoped advisory lock, so
//! that the queue check and the choice of a free slot see every grant before them. The primary
//! and unique keys on `slots` would still refuse a double grant if a check were ever wrong.
//!
//! "Now" is always the database's clock (`rota_now_ms()`), and session deadlines are checked
//! inside the writing statement, so an agent whose session expired cannot write however far
//! its own clock drifts.
//!
//! [`Store::changes`] follows `NOTIFY rota_changes` sent inside every wake-worthy write, so
//! waiting agents on every host learn of a released slot when it commits, without polling.

use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{BackoffPolicy, HistoryEvent, NodeName, NodeState, Process};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{PgConnection, Postgres, Row, Transaction};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, BackoffRecord, HistoryEntry, HistoryFilter, Millis, NodeRecord, RequestRecord,
    RequestState, Session, SlotHolder, Transition, WindowChange,
};
use crate::store::Store;

/// A new concurrency may free any number of slots: wake every waiter (as the SQLite store).
const CONCURRENCY_CHANGED: u64 = 1 << 32;

/// The channel every wake-worthy write notifies; the payload is `ORIGIN:WAKES`.
const CHANNEL: &str = "rota_changes";

/// The advisory lock that orders slot grants (the ASCII of "rotaslot"), taken by
/// `rota_grant_slot` in the migration.
const SLOT_LOCK: i64 = 0x726f_7461_736c_6f74;

/// Connections per handle: enough for one agent's concurrent calls and for benchmarks that
/// share one handle between many sessions; an idle agent holds only the few it uses.
const MAX_CONNECTIONS: u32 = 32;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// A [`Store`] in a PostgreSQL database. Clones share the pool, the change counter and the
/// listener.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
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
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
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
            pool,
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

    async fn begin(&self, context: &'static str) -> Result<Transaction<'static, Postgres>> {
        self.pool.begin().await.context(context)
    }

    /// Notifies every listener of `wakes` inside the transaction (delivered only if it commits),
    /// commits, and counts the wakes for this handle's own waiters.
    async fn commit(
        &self,
        mut tx: Transaction<'static, Postgres>,
        wakes: u64,
        context: &'static str,
    ) -> Result<()> {
        if wakes > 0 {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(format!("{}:{wakes}", self.origin))
                .execute(&mut *tx)
                .await
                .context(context)?;
        }
        tx.commit().await.context(context)?;
        self.woke(wakes);
        Ok(())
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
    loop {
        match listener.try_recv().await {
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
                changes.send_modify(|n| *n = n.wrapping_add(CONCURRENCY_CHANGED));
            }
            Err(e) => {
                warn!(error = %e, "the change listener cannot reconnect; retrying in a second");
                changes.send_modify(|n| *n = n.wrapping_add(CONCURRENCY_CHANGED));
                tokio::time::sleep(Duration::from_secs(1)).await;
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
    n.queued_at, n.last_result, s.slot";

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
    })
}

const REQUEST_COLUMNS: &str = "id, node, process, source, created_at, state";

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

/// What one window change does to the node's requests, history and slot.
struct WindowWrite<'a> {
    /// Requests in this state are the ones the change is about.
    from: RequestState,
    /// Where they move, or `None` when they stay (a failure that keeps its slot).
    to: Option<RequestState>,
    event: HistoryEvent,
    cause: Option<&'a str>,
    /// The history entry to write when no request was involved, if any.
    fallback: Option<&'a str>,
    clears_backoff: bool,
    releases: bool,
}

/// Applies one window change in a single statement: moves the requests, clears their backoff,
/// frees the slot, and appends one history entry per request (the last one carries
/// `released`). Returns the processes that got an entry, in order.
async fn write_window(
    tx: &mut PgConnection,
    record: &NodeRecord,
    w: WindowWrite<'_>,
    now: Millis,
) -> Result<Vec<String>> {
    let finished =
        w.to.filter(|to| matches!(to, RequestState::Done | RequestState::Canceled))
            .map(|_| now);
    sqlx::query_scalar(
        "WITH moved AS ( \
           UPDATE requests SET state = $3, finished_at = $4 \
           WHERE node = $1 AND state = $2 AND $3::TEXT IS NOT NULL RETURNING id, process \
         ), kept AS ( \
           SELECT id, process FROM requests WHERE node = $1 AND state = $2 AND $3::TEXT IS NULL \
         ), picked AS ( \
           SELECT id, process FROM moved UNION ALL SELECT id, process FROM kept \
         ), entries AS ( \
           SELECT id, process FROM picked \
           UNION ALL SELECT 0, $5 WHERE $5::TEXT IS NOT NULL AND NOT EXISTS (SELECT 1 FROM picked) \
         ), cleared AS ( \
           DELETE FROM backoff WHERE $6 AND node = $1 AND process IN (SELECT process FROM moved) \
         ), freed AS ( \
           DELETE FROM slots WHERE $7 AND holder = $1 \
         ) \
         INSERT INTO history (node, process, event, at, cause, slot, released) \
         SELECT $1, process, $8, $9, $10, $11, \
           $7 AND row_number() OVER (ORDER BY id) = count(*) OVER () \
         FROM entries ORDER BY id RETURNING process",
    )
    .bind(record.node.as_str())
    .bind(w.from.as_str())
    .bind(w.to.map(RequestState::as_str))
    .bind(finished)
    .bind(w.fallback)
    .bind(w.clears_backoff)
    .bind(w.releases)
    .bind(w.event.as_str())
    .bind(now)
    .bind(w.cause)
    .bind(record.slot.map(i64::from))
    .fetch_all(&mut *tx)
    .await
    .context("recording the window")
}

async fn record_backoff(
    tx: &mut PgConnection,
    node: &NodeName,
    process: &str,
    policy: &BackoffPolicy,
    cause: &str,
    now: Millis,
) -> Result<()> {
    let previous: Option<i64> =
        sqlx::query_scalar("SELECT last_interval_s FROM backoff WHERE node = $1 AND process = $2")
            .bind(node.as_str())
            .bind(process)
            .fetch_optional(&mut *tx)
            .await
            .context("reading backoff")?;
    let previous = previous.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    let next_s = i64::try_from(policy.next(previous).as_secs()).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO backoff (node, process, until, last_interval_s, cause) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (node, process) DO UPDATE SET until = excluded.until, \
         last_interval_s = excluded.last_interval_s, cause = excluded.cause",
    )
    .bind(node.as_str())
    .bind(process)
    .bind(now.saturating_add(next_s.saturating_mul(1000)))
    .bind(next_s)
    .bind(cause)
    .execute(&mut *tx)
    .await
    .context("recording backoff")?;
    Ok(())
}

/// The node's `last_result` after a window change, if it sets one.
fn window_result(window: &WindowChange) -> Option<String> {
    match window {
        WindowChange::Finish => Some("finished".to_string()),
        WindowChange::Fail { cause, .. } => Some(format!("failed: {cause}")),
        WindowChange::Cancel { reason } => Some(format!("canceled: {reason}")),
        _ => None,
    }
}

/// Applies a window change inside the transition's transaction (the node's row is locked).
async fn apply_window(
    tx: &mut PgConnection,
    record: &NodeRecord,
    window: &WindowChange,
    now: Millis,
) -> Result<()> {
    let fallback = record
        .process
        .as_ref()
        .map_or_else(|| Process::Reboot.to_string(), ToString::to_string);
    let write = match window {
        // The node's own row (and its place in the queue) is written by `update_node`.
        WindowChange::None | WindowChange::Queue { .. } => return Ok(()),
        WindowChange::Open | WindowChange::Join => WindowWrite {
            from: RequestState::Pending,
            to: Some(RequestState::Active),
            event: HistoryEvent::Started,
            cause: None,
            fallback: None,
            clears_backoff: false,
            releases: false,
        },
        WindowChange::Finish => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Done),
            event: HistoryEvent::Finished,
            cause: None,
            fallback: Some(&fallback),
            clears_backoff: true,
            releases: true,
        },
        WindowChange::Fail {
            cause, keep_slot, ..
        } => WindowWrite {
            from: RequestState::Active,
            to: (!keep_slot).then_some(RequestState::Pending),
            event: HistoryEvent::Failed,
            cause: Some(cause),
            fallback: Some(&fallback),
            clears_backoff: false,
            releases: !keep_slot,
        },
        WindowChange::Cancel { reason } => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Canceled),
            event: HistoryEvent::Canceled,
            cause: Some(reason),
            fallback: Some(&fallback),
            clears_backoff: false,
            releases: true,
        },
    };
    let processes = write_window(tx, record, write, now).await?;
    if let WindowChange::Fail { cause, policy, .. } = window {
        for process in &processes {
            record_backoff(tx, &record.node, process, policy, cause, now).await?;
        }
    }
    Ok(())
}

/// The fenced compare-and-swap at the heart of every transition: one statement that updates
/// the node only if it is in `transition.from` and `session` is current (by the database's
/// clock), returning the new record, or `None` when either check failed. `now` is the
/// transaction's time when the caller already has one.
async fn update_node(
    conn: &mut PgConnection,
    session: &Session,
    transition: &Transition,
    now: Option<Millis>,
) -> Result<Option<NodeRecord>> {
    let clears_process = matches!(transition.to, NodeState::Idle | NodeState::Queued);
    let process = transition.process.as_ref().map(ToString::to_string);
    let f = &transition.fields;
    let resets_cordon = clears_process && f.cordoned_by_rota.is_none();
    let queued_at = match &transition.window {
        WindowChange::Queue { queued_at } => Some(*queued_at),
        WindowChange::Open => Some(None),
        _ => None,
    };
    let row = sqlx::query(
        "UPDATE nodes SET state = $1, since = COALESCE($2, rota_now_ms()), \
         process = CASE WHEN $3 THEN NULL ELSE COALESCE($4, process) END, \
         pre_cordoned = CASE WHEN $5 THEN FALSE ELSE COALESCE($6, pre_cordoned) END, \
         cordoned_by_rota = CASE WHEN $5 THEN FALSE ELSE COALESCE($7, cordoned_by_rota) END, \
         boot_id = CASE WHEN $8 THEN $9 ELSE boot_id END, \
         reboot_started_at = CASE WHEN $10 THEN $11 ELSE reboot_started_at END, \
         reboot_deadline = CASE WHEN $12 THEN $13 ELSE reboot_deadline END, \
         last_reboot_at = COALESCE($14, last_reboot_at), \
         queued_at = CASE WHEN $15 THEN $16 ELSE queued_at END, \
         last_result = COALESCE($20, last_result) \
         WHERE node = $17 AND state = $18 AND session_id = $19 AND EXISTS ( \
           SELECT 1 FROM sessions s WHERE s.id = $19 AND NOT s.superseded \
             AND s.deadline > rota_now_ms()) \
         RETURNING node, state, since, process, pre_cordoned, cordoned_by_rota, boot_id, \
           reboot_started_at, reboot_deadline, last_reboot_at, queued_at, last_result, \
           (SELECT slot FROM slots WHERE holder = $17) AS slot",
    )
    .bind(transition.to.as_str())
    .bind(now)
    .bind(clears_process)
    .bind(process)
    .bind(resets_cordon)
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
    .bind(session.node.as_str())
    .bind(transition.from.as_str())
    .bind(session.id)
    .bind(window_result(&transition.window))
    .fetch_optional(&mut *conn)
    .await
    .context("updating the node")?;
    row.as_ref().map(node_record).transpose()
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

/// Where a node stands in the queue, and the slot it holds.
struct Turn {
    held: Option<u32>,
    /// Wake-ups of `Store::changes` needed at least before the node can take a slot (0: now),
    /// by the SQLite store's fairness rule (`rota_changes_before_turn` in the migration).
    changes: u64,
}

async fn turn(conn: &mut PgConnection, node: &NodeName) -> Result<Turn> {
    let row = sqlx::query(
        "SELECT (SELECT slot FROM slots WHERE holder = $1) AS held, \
           rota_changes_before_turn($1, rota_now_ms()) AS changes",
    )
    .bind(node.as_str())
    .fetch_one(&mut *conn)
    .await
    .context("reading the queue")?;
    let get = getter("reading the queue");
    let changes: Option<i64> = row.try_get("changes").map_err(&get)?;
    Ok(Turn {
        held: slot_index(row.try_get("held").map_err(&get)?),
        // No such node: it waits like any node that is not queued.
        changes: changes.map_or(1, |c| u64::try_from(c).unwrap_or(0)),
    })
}

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let mut tx = self.begin("opening a session").await?;
        // The node's row first, as every fenced write locks it: a write of the old session
        // either commits before the new session exists or sees it and is refused.
        sqlx::query("SELECT 1 FROM nodes WHERE node = $1 FOR UPDATE")
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("locking the node")?;
        sqlx::query("UPDATE sessions SET superseded = TRUE WHERE node = $1 AND NOT superseded")
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("superseding old sessions")?;
        let id: i64 = sqlx::query_scalar(
            "WITH new AS ( \
               INSERT INTO sessions (node, started_at, deadline) \
               SELECT $1, t.now, t.now + $2 FROM (SELECT rota_now_ms() AS now) t \
               RETURNING id, started_at) \
             INSERT INTO nodes (node, session_id, state, since) \
             SELECT $1, id, 'idle', started_at FROM new \
             ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id \
             RETURNING session_id",
        )
        .bind(node.as_str())
        .bind(millis(ttl))
        .fetch_one(&mut *tx)
        .await
        .context("creating a session")?;
        self.commit(tx, 0, "opening a session").await?;
        Ok(Session {
            id,
            node: node.clone(),
        })
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        let extended = sqlx::query(
            "UPDATE sessions s SET deadline = rota_now_ms() + $3 FROM nodes n \
             WHERE s.id = $1 AND n.node = $2 AND n.session_id = s.id AND NOT s.superseded \
               AND s.deadline > rota_now_ms()",
        )
        .bind(session.id)
        .bind(session.node.as_str())
        .bind(millis(ttl))
        .execute(&self.pool)
        .await
        .context("extending the session")?;
        if extended.rows_affected() == 0 {
            return Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            });
        }
        Ok(())
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        sqlx::query(
            "UPDATE sessions SET deadline = rota_now_ms() \
             WHERE id = $1 AND deadline > rota_now_ms()",
        )
        .bind(session.id)
        .execute(&self.pool)
        .await
        .context("closing the session")?;
        Ok(())
    }

    async fn concurrency(&self) -> Result<Option<u32>> {
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'concurrency'")
                .fetch_optional(&self.pool)
                .await
                .context("reading the concurrency")?;
        value.map(|v| parse("rota_meta.concurrency", v)).transpose()
    }

    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        if !(1..=1000).contains(&concurrency) {
            return Err(Error::Concurrency { value: concurrency });
        }
        let mut tx = self.begin("setting the concurrency").await?;
        sqlx::query(
            "INSERT INTO rota_meta (key, value) VALUES ('concurrency', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(concurrency.to_string())
        .execute(&mut *tx)
        .await
        .context("setting the concurrency")?;
        self.commit(tx, CONCURRENCY_CHANGED, "setting the concurrency")
            .await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        // A read-only look first: waiters that are not at the front of the queue never take the
        // grant lock, so a release does not set off a stampede of write transactions.
        let mut conn = self.pool.acquire().await.context("acquiring a slot")?;
        let turn = turn(&mut conn, &session.node).await?;
        if turn.held.is_none() && turn.changes > 0 {
            return Ok(Acquire::Wait {
                changes: turn.changes,
            });
        }
        // One statement: the grant lock is held only while the server runs it.
        let granted: Option<i64> = sqlx::query_scalar("SELECT rota_grant_slot($1, $2, $3)")
            .bind(session.node.as_str())
            .bind(session.id)
            .bind(SLOT_LOCK)
            .fetch_one(&mut *conn)
            .await
            .context("acquiring a slot")?;
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
        let slot: Option<i64> = sqlx::query_scalar(
            "UPDATE sessions s SET deadline = rota_now_ms() + $3 FROM nodes n, slots h \
             WHERE s.id = $1 AND n.node = $2 AND n.session_id = s.id AND h.holder = n.node \
               AND NOT s.superseded AND s.deadline > rota_now_ms() \
             RETURNING h.slot",
        )
        .bind(session.id)
        .bind(session.node.as_str())
        .bind(millis(ttl))
        .fetch_optional(&self.pool)
        .await
        .context("checking slot ownership")?;
        slot_index(slot).ok_or_else(|| Error::Fenced {
            node: session.node.clone(),
            session: session.id,
        })
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        let rows = sqlx::query("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
            .fetch_all(&self.pool)
            .await
            .context("reading slots")?;
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
             ON CONFLICT (node, process) WHERE state IN ('pending', 'active') DO NOTHING \
             RETURNING {REQUEST_COLUMNS}"
        );
        let mut conn = self.pool.acquire().await.context("recording a request")?;
        let inserted = sqlx::query(&sql)
            .bind(session.node.as_str())
            .bind(process.to_string())
            .bind(source)
            .bind(session.id)
            .fetch_optional(&mut *conn)
            .await
            .context("recording a request")?;
        if let Some(row) = inserted {
            return Ok((request_record(&row)?, true));
        }
        let existing = sqlx::query(&format!(
            "SELECT {REQUEST_COLUMNS} FROM requests WHERE node = $1 AND process = $2 \
             AND state IN ('pending', 'active')"
        ))
        .bind(session.node.as_str())
        .bind(process.to_string())
        .fetch_optional(&mut *conn)
        .await
        .context("reading requests")?;
        let refused = refusal(&mut conn, session, NodeState::Idle).await;
        match existing {
            // Joining an open request still needs a current session.
            Some(row) if !matches!(refused, Error::Fenced { .. }) => {
                Ok((request_record(&row)?, false))
            }
            _ => Err(refused),
        }
    }

    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
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
        .fetch_one(&self.pool)
        .await
        .context("canceling a request")?;
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

    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {REQUEST_COLUMNS} FROM requests \
             WHERE node = $1 AND state IN ('pending', 'active') ORDER BY id"
        ))
        .bind(node.as_str())
        .fetch_all(&self.pool)
        .await
        .context("reading requests")?;
        rows.iter().map(request_record).collect()
    }

    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {REQUEST_COLUMNS} FROM requests ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await
        .context("reading requests")?;
        rows.iter().map(request_record).collect()
    }

    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        // Taking a slot never lets another waiter go on (one free slot fewer, one waiter
        // ahead fewer); a release, or a waiter leaving the queue without one, may.
        let wakes = u64::from(
            transition.window.releases_slot()
                || (transition.from == NodeState::Queued && transition.to == NodeState::Idle),
        );
        if wakes == 0
            && matches!(
                transition.window,
                WindowChange::None | WindowChange::Queue { .. }
            )
        {
            // A step that touches only the node's row and wakes nobody is one statement: no
            // explicit transaction, one round trip.
            let mut conn = self
                .pool
                .acquire()
                .await
                .context("recording a transition")?;
            return match update_node(&mut conn, session, &transition, None).await? {
                Some(record) => Ok(record),
                None => Err(refusal(&mut conn, session, transition.from).await),
            };
        }
        let mut tx = self.begin("recording a transition").await?;
        let Some(locked) = lock_node(&mut tx, &session.node, Some(session)).await? else {
            return Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            });
        };
        if !locked.current {
            return Err(Error::Fenced {
                node: session.node.clone(),
                session: session.id,
            });
        }
        if locked.record.state != transition.from {
            return Err(Error::Conflict {
                node: session.node.clone(),
                expected: transition.from,
                actual: locked.record.state.to_string(),
            });
        }
        apply_window(&mut tx, &locked.record, &transition.window, locked.now).await?;
        let Some(updated) = update_node(&mut tx, session, &transition, Some(locked.now)).await?
        else {
            return Err(refusal(&mut tx, session, transition.from).await);
        };
        self.commit(tx, wakes, "recording a transition").await?;
        Ok(updated)
    }

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        let mut conn = self.pool.acquire().await.context("reading a node")?;
        fetch_node(&mut conn, node).await
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let sql = format!(
            "SELECT {NODE_COLUMNS} FROM nodes n LEFT JOIN slots s ON s.holder = n.node \
             ORDER BY n.node"
        );
        let rows = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .context("reading nodes")?;
        rows.iter().map(node_record).collect()
    }

    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>> {
        let rows = sqlx::query(
            "SELECT node, process, until, last_interval_s, cause FROM backoff WHERE node = $1 \
             ORDER BY process",
        )
        .bind(node.as_str())
        .fetch_all(&self.pool)
        .await
        .context("reading backoff")?;
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
        .fetch_all(&self.pool)
        .await
        .context("reading history")?;
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
        let mut tx = self.begin("unlocking a node").await?;
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
        apply_window(&mut tx, &record, &window, now).await?;
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
        Ok(record)
    }

    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        let mut tx = self.begin("retrying a node").await?;
        let locked = lock_node(&mut tx, node, None).await?;
        let Locked { record, now, .. } =
            locked.ok_or_else(|| Error::NoSuchNode { node: node.clone() })?;
        if record.state != NodeState::Failed {
            return Err(Error::NotAllowed {
                node: node.clone(),
                state: record.state,
                action: "retry",
                needs: "is failed",
            });
        }
        sqlx::query("UPDATE nodes SET state = 'maintaining', since = $1 WHERE node = $2")
            .bind(now)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("retrying the node")?;
        let record = expect_node(fetch_node(&mut tx, node).await?, node)?;
        self.commit(tx, 1, "retrying a node").await?;
        Ok(record)
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

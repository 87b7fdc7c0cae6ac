//! The embedded default store: one SQLite file, shared by every agent on the host.
//!
//! Writes run in `BEGIN IMMEDIATE` transactions, so SQLite's single-writer lock serialises
//! every read-check-write across processes; the primary and unique keys on `slots` make a
//! double grant impossible even if a check were wrong. Inside one process a mutex queues the
//! writers first, so they wait on each other without SQLite's sleeping busy handler.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Row, SqliteConnection};
use tokio::sync::{Mutex, OwnedMutexGuard, watch};

use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, BackoffRecord, HistoryEntry, HistoryFilter, Millis, NodeRecord, RequestRecord,
    RequestState, Session, SlotHolder, Transition, WindowChange, now_millis,
};
use crate::store::Store;

/// A new concurrency may free any number of slots: wake every waiter.
const CONCURRENCY_CHANGED: u64 = 1 << 32;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// A [`Store`] in one SQLite file. Reads share a pool; writes go through one connection of
/// their own, so that a writer never waits for a reader to hand a connection back. Clones
/// share both and the change counter.
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
    writer: Arc<Mutex<WriteConnection>>,
    changes: Arc<watch::Sender<u64>>,
}

/// The write connection, and whether a transaction is open on it: a writer canceled halfway
/// leaves one open, which the next writer rolls back before it starts.
struct WriteConnection {
    conn: SqliteConnection,
    in_transaction: bool,
}

impl WriteConnection {
    async fn ready(&mut self) -> Result<&mut SqliteConnection> {
        if self.in_transaction {
            sqlx::query("ROLLBACK")
                .execute(&mut self.conn)
                .await
                .context("rolling back an abandoned write")?;
            self.in_transaction = false;
        }
        Ok(&mut self.conn)
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and applies migrations. A file that
    /// is not SQLite, a SQLite file that is not rota's, or a schema newer than this binary are
    /// refused without changing anything.
    pub async fn open(path: &Path) -> Result<SqliteStore> {
        let location = path.display().to_string();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.is_dir()
        {
            return Err(Error::Url {
                url: location,
                reason: format!("directory {} does not exist", parent.display()),
            });
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options.clone())
            .await
            .map_err(|e| Error::NotRota {
                location: location.clone(),
                reason: e.to_string(),
            })?;
        migrate(&pool, &location).await?;
        let conn = options
            .connect()
            .await
            .context("opening the write connection")?;
        let (changes, _) = watch::channel(0);
        Ok(SqliteStore {
            pool,
            path: path.to_path_buf(),
            writer: Arc::new(Mutex::new(WriteConnection {
                conn,
                in_transaction: false,
            })),
            changes: Arc::new(changes),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn begin(&self, context: &'static str) -> Result<OwnedMutexGuard<WriteConnection>> {
        let mut writer = self.writer.clone().lock_owned().await;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(writer.ready().await?)
            .await
            .context(context)?;
        writer.in_transaction = true;
        Ok(writer)
    }

    async fn commit(
        &self,
        mut writer: OwnedMutexGuard<WriteConnection>,
        wakes: u64,
        context: &'static str,
    ) -> Result<()> {
        sqlx::query("COMMIT")
            .execute(&mut writer.conn)
            .await
            .context(context)?;
        writer.in_transaction = false;
        self.woke(wakes);
        Ok(())
    }

    /// Moves the change counter on by `wakes` (see `Store::changes`).
    fn woke(&self, wakes: u64) {
        if wakes > 0 {
            self.changes.send_modify(|n| *n = n.wrapping_add(wakes));
        }
    }
}

fn typed<T>(result: Result<T>) -> Result<T> {
    result
}

/// Runs `$body` (which may `return` early) in one `BEGIN IMMEDIATE` transaction bound to `$tx`,
/// and commits it when the body succeeded; an error rolls everything back.
macro_rules! write_tx {
    ($store:expr, $context:expr, |$tx:ident| $body:block) => {
        write_tx!($store, $context, wakes: 0, |$tx| $body)
    };
    ($store:expr, $context:expr, wakes: $wakes:expr, |$tx:ident| $body:block) => {{
        let mut writer = $store.begin($context).await?;
        let value = {
            let $tx: &mut SqliteConnection = &mut writer.conn;
            typed(async move $body.await)
        };
        match value {
            Ok(value) => {
                $store.commit(writer, $wakes, $context).await?;
                Ok(value)
            }
            Err(e) => {
                // Rolled back by the next writer if this fails too.
                if sqlx::query("ROLLBACK").execute(&mut writer.conn).await.is_ok() {
                    writer.in_transaction = false;
                }
                Err(e)
            }
        }
    }};
}

/// Applies the migrations. Two processes opening a new file at once both try to; the loser's
/// attempt fails on the winner's tables and simply runs again, finding them applied.
async fn migrate(pool: &SqlitePool, location: &str) -> Result<()> {
    const ATTEMPTS: u32 = 5;
    let mut attempt = 1;
    loop {
        check_is_rota(pool, location).await?;
        match MIGRATOR.run(pool).await {
            Ok(()) => return Ok(()),
            Err(_) if attempt < ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(Error::NotRota {
                    location: location.to_string(),
                    reason: format!("migration failed: {e}"),
                });
            }
        }
    }
}

async fn check_is_rota(pool: &SqlitePool, location: &str) -> Result<()> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )
    .fetch_all(pool)
    .await
    .map_err(|e| Error::NotRota {
        location: location.to_string(),
        reason: e.to_string(),
    })?;
    // Only the migrations table: another process is creating the schema right now.
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
        .context("reading the schema version")?;
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

const NODE_COLUMNS: &str = "n.node, n.state, n.since, n.process, n.pre_cordoned, \
    n.cordoned_by_rota, n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, \
    n.queued_at, n.last_result, s.slot";

fn node_record(row: &SqliteRow) -> Result<NodeRecord> {
    let get = |e: sqlx::Error| Error::Database {
        context: "reading a node",
        source: e,
    };
    Ok(NodeRecord {
        node: parse("nodes.node", row.try_get("node").map_err(get)?)?,
        state: parse("nodes.state", row.try_get("state").map_err(get)?)?,
        since: row.try_get("since").map_err(get)?,
        process: row
            .try_get::<Option<String>, _>("process")
            .map_err(get)?
            .map(|p| parse("nodes.process", p))
            .transpose()?,
        slot: slot_index(row.try_get("slot").map_err(get)?),
        pre_cordoned: row.try_get("pre_cordoned").map_err(get)?,
        cordoned_by_rota: row.try_get("cordoned_by_rota").map_err(get)?,
        boot_id: row.try_get("boot_id").map_err(get)?,
        reboot_started_at: row.try_get("reboot_started_at").map_err(get)?,
        reboot_deadline: row.try_get("reboot_deadline").map_err(get)?,
        last_reboot_at: row.try_get("last_reboot_at").map_err(get)?,
        queued_at: row.try_get("queued_at").map_err(get)?,
        last_result: row.try_get("last_result").map_err(get)?,
    })
}

fn request_record(row: &SqliteRow) -> Result<RequestRecord> {
    let get = |e: sqlx::Error| Error::Database {
        context: "reading a request",
        source: e,
    };
    Ok(RequestRecord {
        id: row.try_get("id").map_err(get)?,
        node: parse("requests.node", row.try_get("node").map_err(get)?)?,
        process: parse("requests.process", row.try_get("process").map_err(get)?)?,
        source: row.try_get("source").map_err(get)?,
        created_at: row.try_get("created_at").map_err(get)?,
        state: request_state(row.try_get("state").map_err(get)?)?,
    })
}

async fn fetch_node(
    conn: &mut sqlx::SqliteConnection,
    node: &NodeName,
) -> Result<Option<NodeRecord>> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes n LEFT JOIN slots s ON s.holder = n.node WHERE n.node = ?"
    );
    let row = sqlx::query(&sql)
        .bind(node.as_str())
        .fetch_optional(conn)
        .await
        .context("reading a node")?;
    row.as_ref().map(node_record).transpose()
}

/// Refuses the write unless `session` is its node's current, unexpired session.
async fn check_session(tx: &mut SqliteConnection, session: &Session) -> Result<()> {
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

async fn held_slot(tx: &mut SqliteConnection, node: &NodeName) -> Result<Option<u32>> {
    let slot: Option<i64> = sqlx::query_scalar("SELECT slot FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .fetch_optional(&mut *tx)
        .await
        .context("reading the node's slot")?;
    Ok(slot_index(slot))
}

struct HistoryRow<'a> {
    node: &'a NodeName,
    process: &'a str,
    event: HistoryEvent,
    at: Millis,
    cause: Option<&'a str>,
    slot: Option<u32>,
    released: bool,
}

async fn append_history(tx: &mut SqliteConnection, row: HistoryRow<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO history (node, process, event, at, cause, slot, released) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(row.node.as_str())
    .bind(row.process)
    .bind(row.event.to_string())
    .bind(row.at)
    .bind(row.cause)
    .bind(row.slot.map(i64::from))
    .bind(row.released)
    .execute(&mut *tx)
    .await
    .context("appending history")?;
    Ok(())
}

/// Moves the node's requests in `from` state to `to` and returns their processes.
async fn move_requests(
    tx: &mut SqliteConnection,
    node: &NodeName,
    from: RequestState,
    to: RequestState,
    now: Millis,
) -> Result<Vec<String>> {
    let finished = matches!(to, RequestState::Done | RequestState::Canceled).then_some(now);
    sqlx::query_scalar(
        "UPDATE requests SET state = ?, finished_at = ? WHERE node = ? AND state = ? \
         RETURNING process",
    )
    .bind(to.as_str())
    .bind(finished)
    .bind(node.as_str())
    .bind(from.as_str())
    .fetch_all(&mut *tx)
    .await
    .context("updating requests")
}

/// Writes one history entry per process; the last one carries `released` when the slot goes.
#[allow(clippy::too_many_arguments)]
async fn record_each(
    tx: &mut SqliteConnection,
    node: &NodeName,
    processes: &[String],
    fallback: &str,
    event: HistoryEvent,
    cause: Option<&str>,
    slot: Option<u32>,
    releases: bool,
    now: Millis,
) -> Result<()> {
    let fallback = [fallback.to_string()];
    let processes = if processes.is_empty() && releases {
        &fallback[..]
    } else {
        processes
    };
    for (i, process) in processes.iter().enumerate() {
        let released = releases && i + 1 == processes.len();
        append_history(
            tx,
            HistoryRow {
                node,
                process,
                event,
                at: now,
                cause,
                slot,
                released,
            },
        )
        .await?;
    }
    Ok(())
}

async fn record_backoff(
    tx: &mut SqliteConnection,
    node: &NodeName,
    process: &str,
    policy: &rota_core::BackoffPolicy,
    cause: &str,
    now: Millis,
) -> Result<()> {
    let previous: Option<i64> =
        sqlx::query_scalar("SELECT last_interval_s FROM backoff WHERE node = ? AND process = ?")
            .bind(node.as_str())
            .bind(process)
            .fetch_optional(&mut *tx)
            .await
            .context("reading backoff")?;
    let previous = previous.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    let next = policy.next(previous);
    let next_s = i64::try_from(next.as_secs()).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO backoff (node, process, until, last_interval_s, cause) VALUES (?, ?, ?, ?, ?) \
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

async fn release_slot(tx: &mut SqliteConnection, node: &NodeName) -> Result<()> {
    sqlx::query("DELETE FROM slots WHERE holder = ?")
        .bind(node.as_str())
        .execute(&mut *tx)
        .await
        .context("releasing the slot")?;
    Ok(())
}

/// Applies a window change inside the transition's transaction.
async fn apply_window(
    tx: &mut SqliteConnection,
    record: &NodeRecord,
    window: &WindowChange,
    now: Millis,
) -> Result<()> {
    let node = &record.node;
    let slot = record.slot;
    let fallback = record
        .process
        .as_ref()
        .map_or_else(|| Process::Reboot.to_string(), ToString::to_string);
    let result = match window {
        WindowChange::Finish => Some("finished".to_string()),
        WindowChange::Fail { cause, .. } => Some(format!("failed: {cause}")),
        WindowChange::Cancel { reason } => Some(format!("canceled: {reason}")),
        _ => None,
    };
    if let Some(result) = result {
        sqlx::query("UPDATE nodes SET last_result = ? WHERE node = ?")
            .bind(result)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("recording the result")?;
    }
    match window {
        // The node's own row (and its place in the queue) is written by `update_node`.
        WindowChange::None | WindowChange::Queue { .. } => {}
        WindowChange::Open | WindowChange::Join => {
            let started =
                move_requests(tx, node, RequestState::Pending, RequestState::Active, now).await?;
            record_each(
                tx,
                node,
                &started,
                &fallback,
                HistoryEvent::Started,
                None,
                slot,
                false,
                now,
            )
            .await?;
        }
        WindowChange::Finish => {
            let done =
                move_requests(tx, node, RequestState::Active, RequestState::Done, now).await?;
            for process in &done {
                sqlx::query("DELETE FROM backoff WHERE node = ? AND process = ?")
                    .bind(node.as_str())
                    .bind(process)
                    .execute(&mut *tx)
                    .await
                    .context("clearing backoff")?;
            }
            record_each(
                tx,
                node,
                &done,
                &fallback,
                HistoryEvent::Finished,
                None,
                slot,
                true,
                now,
            )
            .await?;
            release_slot(tx, node).await?;
        }
        WindowChange::Fail {
            cause,
            policy,
            keep_slot,
        } => {
            let failed = if *keep_slot {
                sqlx::query_scalar(
                    "SELECT process FROM requests WHERE node = ? AND state = 'active' ORDER BY id",
                )
                .bind(node.as_str())
                .fetch_all(&mut *tx)
                .await
                .context("reading active requests")?
            } else {
                move_requests(tx, node, RequestState::Active, RequestState::Pending, now).await?
            };
            let failed = if failed.is_empty() {
                vec![fallback.clone()]
            } else {
                failed
            };
            for process in &failed {
                record_backoff(tx, node, process, policy, cause, now).await?;
            }
            record_each(
                tx,
                node,
                &failed,
                &fallback,
                HistoryEvent::Failed,
                Some(cause),
                slot,
                !keep_slot,
                now,
            )
            .await?;
            if !keep_slot {
                release_slot(tx, node).await?;
            }
        }
        WindowChange::Cancel { reason } => {
            let canceled =
                move_requests(tx, node, RequestState::Active, RequestState::Canceled, now).await?;
            record_each(
                tx,
                node,
                &canceled,
                &fallback,
                HistoryEvent::Canceled,
                Some(reason),
                slot,
                true,
                now,
            )
            .await?;
            release_slot(tx, node).await?;
        }
    }
    Ok(())
}

/// The fenced compare-and-swap at the heart of every transition: one statement that updates
/// the node only if it is in `transition.from` and `session` is current, returning the new
/// record, or `None` when either check failed.
async fn update_node(
    conn: &mut sqlx::SqliteConnection,
    session: &Session,
    transition: &Transition,
    now: Millis,
) -> Result<Option<NodeRecord>> {
    let clears_process = matches!(transition.to, NodeState::Idle | NodeState::Queued);
    let process = transition.process.as_ref().map(ToString::to_string);
    let f = &transition.fields;
    let resets_cordon = clears_process && transition.fields.cordoned_by_rota.is_none();
    let queued_at = match &transition.window {
        WindowChange::Queue { queued_at } => Some(*queued_at),
        WindowChange::Open => Some(None),
        _ => None,
    };
    let row = sqlx::query(
        "UPDATE nodes SET state = ?1, since = ?2, \
         process = CASE WHEN ?3 THEN NULL ELSE COALESCE(?4, process) END, \
         pre_cordoned = CASE WHEN ?5 THEN 0 ELSE COALESCE(?6, pre_cordoned) END, \
         cordoned_by_rota = CASE WHEN ?5 THEN 0 ELSE COALESCE(?7, cordoned_by_rota) END, \
         boot_id = CASE WHEN ?8 THEN ?9 ELSE boot_id END, \
         reboot_started_at = CASE WHEN ?10 THEN ?11 ELSE reboot_started_at END, \
         reboot_deadline = CASE WHEN ?12 THEN ?13 ELSE reboot_deadline END, \
         last_reboot_at = COALESCE(?14, last_reboot_at), \
         queued_at = CASE WHEN ?15 THEN ?16 ELSE queued_at END \
         WHERE node = ?17 AND state = ?18 AND session_id = ?19 AND EXISTS ( \
           SELECT 1 FROM sessions s WHERE s.id = ?19 AND s.superseded = 0 AND s.deadline > ?2) \
         RETURNING node, state, since, process, pre_cordoned, cordoned_by_rota, boot_id, \
           reboot_started_at, reboot_deadline, last_reboot_at, queued_at, last_result, \
           (SELECT slot FROM slots WHERE holder = ?17) AS slot",
    )
    .bind(transition.to.to_string())
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
    .bind(transition.from.to_string())
    .bind(session.id)
    .fetch_optional(&mut *conn)
    .await
    .context("updating the node")?;
    row.as_ref().map(node_record).transpose()
}

/// Why a fenced write matched nothing: the session is gone, or the node is elsewhere.
async fn refusal(
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

fn expect_node(record: Option<NodeRecord>, node: &NodeName) -> Result<NodeRecord> {
    record.ok_or_else(|| Error::NoSuchNode { node: node.clone() })
}

#[async_trait]
impl Store for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        write_tx!(self, "opening a session", |tx| {
            let now = now_millis();
            sqlx::query("UPDATE sessions SET superseded = 1 WHERE node = ? AND superseded = 0")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await
                .context("superseding old sessions")?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO sessions (node, started_at, deadline) VALUES (?, ?, ?) RETURNING id",
            )
            .bind(node.as_str())
            .bind(now)
            .bind(now.saturating_add(ttl_ms))
            .fetch_one(&mut *tx)
            .await
            .context("creating a session")?;
            sqlx::query(
                "INSERT INTO nodes (node, session_id, state, since) VALUES (?, ?, 'idle', ?) \
                 ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id",
            )
            .bind(node.as_str())
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .context("registering the node")?;
            Ok(Session {
                id,
                node: node.clone(),
            })
        })
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        write_tx!(self, "extending the session", |tx| {
            check_session(tx, session).await?;
            sqlx::query("UPDATE sessions SET deadline = ? WHERE id = ?")
                .bind(now_millis().saturating_add(ttl_ms))
                .bind(session.id)
                .execute(&mut *tx)
                .await
                .context("extending the session")?;
            Ok(())
        })
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        write_tx!(self, "closing the session", |tx| {
            sqlx::query("UPDATE sessions SET deadline = ? WHERE id = ? AND deadline > ?")
                .bind(now_millis())
                .bind(session.id)
                .bind(now_millis())
                .execute(&mut *tx)
                .await
                .context("closing the session")?;
            Ok(())
        })
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
        write_tx!(self, "setting the concurrency", wakes: CONCURRENCY_CHANGED, |tx| {
            sqlx::query(
                "INSERT INTO rota_meta (key, value) VALUES ('concurrency', ?) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(concurrency.to_string())
            .execute(&mut *tx)
            .await
            .context("setting the concurrency")?;
            Ok(())
        })
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        // A read-only look first: waiters that are not at the front of the queue never take the
        // write lock, so a release does not set off a stampede of write transactions.
        let mut conn = self.pool.acquire().await.context("acquiring a slot")?;
        let already = slot_index(
            sqlx::query_scalar("SELECT slot FROM slots WHERE holder = ?")
                .bind(session.node.as_str())
                .fetch_optional(&mut *conn)
                .await
                .context("acquiring a slot")?,
        );
        if already.is_none() {
            let changes = changes_before_turn(&mut conn, &session.node).await?;
            if changes > 0 {
                return Ok(Acquire::Wait { changes });
            }
        }
        drop(conn);
        write_tx!(self, "acquiring a slot", |tx| {
            check_session(tx, session).await?;
            if let Some(slot) = held_slot(tx, &session.node).await? {
                return Ok(Acquire::Granted(slot));
            }
            let changes = changes_before_turn(tx, &session.node).await?;
            if changes > 0 {
                return Ok(Acquire::Wait { changes });
            }
            let concurrency = read_concurrency(tx).await?;
            let held: Vec<i64> = sqlx::query_scalar("SELECT slot FROM slots ORDER BY slot")
                .fetch_all(&mut *tx)
                .await
                .context("reading slots")?;
            let Some(slot) = (0..concurrency).find(|i| !held.contains(&i64::from(*i))) else {
                return Ok(Acquire::Wait { changes: 1 });
            };
            sqlx::query("INSERT INTO slots (slot, holder, acquired_at) VALUES (?, ?, ?)")
                .bind(i64::from(slot))
                .bind(session.node.as_str())
                .bind(now_millis())
                .execute(&mut *tx)
                .await
                .context("taking a slot")?;
            Ok(Acquire::Granted(slot))
        })
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        write_tx!(self, "checking slot ownership", |tx| {
            check_session(tx, session).await?;
            let Some(slot) = held_slot(tx, &session.node).await? else {
                return Err(Error::Fenced {
                    node: session.node.clone(),
                    session: session.id,
                });
            };
            sqlx::query("UPDATE sessions SET deadline = ? WHERE id = ?")
                .bind(now_millis().saturating_add(ttl_ms))
                .bind(session.id)
                .execute(&mut *tx)
                .await
                .context("extending the session")?;
            Ok(slot)
        })
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        let rows = sqlx::query("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
            .fetch_all(&self.pool)
            .await
            .context("reading slots")?;
        rows.iter()
            .map(|row| {
                let get = |e| Error::Database {
                    context: "reading slots",
                    source: e,
                };
                Ok(SlotHolder {
                    slot: slot_index(row.try_get("slot").map_err(get)?).unwrap_or(0),
                    node: parse("slots.holder", row.try_get("holder").map_err(get)?)?,
                    acquired_at: row.try_get("acquired_at").map_err(get)?,
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
        // request for the process (the partial unique index).
        let mut writer = self.writer.lock().await;
        let conn = writer.ready().await?;
        let now = now_millis();
        let inserted = sqlx::query(
            "INSERT INTO requests (node, process, source, created_at, state) \
             SELECT ?1, ?2, ?3, ?4, 'pending' WHERE EXISTS ( \
               SELECT 1 FROM nodes n JOIN sessions s ON s.id = n.session_id \
               WHERE n.node = ?1 AND s.id = ?5 AND s.superseded = 0 AND s.deadline > ?4) \
             ON CONFLICT (node, process) WHERE state IN ('pending', 'active') DO NOTHING \
             RETURNING *",
        )
        .bind(session.node.as_str())
        .bind(process.to_string())
        .bind(source)
        .bind(now)
        .bind(session.id)
        .fetch_optional(&mut *conn)
        .await
        .context("recording a request")?;
        if let Some(row) = inserted {
            return Ok((request_record(&row)?, true));
        }
        let existing = sqlx::query(
            "SELECT * FROM requests WHERE node = ? AND process = ? \
             AND state IN ('pending', 'active')",
        )
        .bind(session.node.as_str())
        .bind(process.to_string())
        .fetch_optional(&mut *conn)
        .await
        .context("reading requests")?;
        match existing {
            Some(row) => {
                // Joining an open request still needs a current session.
                let current = refusal(conn, session, NodeState::Idle).await;
                if matches!(current, Error::Fenced { .. }) {
                    return Err(current);
                }
                Ok((request_record(&row)?, false))
            }
            None => Err(refusal(conn, session, NodeState::Idle).await),
        }
    }

    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        write_tx!(self, "canceling a request", |tx| {
            check_session(tx, session).await?;
            let done = sqlx::query(
                "UPDATE requests SET state = 'canceled', finished_at = ? \
                 WHERE node = ? AND process = ? AND state = 'pending'",
            )
            .bind(now_millis())
            .bind(session.node.as_str())
            .bind(process.to_string())
            .execute(&mut *tx)
            .await
            .context("canceling a request")?;
            Ok(done.rows_affected() > 0)
        })
    }

    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM requests WHERE node = ? AND state IN ('pending', 'active') ORDER BY id",
        )
        .bind(node.as_str())
        .fetch_all(&self.pool)
        .await
        .context("reading requests")?;
        rows.iter().map(request_record).collect()
    }

    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        let rows = sqlx::query("SELECT * FROM requests ORDER BY id")
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
        if matches!(
            transition.window,
            WindowChange::None | WindowChange::Queue { .. }
        ) {
            // A step that touches only the node's row is one statement: no explicit
            // transaction, one round trip.
            let mut writer = self.writer.lock().await;
            let conn = writer.ready().await?;
            let updated = update_node(conn, session, &transition, now_millis()).await?;
            let Some(record) = updated else {
                return Err(refusal(conn, session, transition.from).await);
            };
            self.woke(wakes);
            return Ok(record);
        }
        write_tx!(self, "recording a transition", wakes: wakes, |tx| {
            let node = &session.node;
            let Some(record) = fetch_node(tx, node).await? else {
                return Err(refusal(tx, session, transition.from).await);
            };
            let now = now_millis();
            if record.state == transition.from {
                apply_window(tx, &record, &transition.window, now).await?;
            }
            match update_node(tx, session, &transition, now).await? {
                Some(updated) => Ok(updated),
                None => Err(refusal(tx, session, transition.from).await),
            }
        })
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
            "SELECT node, process, until, last_interval_s, cause FROM backoff WHERE node = ? \
             ORDER BY process",
        )
        .bind(node.as_str())
        .fetch_all(&self.pool)
        .await
        .context("reading backoff")?;
        rows.iter()
            .map(|row| {
                let get = |e| Error::Database {
                    context: "reading backoff",
                    source: e,
                };
                let secs: i64 = row.try_get("last_interval_s").map_err(get)?;
                Ok(BackoffRecord {
                    node: parse("backoff.node", row.try_get("node").map_err(get)?)?,
                    process: parse("backoff.process", row.try_get("process").map_err(get)?)?,
                    until: row.try_get("until").map_err(get)?,
                    last_interval: Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
                    cause: row.try_get("cause").map_err(get)?,
                })
            })
            .collect()
    }

    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        let rows = sqlx::query(
            "SELECT id, node, process, event, at, cause, slot, released FROM history \
             WHERE (?1 IS NULL OR node = ?1) AND (?2 IS NULL OR process = ?2) \
             AND (?3 IS NULL OR event = ?3) AND (?4 IS NULL OR at >= ?4) \
             AND (?5 IS NULL OR at <= ?5) ORDER BY id",
        )
        .bind(filter.node.as_ref().map(NodeName::as_str))
        .bind(filter.process.as_ref().map(ToString::to_string))
        .bind(filter.event.map(|e| e.to_string()))
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&self.pool)
        .await
        .context("reading history")?;
        rows.iter()
            .map(|row| {
                let get = |e| Error::Database {
                    context: "reading history",
                    source: e,
                };
                Ok(HistoryEntry {
                    id: row.try_get("id").map_err(get)?,
                    node: parse("history.node", row.try_get("node").map_err(get)?)?,
                    process: parse("history.process", row.try_get("process").map_err(get)?)?,
                    event: parse("history.event", row.try_get("event").map_err(get)?)?,
                    at: row.try_get("at").map_err(get)?,
                    cause: row.try_get("cause").map_err(get)?,
                    slot: slot_index(row.try_get("slot").map_err(get)?),
                    released: row.try_get("released").map_err(get)?,
                })
            })
            .collect()
    }

    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        write_tx!(self, "unlocking a node", wakes: 1, |tx| {
            let record = expect_node(fetch_node(tx, node).await?, node)?;
            if record.slot.is_none() && !record.state.holds_slot() {
                return Err(Error::NotAllowed {
                    node: node.clone(),
                    state: record.state,
                    action: "unlock",
                    needs: "holds a slot",
                });
            }
            let now = now_millis();
            let cause = format!("unlocked by an operator: {reason}");
            apply_window(
                tx,
                &record,
                &WindowChange::Cancel {
                    reason: cause.clone(),
                },
                now,
            )
            .await?;
            sqlx::query(
                "UPDATE nodes SET state = 'idle', since = ?, process = NULL, queued_at = NULL \
                 WHERE node = ?",
            )
            .bind(now)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("unlocking the node")?;
            expect_node(fetch_node(tx, node).await?, node)
        })
    }

    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        write_tx!(self, "retrying a node", wakes: 1, |tx| {
            let record = expect_node(fetch_node(tx, node).await?, node)?;
            if record.state != NodeState::Failed {
                return Err(Error::NotAllowed {
                    node: node.clone(),
                    state: record.state,
                    action: "retry",
                    needs: "is failed",
                });
            }
            sqlx::query("UPDATE nodes SET state = 'maintaining', since = ? WHERE node = ?")
                .bind(now_millis())
                .bind(node.as_str())
                .execute(&mut *tx)
                .await
                .context("retrying the node")?;
            expect_node(fetch_node(tx, node).await?, node)
        })
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

async fn read_concurrency(conn: &mut sqlx::SqliteConnection) -> Result<u32> {
    let value: Option<String> =
        sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'concurrency'")
            .fetch_optional(&mut *conn)
            .await
            .context("reading the concurrency")?;
    Ok(value
        .map(|v| parse("rota_meta.concurrency", v))
        .transpose()?
        .unwrap_or(1))
}

/// How many wake-ups of `Store::changes` must happen at least before `node` can take a slot:
/// 0 when it may take one now (queued, eligible, and fewer live waiters ahead of it than free
/// slots). Queued nodes whose session has expired do not hold the queue up. A node that is not
/// queued or still in backoff waits for its own timer, counted as one.
async fn changes_before_turn(conn: &mut sqlx::SqliteConnection, node: &NodeName) -> Result<u64> {
    let concurrency = i64::from(read_concurrency(conn).await?);
    let now = now_millis();
    let row = sqlx::query(
        "SELECT me.queued_at AS queued_at, \
           (SELECT COUNT(*) FROM slots) AS held, \
           (SELECT COUNT(*) FROM nodes n JOIN sessions s ON s.id = n.session_id \
              WHERE n.state = 'queued' AND n.queued_at IS NOT NULL AND n.queued_at <= ?2 \
                AND (n.queued_at < me.queued_at OR (n.queued_at = me.queued_at AND n.node < me.node)) \
                AND s.superseded = 0 AND s.deadline > ?2 \
                AND n.node NOT IN (SELECT holder FROM slots)) AS ahead \
         FROM nodes me WHERE me.node = ?1 AND me.state = 'queued'",
    )
    .bind(node.as_str())
    .bind(now)
    .fetch_optional(&mut *conn)
    .await
    .context("reading the queue")?;
    let Some(row) = row else {
        return Ok(1);
    };
    let get = |e| Error::Database {
        context: "reading the queue",
        source: e,
    };
    let queued_at: Option<i64> = row.try_get("queued_at").map_err(get)?;
    let held: i64 = row.try_get("held").map_err(get)?;
    let ahead: i64 = row.try_get("ahead").map_err(get)?;
    if queued_at.is_none_or(|q| q > now) {
        return Ok(1);
    }
    let free = concurrency - held;
    Ok(u64::try_from(ahead - free + 1).unwrap_or(0))
}

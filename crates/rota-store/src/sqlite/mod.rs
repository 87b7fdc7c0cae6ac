//! The embedded default store: one SQLite file, shared by every agent on the host.
//!
//! Reads share a pool of connections. Writes go to one [writer](writer) task per store, which
//! owns a connection of its own and commits whatever is queued in one `BEGIN IMMEDIATE`
//! transaction: SQLite's single-writer lock serialises them across processes, and the primary
//! and unique keys on `slots` make a double grant impossible even if a check were wrong.

mod queries;
mod wakes;

use wakes::OwnWakes;
mod writer;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, ProcedureSpec, Process};
use sqlx::ConnectOptions;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::{mpsc, oneshot, watch};

use self::queries::{fetch_node, turn};
use self::writer::{Op, Reply};
use crate::actions::{ActionRecord, NewAction, os_actor};
use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, BackoffRecord, Blocked, HistoryEntry, HistoryFilter, Millis, NodeOverview, NodeRecord,
    Outcome, Pause, ProcedureRecord, RequestRecord, Session, SlotHolder, StepRecord, Transition,
    decode_resumed_at, now_millis,
};
use crate::rows::{
    ALL_BACKOFFS_SQL, ALL_OPEN_REQUESTS_SQL, action_record, all_nodes_sql, backoff_record,
    concurrency as stored_concurrency, history_entry, node_record, procedure_record,
    request_record, slot_holder, slot_index, step_record,
};
use crate::{AgentStore, AuditStore, OperatorStore, ProcedureStore, ReadStore};

/// The setting that holds the fleet's pause.
const PAUSED_KEY: &str = "paused";
/// The setting that holds when the fleet was last resumed (the start of the rollout).
const RESUMED_KEY: &str = "resumed_at";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A [`Store`](crate::Store) in one SQLite file. Clones share the pool, the writer and the
/// change counter.
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
    writer: mpsc::UnboundedSender<Op>,
    changes: Arc<watch::Sender<u64>>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and applies migrations. A file that
    /// is not SQLite, a SQLite file that is not rota's, or a schema newer than this binary are
    /// refused without changing anything. Needs a tokio runtime (the writer is a task).
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
        let pool = connect(&options, &location).await?;
        migrate(&pool, &location).await?;
        // The writer never checkpoints: a checkpoint syncs the database file, and every agent
        // waiting on the writer would wait for the disk too. A background task does it instead.
        let conn = options
            .clone()
            .pragma("wal_autocheckpoint", "0")
            .connect()
            .await
            .context("opening the write connection")?;
        let (changes, _) = watch::channel(0);
        let changes = Arc::new(changes);
        let (writer, ops) = mpsc::unbounded_channel();
        let own_wake = Arc::new(OwnWakes::default());
        let (stopped, writer_gone) = oneshot::channel();
        tokio::spawn(writer::run(
            conn,
            ops,
            changes.clone(),
            own_wake.clone(),
            stopped,
        ));
        tokio::spawn(checkpoint(pool.clone(), writer.downgrade()));
        tokio::spawn({
            let (path, pool, changes) = (path.to_path_buf(), pool.clone(), changes.clone());
            async move {
                let watch = wakes::watch_operators(&path, pool, changes, own_wake);
                tokio::select! {
                    () = watch => {}
                    _ = writer_gone => {}
                }
            }
        });
        Ok(SqliteStore {
            pool,
            path: path.to_path_buf(),
            writer,
            changes,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands a write to the writer and waits until its batch has committed.
    async fn write<T>(&self, op: impl FnOnce(Reply<T>) -> Op) -> Result<T> {
        let (reply, result) = oneshot::channel();
        self.writer
            .send(op(reply))
            .map_err(|_| Error::WriterStopped)?;
        result.await.map_err(|_| Error::WriterStopped)?
    }
}

/// Whether SQLite said another connection holds a lock it needs (SQLITE_BUSY and its
/// extended codes, which all end in 5 in the low byte).
fn is_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}

/// Opens the pool. Switching a new file to WAL takes a lock that SQLite does not wait for, so
/// agents creating the same file at once may be told it is busy: they try again shortly.
async fn connect(options: &SqliteConnectOptions, location: &str) -> Result<SqlitePool> {
    const ATTEMPTS: u32 = 50;
    let mut attempt = 1;
    loop {
        match SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options.clone())
            .await
        {
            Ok(pool) => return Ok(pool),
            Err(e) if is_busy(&e) && attempt < ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                return Err(Error::NotRota {
                    location: location.to_string(),
                    reason: e.to_string(),
                });
            }
        }
    }
}

/// How often the write-ahead log is folded into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Checkpoints the write-ahead log beside the writer until the store is dropped. PASSIVE never
/// blocks a writer or a reader; a log that keeps growing is folded in on the next round.
async fn checkpoint(pool: SqlitePool, writer: mpsc::WeakUnboundedSender<Op>) {
    let mut every = tokio::time::interval(CHECKPOINT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if writer.upgrade().is_none() {
            return;
        }
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            tracing::warn!(error = %e, "checkpointing the write-ahead log failed; retrying");
        }
    }
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

#[async_trait]
impl AgentStore for SqliteStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let node = node.clone();
        let ttl_ms = millis(ttl);
        self.write(|reply| Op::OpenSession {
            node,
            ttl_ms,
            reply,
        })
        .await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        let session = session.clone();
        let ttl_ms = millis(ttl);
        self.write(|reply| Op::Heartbeat {
            session,
            ttl_ms,
            reply,
        })
        .await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        let session = session.clone();
        self.write(|reply| Op::CloseSession { session, reply })
            .await
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
        if already.is_none()
            && let rota_core::Turn::Wait { changes } = turn(&mut conn, &session.node).await?
        {
            return Ok(Acquire::Wait { changes });
        }
        drop(conn);
        let session = session.clone();
        self.write(|reply| Op::AcquireSlot { session, reply }).await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let session = session.clone();
        let ttl_ms = millis(ttl);
        self.write(|reply| Op::Fence {
            session,
            ttl_ms,
            reply,
        })
        .await
    }

    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        let session = session.clone();
        let process = process.clone();
        let source = source.to_string();
        self.write(|reply| Op::AddRequest {
            session,
            process,
            source,
            reply,
        })
        .await
    }

    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool> {
        let session = session.clone();
        let blocked = blocked.cloned();
        self.write(|reply| Op::SetBlocked {
            session,
            blocked,
            reply,
        })
        .await
    }

    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        let session = session.clone();
        let process = process.clone();
        self.write(|reply| Op::CancelRequest {
            session,
            process,
            reply,
        })
        .await
    }

    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord> {
        let session = session.clone();
        let process = process.clone();
        let outcome = outcome.clone();
        self.write(|reply| Op::CompleteRequest {
            session,
            process,
            outcome,
            reply,
        })
        .await
    }

    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        let session = session.clone();
        self.write(|reply| Op::Transition {
            session,
            transition,
            reply,
        })
        .await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[async_trait]
impl OperatorStore for SqliteStore {
    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        if !(1..=1000).contains(&concurrency) {
            return Err(Error::Concurrency { value: concurrency });
        }
        self.write(|reply| Op::SetConcurrency { concurrency, reply })
            .await
    }

    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        let node = node.clone();
        let reason = reason.to_string();
        self.write(|reply| Op::Unlock {
            node,
            reason,
            reply,
        })
        .await
    }

    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        let node = node.clone();
        self.write(|reply| Op::Retry { node, reply }).await
    }

    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        let node = node.clone();
        let process = process.clone();
        let source = source.to_string();
        self.write(|reply| Op::OperatorRequest {
            node,
            process,
            source,
            reply,
        })
        .await
    }

    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool> {
        let node = node.clone();
        let process = process.clone();
        self.write(|reply| Op::OperatorCancel {
            node,
            process,
            reply,
        })
        .await
    }

    async fn pause(&self, reason: &str) -> Result<Pause> {
        let pause = Pause {
            reason: reason.to_string(),
            since: now_millis(),
        };
        let value = Some(pause.encode());
        self.write(|reply| Op::SetMeta {
            key: PAUSED_KEY,
            value,
            reply,
        })
        .await?;
        Ok(pause)
    }

    async fn resume(&self) -> Result<Option<Pause>> {
        // The new rollout first: a resume that fails halfway leaves the fleet paused, never
        // resumed into the old rollout (whose failures would pause it again).
        let now = Some(now_millis().to_string());
        self.write(|reply| Op::SetMeta {
            key: RESUMED_KEY,
            value: now,
            reply,
        })
        .await?;
        let previous = self
            .write(|reply| Op::SetMeta {
                key: PAUSED_KEY,
                value: None,
                reply,
            })
            .await?;
        Pause::decode("rota_meta.paused", previous.as_deref())
    }
}

#[async_trait]
impl ProcedureStore for SqliteStore {
    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        let spec = Box::new(spec.clone());
        self.write(|reply| Op::SubmitProcedure { spec, reply })
            .await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        sqlx::query("SELECT spec, submitted_at FROM procedures ORDER BY seq")
            .fetch_all(&self.pool)
            .await
            .context("reading procedures")?
            .iter()
            .map(procedure_record)
            .collect()
    }
}

#[async_trait]
impl ReadStore for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    async fn concurrency(&self) -> Result<Option<u32>> {
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = 'concurrency'")
                .fetch_optional(&self.pool)
                .await
                .context("reading the concurrency")?;
        value
            .map(|v| stored_concurrency("rota_meta.concurrency", v))
            .transpose()
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        let rows = sqlx::query("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
            .fetch_all(&self.pool)
            .await
            .context("reading slots")?;
        rows.iter().map(slot_holder).collect()
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

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        let mut conn = self.pool.acquire().await.context("reading a node")?;
        fetch_node(&mut conn, node).await
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let rows = sqlx::query(&all_nodes_sql())
            .fetch_all(&self.pool)
            .await
            .context("reading nodes")?;
        rows.iter().map(node_record).collect()
    }

    async fn overview(&self) -> Result<Vec<NodeOverview>> {
        let mut conn = self.pool.acquire().await.context("reading the fleet")?;
        let nodes = sqlx::query(&all_nodes_sql())
            .fetch_all(&mut *conn)
            .await
            .context("reading nodes")?;
        let requests = sqlx::query(ALL_OPEN_REQUESTS_SQL)
            .fetch_all(&mut *conn)
            .await
            .context("reading requests")?;
        let backoffs = sqlx::query(ALL_BACKOFFS_SQL)
            .fetch_all(&mut *conn)
            .await
            .context("reading backoff")?;
        crate::rows::overview(&nodes, &requests, &backoffs)
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
        rows.iter().map(backoff_record).collect()
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
        rows.iter().map(history_entry).collect()
    }

    async fn steps(&self, filter: &HistoryFilter) -> Result<Vec<StepRecord>> {
        let rows = sqlx::query(
            "SELECT node, state, at FROM steps WHERE (?1 IS NULL OR node = ?1) \
             AND (?2 IS NULL OR at >= ?2) AND (?3 IS NULL OR at <= ?3) ORDER BY id",
        )
        .bind(filter.node.as_ref().map(NodeName::as_str))
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&self.pool)
        .await
        .context("reading steps")?;
        rows.iter().map(step_record).collect()
    }

    async fn paused(&self) -> Result<Option<Pause>> {
        let value: Option<String> = sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = ?")
            .bind(PAUSED_KEY)
            .fetch_optional(&self.pool)
            .await
            .context("reading the pause")?;
        Pause::decode("rota_meta.paused", value.as_deref())
    }

    async fn resumed_at(&self) -> Result<Option<Millis>> {
        let value: Option<String> = sqlx::query_scalar("SELECT value FROM rota_meta WHERE key = ?")
            .bind(RESUMED_KEY)
            .fetch_optional(&self.pool)
            .await
            .context("reading the last resume")?;
        decode_resumed_at("rota_meta.resumed_at", value.as_deref())
    }
}

#[async_trait]
impl AuditStore for SqliteStore {
    async fn actor(&self) -> Result<String> {
        Ok(os_actor())
    }

    async fn record_action(&self, action: &NewAction) -> Result<ActionRecord> {
        let action = Box::new(action.clone());
        self.write(|reply| Op::RecordAction { action, reply }).await
    }

    async fn actions(&self, filter: &HistoryFilter) -> Result<Vec<ActionRecord>> {
        if filter.event.is_some() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT at, action, node, process, by, reason FROM operator_actions \
             WHERE (?1 IS NULL OR node = ?1) AND (?2 IS NULL OR process = ?2) \
             AND (?3 IS NULL OR at >= ?3) AND (?4 IS NULL OR at <= ?4) ORDER BY id",
        )
        .bind(filter.node.as_ref().map(NodeName::as_str))
        .bind(filter.process.as_ref().map(ToString::to_string))
        .bind(filter.since)
        .bind(filter.until)
        .fetch_all(&self.pool)
        .await
        .context("reading operator actions")?;
        rows.iter().map(action_record).collect()
    }
}

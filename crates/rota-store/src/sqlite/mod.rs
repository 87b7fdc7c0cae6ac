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
use rota_core::{NodeName, ProcedureSpec, Write};
use sqlx::ConnectOptions;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::{mpsc, oneshot, watch};

use self::queries::{fetch_record, turn};
use self::writer::{Op, Reply};
use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, Fleet, History, HistoryFilter, NodeOverview, Parts, Pause, ProcedureRecord, Session,
    Setting, Settings, Writer, Written,
};
use crate::rows::slot_index;
use crate::{Store, reads};
use sqlx::Sqlite;

/// The setting that holds the number of slots.
const CONCURRENCY_KEY: &str = "concurrency";
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

    /// Hands an operation to the writer and waits until its batch has committed.
    async fn send<T>(&self, op: impl FnOnce(Reply<T>) -> Op) -> Result<T> {
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
impl Store for SqliteStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let node = node.clone();
        let ttl_ms = millis(ttl);
        self.send(|reply| Op::OpenSession {
            node,
            ttl_ms,
            reply,
        })
        .await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        let session = session.clone();
        let ttl_ms = millis(ttl);
        self.send(|reply| Op::Heartbeat {
            session,
            ttl_ms,
            reply,
        })
        .await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        let session = session.clone();
        self.send(|reply| Op::CloseSession { session, reply }).await
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
        self.send(|reply| Op::AcquireSlot { session, reply }).await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let session = session.clone();
        let ttl_ms = millis(ttl);
        self.send(|reply| Op::Fence {
            session,
            ttl_ms,
            reply,
        })
        .await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        let node = writer.node().clone();
        let session = writer.session().cloned();
        let fence_ttl_ms = match writer {
            Writer::Fenced(_, ttl) => Some(millis(ttl)),
            Writer::Agent(_) | Writer::Operator(_) => None,
        };
        let write = Box::new(write);
        self.send(|reply| Op::Write {
            node,
            session,
            fence_ttl_ms,
            write,
            reply,
        })
        .await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        let mut conn = self.pool.acquire().await.context("reading a node")?;
        Ok(fetch_record(&mut conn, node, None)
            .await?
            .map(|(record, _)| record))
    }

    async fn fleet(&self) -> Result<Fleet> {
        let mut conn = self.pool.acquire().await.context("reading the fleet")?;
        reads::fleet::<Sqlite>(&mut conn).await
    }

    async fn settings(&self) -> Result<Settings> {
        let mut conn = self.pool.acquire().await.context("reading the settings")?;
        reads::settings::<Sqlite>(&mut conn).await
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        self.send(|reply| Op::Set { setting, reply }).await
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        let spec = Box::new(spec.clone());
        self.send(|reply| Op::SubmitProcedure { spec, reply }).await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        let mut conn = self.pool.acquire().await.context("reading procedures")?;
        reads::procedures::<Sqlite>(&mut conn).await
    }

    async fn read_history(&self, filter: &HistoryFilter, parts: Parts) -> Result<History> {
        let mut conn = self.pool.acquire().await.context("reading history")?;
        reads::read_history::<Sqlite>(&mut conn, filter, parts).await
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        let record = Box::new(record.clone());
        self.send(|reply| Op::RecordAudit { record, reply }).await
    }
}

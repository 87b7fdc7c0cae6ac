//! The embedded default store: one SQLite file, shared by every agent on the host.
//!
//! Reads and writes share a pool of connections. Each write is one `BEGIN IMMEDIATE`
//! transaction: SQLite's single-writer lock serialises them across processes, and the primary
//! and unique keys on `slots` make a double grant impossible even if a check were wrong. A
//! write that is canceled halfway is rolled back whole.

mod record;
mod wakes;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::{ConstantBuilder, Retryable};
use rota_core::{NodeName, ProcedureSpec, Write};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Database, Sqlite, SqliteConnection, Transaction, TransactionManager};
use tokio::sync::{Mutex, MutexGuard, watch};
use tokio_util::task::AbortOnDropHandle;

use self::wakes::OwnWakes;
use crate::Store;
use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Context, Error, Result};
use crate::model::{
    Acquire, Fleet, History, HistoryFilter, NodeOverview, Part, Pause, ProcedureRecord, Session,
    Setting, Settings, Writer, Written,
};
use crate::sql::{Sql, millis};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// A [`Store`](crate::Store) in one SQLite file. Clones share the pool, the write gate, the
/// change counter and the background tasks, which stop with the last clone.
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Queues this process's writers in order; SQLite's busy handler would have them poll.
    gate: Arc<Mutex<()>>,
    changes: Arc<watch::Sender<u64>>,
    own_wakes: Arc<OwnWakes>,
    /// The checkpoints and the watch for other processes' operator changes.
    _tasks: Arc<[AbortOnDropHandle<()>; 2]>,
}

/// A write transaction, with this process's turn to write.
struct WriteTx<'a> {
    tx: Transaction<'static, Sqlite>,
    _turn: MutexGuard<'a, ()>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and applies migrations. A file that
    /// is not SQLite, a SQLite file that is not rota's, or a schema newer than this binary are
    /// refused without changing anything. Needs a tokio runtime (checkpoints and the watch for operators are tasks).
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
            .foreign_keys(true)
            // No write checkpoints: a checkpoint syncs the database file, and every agent
            // waiting to write would wait for the disk too. A background task does it instead.
            .pragma("wal_autocheckpoint", "0");
        let pool = connect(&options, &location).await?;
        migrate(&pool, &location).await?;
        let changes = Arc::new(watch::channel(0).0);
        let own_wakes = Arc::new(OwnWakes::default());
        let watch = wakes::watch_operators(
            path.to_path_buf(),
            pool.clone(),
            changes.clone(),
            own_wakes.clone(),
        );
        let tasks = [tokio::spawn(checkpoint(pool.clone())), tokio::spawn(watch)]
            .map(AbortOnDropHandle::new);
        Ok(SqliteStore {
            pool,
            gate: Arc::default(),
            changes,
            own_wakes,
            _tasks: Arc::new(tasks),
        })
    }

    /// Takes this process's turn to write, then SQLite's write lock.
    async fn begin(&self) -> Result<WriteTx<'_>> {
        let turn = self.gate.lock().await;
        let tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .context("beginning a write")?;
        Ok(WriteTx { tx, _turn: turn })
    }

    /// Commits `write`, then moves the change counter by `wakes`. An operator's write first
    /// moves the `wake` setting, which is how other processes' agents hear of it (see `wakes`).
    async fn commit(&self, mut write: WriteTx<'_>, wakes: u64, operator: bool) -> Result<()> {
        if operator {
            let value = sqlx::query_scalar::<_, i64>(wakes::BUMP)
                .fetch_one(&mut *write.tx)
                .await
                .context("moving the operators' wake")?;
            self.own_wakes.record(value);
        }
        write.tx.commit().await.context("committing a write")?;
        if wakes > 0 {
            self.changes.send_modify(|n| *n = n.wrapping_add(wakes));
        }
        Ok(())
    }

    /// Runs one write, in a transaction of its own, that wakes no waiter.
    async fn quietly<T>(
        &self,
        operator: bool,
        write: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T>,
    ) -> Result<T> {
        let mut tx = self.begin().await?;
        let answer = write(&mut tx.tx).await?;
        self.commit(tx, 0, operator).await?;
        Ok(answer)
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
    let open = || {
        SqlitePoolOptions::new()
            .max_connections(8)
            // A call dropped halfway (its caller gave up) may leave its connection inside a
            // transaction: sqlx's begin is not cancel-safe (launchbadge/sqlx#2054). Such a
            // connection is closed, which rolls the transaction back, instead of serving the
            // next call with a write lock held.
            .after_release(|connection, _| {
                Box::pin(async move {
                    Ok(
                        <Sqlite as Database>::TransactionManager::get_transaction_depth(connection)
                            == 0,
                    )
                })
            })
            .connect_with(options.clone())
    };
    let shortly = ConstantBuilder::new()
        .with_delay(Duration::from_millis(20))
        .with_max_times(50);
    open.retry(shortly)
        .when(is_busy)
        .await
        .map_err(|e| Error::NotRota {
            location: location.to_string(),
            reason: e.to_string(),
        })
}

/// How often the write-ahead log is folded into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Checkpoints the write-ahead log beside the writes until the store is dropped. PASSIVE never
/// blocks a writer or a reader; a log that keeps growing is folded in on the next round.
async fn checkpoint(pool: SqlitePool) {
    let mut every = tokio::time::interval(CHECKPOINT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
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
    let not_rota = |reason: String| Error::NotRota {
        location: location.to_string(),
        reason,
    };
    let attempt = async || {
        let mut conn = pool.acquire().await.map_err(|e| not_rota(e.to_string()))?;
        Sql::<Sqlite>::check_is_rota(&mut conn, location, &MIGRATOR).await?;
        drop(conn);
        MIGRATOR
            .run(pool)
            .await
            .map_err(|e| not_rota(format!("migration failed: {e}")))
    };
    let shortly = ConstantBuilder::new()
        .with_delay(Duration::from_millis(50))
        .with_max_times(4);
    attempt
        .retry(shortly)
        .when(|e| matches!(e, Error::NotRota { reason, .. } if reason.starts_with("migration failed")))
        .await
}

#[async_trait]
impl Store for SqliteStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.quietly(false, async |tx| {
            Sql::<Sqlite>::open_session(tx, node, millis(ttl)).await
        })
        .await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.quietly(false, async |tx| {
            Sql::<Sqlite>::heartbeat(tx, session, millis(ttl)).await
        })
        .await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        self.quietly(false, async |tx| {
            Sql::<Sqlite>::close_session(tx, session).await
        })
        .await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        let mut conn = self.pool.acquire().await.context("acquiring a slot")?;
        if let Some(changes) = Sql::<Sqlite>::waits(&mut conn, session).await? {
            return Ok(Acquire::Wait { changes });
        }
        drop(conn);
        self.quietly(false, async |tx| Sql::<Sqlite>::acquire(tx, session).await)
            .await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        self.quietly(false, async |tx| {
            Sql::<Sqlite>::fence(tx, session, millis(ttl)).await
        })
        .await
    }

    async fn write(&self, writer: Writer<'_>, write: Write) -> Result<Written> {
        let mut tx = self.begin().await?;
        if let Writer::Fenced(session, ttl) = writer {
            Sql::<Sqlite>::fence(&mut tx.tx, session, millis(ttl)).await?;
        }
        let (written, wakes) = record::write(&mut tx.tx, writer, &write).await?;
        let operator = matches!(writer, Writer::Operator(_));
        self.commit(tx, u64::from(wakes), operator).await?;
        Ok(written)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn record(&self, node: &NodeName) -> Result<Option<NodeOverview>> {
        let mut conn = self.pool.acquire().await.context("reading a node")?;
        Ok(Sql::<Sqlite>::record(&mut conn, node, None)
            .await?
            .map(|read| read.record))
    }

    async fn fleet(&self) -> Result<Fleet> {
        let mut conn = self.pool.acquire().await.context("reading the fleet")?;
        Sql::<Sqlite>::fleet(&mut conn).await
    }

    async fn settings(&self) -> Result<Settings> {
        let mut conn = self.pool.acquire().await.context("reading the settings")?;
        Sql::<Sqlite>::settings(&mut conn).await
    }

    async fn set(&self, setting: Setting) -> Result<Option<Pause>> {
        let mut tx = self.begin().await?;
        let answer = Sql::<Sqlite>::set(&mut tx.tx, &setting).await?;
        self.commit(tx, setting.wakes(), true).await?;
        Ok(answer)
    }

    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        self.quietly(true, async |tx| {
            Sql::<Sqlite>::submit_procedure(tx, spec).await
        })
        .await
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        let mut conn = self.pool.acquire().await.context("reading procedures")?;
        Sql::<Sqlite>::procedures(&mut conn).await
    }

    async fn read_history(&self, filter: &HistoryFilter, part: Part) -> Result<History> {
        let mut conn = self.pool.acquire().await.context("reading history")?;
        Sql::<Sqlite>::read_history(&mut conn, filter, part).await
    }

    async fn record_audit(&self, record: &NewAuditRecord) -> Result<AuditRecord> {
        self.quietly(false, async |tx| {
            Sql::<Sqlite>::record_audit(tx, record).await
        })
        .await
    }
}

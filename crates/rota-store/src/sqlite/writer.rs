//! The one writer of a SQLite store: a task that owns the write connection and commits the
//! operations of every agent in this process in batches. Whatever is queued when a batch starts
//! goes into one `BEGIN IMMEDIATE … COMMIT`, so a burst of agents (a fleet's sentinels written
//! at once) pays for one commit instead of one each. A caller's reply is sent only after its
//! batch committed: a write is never reported before it is durable.

use super::wakes::OwnWakes;
use std::sync::Arc;

use rota_core::{NodeName, ProcedureSpec, Write};
use sqlx::SqliteConnection;
use tokio::sync::{mpsc, oneshot, watch};

use super::{wakes, writes};
use crate::WAKE_ALL;
use crate::audit::{AuditRecord, NewAuditRecord};
use crate::error::{Error, Result};
use crate::model::{Acquire, Pause, ProcedureRecord, Session, Setting, Written};

/// Most operations in one transaction: bounds how long another process waits for the lock.
const MAX_BATCH: usize = 256;

pub(super) type Reply<T> = oneshot::Sender<Result<T>>;

pub(super) enum Op {
    OpenSession {
        node: NodeName,
        ttl_ms: i64,
        reply: Reply<Session>,
    },
    Heartbeat {
        session: Session,
        ttl_ms: i64,
        reply: Reply<()>,
    },
    CloseSession {
        session: Session,
        reply: Reply<()>,
    },
    /// Changes a setting; returns the pause it set or lifted.
    Set {
        setting: Setting,
        reply: Reply<Option<Pause>>,
    },
    AcquireSlot {
        session: Session,
        reply: Reply<Acquire>,
    },
    Fence {
        session: Session,
        ttl_ms: i64,
        reply: Reply<u32>,
    },
    /// A write of a node's record: an agent's (fenced by `session`, after the fence's proof
    /// when `fence_ttl_ms` is set) or an operator's (without a session).
    Write {
        node: NodeName,
        session: Option<Session>,
        fence_ttl_ms: Option<i64>,
        write: Box<Write>,
        reply: Reply<Written>,
    },
    SubmitProcedure {
        spec: Box<ProcedureSpec>,
        reply: Reply<(ProcedureRecord, bool)>,
    },
    RecordAudit {
        record: Box<NewAuditRecord>,
        reply: Reply<AuditRecord>,
    },
}

/// An executed operation waiting for its batch: called with the commit's error, if any.
type Done = Box<dyn FnOnce(Option<&str>) + Send>;

fn done<T: Send + 'static>(reply: Reply<T>, result: Result<T>) -> Done {
    Box::new(move |commit_error: Option<&str>| {
        let result = match commit_error {
            Some(reason) => Err(Error::RolledBack {
                reason: reason.to_string(),
            }),
            None => result,
        };
        // A caller that stopped waiting has nothing left to learn.
        let _ = reply.send(result);
    })
}

/// Whether an operation is an operator's, which another process's agents must hear of at once
/// (see `wakes`).
fn by_operator(op: &Op) -> bool {
    matches!(
        op,
        Op::Set { .. } | Op::Write { session: None, .. } | Op::SubmitProcedure { .. }
    )
}

/// How far a successful setting moves `Store::changes` (see its documentation): a new
/// concurrency, or a pause lifted, may let every waiter go on.
fn wakes(setting: &Setting) -> u64 {
    match setting {
        Setting::Concurrency(_) | Setting::Resume => WAKE_ALL,
        Setting::Pause { .. } => 0,
    }
}

async fn execute(conn: &mut SqliteConnection, op: Op) -> (Done, u64) {
    match op {
        Op::OpenSession {
            node,
            ttl_ms,
            reply,
        } => (
            done(reply, writes::open_session(conn, &node, ttl_ms).await),
            0,
        ),
        Op::Heartbeat {
            session,
            ttl_ms,
            reply,
        } => (
            done(reply, writes::heartbeat(conn, &session, ttl_ms).await),
            0,
        ),
        Op::CloseSession { session, reply } => {
            (done(reply, writes::close_session(conn, &session).await), 0)
        }
        Op::Set { setting, reply } => {
            let result = writes::set(conn, &setting).await;
            let wake = if result.is_ok() { wakes(&setting) } else { 0 };
            (done(reply, result), wake)
        }
        Op::AcquireSlot { session, reply } => {
            (done(reply, writes::acquire_slot(conn, &session).await), 0)
        }
        Op::Fence {
            session,
            ttl_ms,
            reply,
        } => (done(reply, writes::fence(conn, &session, ttl_ms).await), 0),
        Op::Write {
            node,
            session,
            fence_ttl_ms,
            write,
            reply,
        } => {
            let result = writes::write(conn, &node, session.as_ref(), fence_ttl_ms, &write).await;
            let wake = result.as_ref().map_or(0, |(_, wakes)| u64::from(*wakes));
            (done(reply, result.map(|(written, _)| written)), wake)
        }
        Op::SubmitProcedure { spec, reply } => {
            (done(reply, writes::submit_procedure(conn, &spec).await), 0)
        }
        Op::RecordAudit { record, reply } => {
            (done(reply, writes::record_audit(conn, &record).await), 0)
        }
    }
}

/// Runs until every sender (every clone of the store) is gone.
pub(super) async fn run(
    mut conn: SqliteConnection,
    mut ops: mpsc::UnboundedReceiver<Op>,
    changes: Arc<watch::Sender<u64>>,
    own_wake: Arc<OwnWakes>,
    // Dropped when the last handle is gone: what watches for other processes stops with it.
    _stopped: oneshot::Sender<()>,
) {
    while let Some(first) = ops.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let mut finished = Vec::with_capacity(batch.len());
        let mut woken = 0u64;
        let begun = sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await;
        let outcome = match begun {
            Ok(_) => {
                let mut operator = false;
                for op in batch {
                    operator |= by_operator(&op);
                    let (done, wake) = execute(&mut conn, op).await;
                    finished.push(done);
                    woken = woken.saturating_add(wake);
                }
                // Other processes' agents hear of an operator's change through this (see
                // `wakes`); one that was refused wakes them for nothing, and costs a re-read.
                let bumped = if operator {
                    // Known before the commit, as the commit is what the watcher sees.
                    sqlx::query_scalar::<_, i64>(wakes::BUMP)
                        .fetch_one(&mut conn)
                        .await
                        .map(|value| own_wake.record(value))
                } else {
                    Ok(())
                };
                match bumped {
                    Ok(()) => sqlx::query("COMMIT").execute(&mut conn).await.map(drop),
                    Err(e) => Err(e),
                }
            }
            Err(e) => {
                for op in batch {
                    finished.push(refuse(op));
                }
                Err(e)
            }
        };
        let commit_error = match outcome {
            Ok(()) => {
                if woken > 0 {
                    changes.send_modify(|n| *n = n.wrapping_add(woken));
                }
                None
            }
            Err(e) => {
                // Leaves the connection ready for the next batch; nothing of this one stays.
                let _ = sqlx::query("ROLLBACK").execute(&mut conn).await;
                Some(e.to_string())
            }
        };
        for done in finished {
            done(commit_error.as_deref());
        }
    }
}

/// An operation that never ran because its batch could not start; the reason comes with the
/// commit error.
fn refuse(op: Op) -> Done {
    fn skipped<T: Send + 'static>(reply: Reply<T>) -> Done {
        done(
            reply,
            Err(Error::RolledBack {
                reason: "the batch did not start".into(),
            }),
        )
    }
    match op {
        Op::OpenSession { reply, .. } => skipped(reply),
        Op::Heartbeat { reply, .. } | Op::CloseSession { reply, .. } => skipped(reply),
        Op::Set { reply, .. } => skipped(reply),
        Op::AcquireSlot { reply, .. } => skipped(reply),
        Op::Fence { reply, .. } => skipped(reply),
        Op::Write { reply, .. } => skipped(reply),
        Op::SubmitProcedure { reply, .. } => skipped(reply),
        Op::RecordAudit { reply, .. } => skipped(reply),
    }
}

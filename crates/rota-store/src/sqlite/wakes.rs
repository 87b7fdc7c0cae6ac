//! Operators' changes made by another process reach this one's agents at once. Every operator
//! write (a request, cancel, retry, unlock, procedure, pause, resume or new concurrency) moves
//! the `wake` setting in its own transaction; this process watches the database's write-ahead
//! log with inotify and, when a commit there moved `wake`, jumps its change counter by
//! [`WAKE_ALL`], so that every waiting agent looks again (for new procedures too). Agents' own
//! writes leave `wake` alone: they wake nobody beyond what the writer already counts, and a
//! move that was this process's own operator write alone is not counted twice.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use futures::StreamExt;
use inotify::{Inotify, WatchMask};
use sqlx::SqlitePool;
use tokio::sync::watch;
use tracing::warn;

use crate::WAKE_ALL;

/// The setting every operator write moves.
pub(super) const WAKE_KEY: &str = "wake";

/// The statement that moves it, inside the operator write's transaction.
pub(super) const BUMP: &str = "INSERT INTO rota_meta (key, value) VALUES ('wake', '1') \
     ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1 \
     RETURNING CAST(value AS INTEGER)";

async fn wake_value(pool: &SqlitePool) -> Option<i64> {
    match sqlx::query_scalar("SELECT CAST(value AS INTEGER) FROM rota_meta WHERE key = ?")
        .bind(WAKE_KEY)
        .fetch_optional(pool)
        .await
    {
        Ok(value) => value,
        Err(e) => {
            warn!(error = %e, "reading the operators' wake failed; the store poll finds their changes");
            None
        }
    }
}

/// Watches the directory of the database at `path`; the caller ends it with the store's
/// writer, which also closes the inotify instance (a process has few of them). Without inotify
/// (a filesystem that has none), agents see other processes' changes at their store poll, as
/// before, and the log says so.
pub(super) async fn watch_operators(
    path: &Path,
    pool: SqlitePool,
    changes: Arc<watch::Sender<u64>>,
    own_wake: Arc<AtomicI64>,
) {
    let Some(name) = path.file_name() else {
        return;
    };
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => Path::new(".").to_path_buf(),
    };
    let mut wal = OsString::from(name);
    wal.push("-wal");
    let events = Inotify::init().and_then(|inotify| {
        inotify
            .watches()
            .add(&dir, WatchMask::MODIFY | WatchMask::CREATE)?;
        inotify.into_event_stream([0; 4096])
    });
    let events = match events {
        Ok(events) => events,
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot watch the database's directory; other processes' operator changes are seen at the store poll");
            return;
        }
    };
    let mut seen = wake_value(&pool).await;
    // Every commit of every process appends to the log: one read for all the events that
    // arrived together.
    let mut batches = events.ready_chunks(256);
    while let Some(batch) = batches.next().await {
        let logged = batch.iter().any(|e| {
            e.as_ref()
                .is_ok_and(|e| e.name.as_deref() == Some(wal.as_os_str()))
        });
        if !logged {
            continue;
        }
        let Some(now) = wake_value(&pool).await else {
            continue;
        };
        let own_alone = now == own_wake.load(Ordering::SeqCst) && seen.map(|s| s + 1) == Some(now);
        if Some(now) != seen {
            seen = Some(now);
            if !own_alone {
                changes.send_modify(|n| *n = n.wrapping_add(WAKE_ALL));
            }
        }
    }
}

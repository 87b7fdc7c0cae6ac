//! Operators' changes made by another process reach this one's agents at once. Every operator
//! write (a request, cancel, retry, unlock, procedure, pause, resume or new concurrency) moves
//! the `wake` setting in its own transaction; this process watches the database's write-ahead
//! log with inotify and, when a commit there moved `wake`, jumps its change counter by
//! [`WAKE_ALL`], so that every waiting agent looks again (for new procedures too). Agents' own
//! writes leave `wake` alone: they wake nobody beyond what their commit already counts, and moves
//! that were all this process's own operator writes are not counted twice.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;

use futures::StreamExt;
use inotify::{Inotify, WatchMask};
use sqlx::SqlitePool;
use tokio::sync::watch;
use tracing::warn;

use crate::WAKE_ALL;

/// The statement that moves `wake`, the setting every operator write moves, inside the
/// operator write's transaction.
pub(super) const BUMP: &str = "INSERT INTO rota_meta (key, value) VALUES ('wake', '1') \
     ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1 \
     RETURNING CAST(value AS INTEGER)";

/// The values of `wake` this process's operator writes set, until the watcher has seen them.
#[derive(Debug, Default)]
pub(super) struct OwnWakes(Mutex<BTreeSet<i64>>);

impl OwnWakes {
    /// Records `value` as set by this process (before its commit, which is what the watcher sees).
    pub(super) fn record(&self, value: i64) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(value);
    }

    /// Whether every move of `wake` after `seen` up to `now` was this process's own, forgetting
    /// those up to `now`.
    fn all_own(&self, seen: i64, now: i64) -> bool {
        let mut own = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let all = (seen + 1..=now).all(|value| own.contains(&value));
        own.retain(|value| *value > now);
        all
    }
}

async fn wake_value(pool: &SqlitePool) -> Option<i64> {
    match sqlx::query_scalar("SELECT CAST(value AS INTEGER) FROM rota_meta WHERE key = 'wake'")
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

/// Watches the directory of the database at `path` until the store's last handle ends it,
/// which also closes the inotify instance (a process has few of them). Without inotify
/// (a filesystem that has none), agents see other processes' changes at their store poll, as
/// before, and the log says so.
pub(super) async fn watch_operators(
    path: PathBuf,
    pool: SqlitePool,
    changes: Arc<watch::Sender<u64>>,
    own_wake: Arc<OwnWakes>,
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
    // No row yet is a wake of 0: the first operator write sets it to 1.
    let mut seen = wake_value(&pool).await.unwrap_or(0);
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
        if now != seen {
            let own_alone = own_wake.all_own(seen, now);
            seen = now;
            if !own_alone {
                changes.send_modify(|n| *n = n.wrapping_add(WAKE_ALL));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's own operator writes wake its agents at their commit, not again through
    /// the log: the first ever (the setting did not exist, a wake of 0), and several that one
    /// batch of log events shows at once. A move by another process among them wakes them.
    #[test]
    fn only_moves_that_were_all_this_processs_own_are_not_counted_again() {
        let own = OwnWakes::default();
        own.record(1);
        assert!(own.all_own(0, 1), "the first wake, from no setting at all");
        own.record(2);
        own.record(3);
        assert!(own.all_own(1, 3), "two own writes seen in one batch");
        own.record(5);
        assert!(!own.all_own(3, 5), "4 was another process's");
        assert!(!own.all_own(5, 6), "forgotten once seen");
    }
}

//! Helpers shared by the integration tests.
#![allow(
    dead_code,
    reason = "each test binary uses its own subset of these helpers"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rota_sentinel::{SentinelWatcher, Snapshot, WatcherOptions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Generous: the tests assert behaviour, never speed.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// A safety re-check so slow that it never runs during a test: detection must come from events.
pub fn events_only() -> WatcherOptions {
    WatcherOptions {
        safety_recheck: Duration::from_secs(3600),
    }
}

pub fn spawn(
    paths: &[PathBuf],
) -> (
    SentinelWatcher,
    watch::Receiver<Snapshot>,
    CancellationToken,
) {
    let cancel = CancellationToken::new();
    let watcher = SentinelWatcher::spawn(paths.to_vec(), events_only(), cancel.clone()).unwrap();
    let receiver = watcher.subscribe();
    (watcher, receiver, cancel)
}

/// Waits (up to [`PATIENCE`]) until the latest snapshot satisfies `condition`.
pub async fn wait_until(
    receiver: &mut watch::Receiver<Snapshot>,
    what: &str,
    condition: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            {
                let snapshot = receiver.borrow_and_update();
                if condition(&snapshot) {
                    return snapshot.clone();
                }
            }
            receiver.changed().await.unwrap();
        }
    })
    .await;
    match waited {
        Ok(snapshot) => snapshot,
        Err(_) => panic!(
            "timed out waiting for {what}; last snapshot: {:?}",
            receiver.borrow()
        ),
    }
}

pub async fn wait_present(receiver: &mut watch::Receiver<Snapshot>, path: &Path) -> SystemTime {
    let snapshot = wait_until(
        receiver,
        &format!("{} present", path.display()),
        |snapshot| snapshot.get(path).unwrap().present.is_some(),
    )
    .await;
    snapshot.get(path).unwrap().present.unwrap()
}

pub async fn wait_absent(receiver: &mut watch::Receiver<Snapshot>, path: &Path) {
    wait_until(
        receiver,
        &format!("{} absent", path.display()),
        |snapshot| snapshot.get(path).unwrap().present.is_none(),
    )
    .await;
}

pub fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

pub async fn stop(watcher: SentinelWatcher, cancel: &CancellationToken) {
    cancel.cancel();
    tokio::time::timeout(PATIENCE, watcher.join())
        .await
        .unwrap()
        .unwrap();
}

//! Event-driven watcher for rota's sentinel files.
//!
//! An agent learns that its node needs maintenance when a *sentinel* file appears, such as
//! `/run/reboot-needed`, `/var/run/reboot-required` or `/var/maintenance-required`.
//! [`SentinelWatcher`] reports, for a set of such paths, whether each exists and its mtime, and
//! wakes subscribers as soon as that changes.
//!
//! # Design
//!
//! * **Parent-directory watches.** A watch on the file itself would miss its creation, would die
//!   with its deletion and would follow the old inode across a rename. inotify is therefore armed
//!   on the sentinel's *parent directory*, which reports creation, deletion, renames in and out,
//!   writes and attribute changes (`touch`) of its entries by name. Each batch of events is
//!   handled at once (no debounce): the sentinels it names are stat()'ed, and subscribers are
//!   woken only if a presence or mtime actually changed, never for unrelated entries.
//! * **Ancestor re-arming.** If the parent directory does not exist (yet), the nearest existing
//!   ancestor is watched instead. When an entry on the way down appears, the watches are re-armed
//!   one level deeper (or straight at the parent if the whole chain appeared at once), and every
//!   sentinel is stat()'ed again, since files may have been created before the new watch existed.
//!   When a watched directory is deleted, moved or unmounted, the same re-arming walks back up.
//! * **Overflow rescan.** If the kernel's event queue overflows (`IN_Q_OVERFLOW`), or a watcher
//!   falls so far behind that its own queue fills, events were lost: every watch is re-armed and
//!   every sentinel stat()'ed.
//! * **Safety re-check.** Some changes produce no event on any watched directory (for example,
//!   an ancestor of a watched directory renamed away, leaving the watch on the old inode). A slow
//!   periodic re-check ([`WatcherOptions::safety_recheck`], 60 s by default) re-arms and
//!   re-stat()s everything. Normal detection never waits for it.
//! * **One inotify instance per process.** `fs.inotify.max_user_instances` is 128 on many
//!   systems, and one process may run hundreds of watchers. All watchers share one inotify
//!   instance, read by one dedicated thread that forwards each event to the watchers holding
//!   that watch (the kernel gives one descriptor per watched inode, so watchers of the same
//!   directory share it, reference-counted). The reader is a thread rather than a task so that
//!   it does not depend on the lifetime of any one tokio runtime.
//!
//! Sentinels are stat()'ed through symlinks; a change to a symlink's target elsewhere is only
//! seen by the safety re-check.
//!
//! # Layout
//!
//! - `lib.rs`: [`SentinelWatcher`], its [`WatcherOptions`], and the [`Snapshot`] it reports;
//! - `hub`: the process-wide inotify instance and its reader thread;
//! - `tracker`: one watcher's armed directories and each sentinel's last state;
//! - `error`: the crate's error type;
//! - [`testing`]: helpers for tests that drive a watcher.

mod error;
mod hub;
mod tracker;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

pub use error::Error;
use hub::{HubEvent, Lagged};
use tracker::{Batch, Tracker};

/// The observed state of one sentinel path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelState {
    pub path: PathBuf,
    /// The file's mtime when it exists, `None` when it does not.
    pub present: Option<SystemTime>,
}

/// The state of every watched sentinel, in the order they were given (without duplicates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub sentinels: Vec<SentinelState>,
    /// When the sentinels were last stat()'ed.
    pub observed_at: Instant,
}

impl Snapshot {
    /// Whether any sentinel exists.
    pub fn any_present(&self) -> bool {
        self.sentinels.iter().any(|state| state.present.is_some())
    }

    /// The state of the sentinel at `path`, if it is watched.
    pub fn get(&self, path: &Path) -> Option<&SentinelState> {
        self.sentinels.iter().find(|state| state.path == path)
    }
}

/// Tuning for a [`SentinelWatcher`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatcherOptions {
    /// How often every sentinel is re-checked in case an event was missed. Must not be zero.
    pub safety_recheck: Duration,
}

impl Default for WatcherOptions {
    fn default() -> Self {
        WatcherOptions {
            safety_recheck: Duration::from_secs(60),
        }
    }
}

/// Watches a set of sentinel paths; see the [crate documentation](crate) for how.
#[derive(Debug)]
pub struct SentinelWatcher {
    snapshots: watch::Receiver<Snapshot>,
    task: JoinHandle<Result<(), Error>>,
}

impl SentinelWatcher {
    /// Validates the paths, sets up inotify, takes the first snapshot, and spawns the watch task
    /// on the current tokio runtime. The task runs until `cancel` is cancelled.
    ///
    /// Paths must be absolute file paths. An ancestor that exists but is not a directory, or a
    /// directory that cannot be watched, is an error naming it.
    pub fn spawn(
        paths: Vec<PathBuf>,
        options: WatcherOptions,
        cancel: CancellationToken,
    ) -> Result<SentinelWatcher, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        if options.safety_recheck.is_zero() {
            return Err(Error::ZeroRecheckInterval);
        }
        let paths = tracker::validate(paths)?;
        let hub = hub::hub().map_err(|source| Error::Init { source })?;
        // Register before arming so that no event of a new watch is lost, and arm before the
        // first stat() so that no change after it is lost.
        let (registration, events, lagged) = hub.register();
        let mut tracker = Tracker::new(registration, paths);
        tracker.rearm(true)?;
        tracker.refresh_all();
        let (tx, snapshots) = watch::channel(Snapshot {
            sentinels: tracker.states().to_vec(),
            observed_at: Instant::now(),
        });
        let task = runtime.spawn(run(
            tracker,
            events,
            lagged,
            tx,
            options.safety_recheck,
            cancel,
        ));
        Ok(SentinelWatcher { snapshots, task })
    }

    /// Receiver that always holds the latest snapshot; it is marked changed only when the
    /// presence or mtime of some sentinel changed (not on unrelated events in the directory).
    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        let mut receiver = self.snapshots.clone();
        receiver.mark_unchanged();
        receiver
    }

    /// The latest snapshot.
    pub fn current(&self) -> Snapshot {
        self.snapshots.borrow().clone()
    }

    /// Waits for the watch task to end (after cancel), returning its error if it failed.
    pub async fn join(self) -> Result<(), Error> {
        self.task.await.map_err(|source| Error::Task { source })?
    }
}

async fn run(
    mut tracker: Tracker,
    mut events: mpsc::Receiver<HubEvent>,
    lagged: Arc<Lagged>,
    snapshots: watch::Sender<Snapshot>,
    safety_recheck: Duration,
    cancel: CancellationToken,
) -> Result<(), Error> {
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + safety_recheck, safety_recheck);
    recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(()),
            event = events.recv() => {
                let Some(event) = event else {
                    return Err(Error::EventReader { reason: "the event hub closed".to_owned() });
                };
                let mut batch = Batch::default();
                tracker.note(event, &mut batch)?;
                while let Ok(event) = events.try_recv() {
                    tracker.note(event, &mut batch)?;
                }
                batch.rescan |= lagged.take();
                tracker.apply(batch);
            }
            () = lagged.notified() => {
                // The mark may already have been handled with the last batch.
                if lagged.take() {
                    tracing::warn!("sentinel watcher fell behind its events; rescanning");
                    tracker.rescan();
                }
            }
            _ = recheck.tick() => {
                if tracker.rescan() {
                    tracing::warn!("safety re-check found a sentinel change that no event reported");
                }
            }
        }
        publish(&snapshots, tracker.states());
    }
}

/// Stores the states, waking subscribers only if some presence or mtime changed.
fn publish(snapshots: &watch::Sender<Snapshot>, states: &[SentinelState]) {
    snapshots.send_if_modified(|snapshot| {
        snapshot.observed_at = Instant::now();
        if snapshot.sentinels == states {
            return false;
        }
        snapshot.sentinels = states.to_vec();
        true
    });
}

/// Hooks for tests that must drive the shared inotify instance into rare states.
#[doc(hidden)]
pub mod testing {
    use std::sync::MutexGuard;

    use crate::Error;
    use crate::hub::{self, State};

    /// While this lives, the reader thread cannot hand events on, so the kernel's event queue
    /// fills up and eventually overflows.
    pub struct DeliveryPause {
        _state: MutexGuard<'static, State>,
    }

    /// Pauses event delivery to every watcher in the process until the result is dropped.
    pub fn pause_delivery() -> Result<DeliveryPause, Error> {
        let hub = hub::hub().map_err(|source| Error::Init { source })?;
        Ok(DeliveryPause { _state: hub.lock() })
    }

    /// How many times the shared inotify queue overflowed in this process.
    pub fn overflow_count() -> u64 {
        hub::started().map_or(0, hub::Hub::overflows)
    }
}

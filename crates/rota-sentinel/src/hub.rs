//! The process-wide inotify instance, shared by every [`SentinelWatcher`](crate::SentinelWatcher).
//!
//! One instance (and one reader thread) serves the whole process, so the number of watchers is
//! not bounded by `fs.inotify.max_user_instances` (128 on many systems). The reader is a plain
//! thread rather than a tokio task so that the hub outlives any particular runtime.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString, c_int};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use inotify::{Event, EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Notify, mpsc};

/// Large enough for hundreds of events per read; must hold at least one event with a
/// `NAME_MAX` name.
const READ_BUFFER: usize = 16 * 1024;

/// Events queued per watcher before it is marked as lagged (and then rescans everything).
const CHANNEL_CAPACITY: usize = 256;

/// What every watched directory reports: entries appearing, disappearing or changing, and the
/// directory itself going away.
const DIR_MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::MODIFY)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

/// One event as delivered to a watcher.
#[derive(Debug)]
pub(crate) enum HubEvent {
    /// An event on a watch this watcher holds.
    Fs {
        wd: c_int,
        mask: EventMask,
        name: Option<OsString>,
    },
    /// The kernel's event queue overflowed: events were lost, for any watch.
    Overflow,
    /// The reader thread stopped; no further events will arrive.
    ReaderFailed(Arc<str>),
}

/// Set when a watcher's channel was full and an event had to be dropped.
#[derive(Debug, Default)]
pub(crate) struct Lagged {
    flag: AtomicBool,
    notify: Notify,
}

impl Lagged {
    /// Returns whether events were dropped since the last call, clearing the mark.
    pub(crate) fn take(&self) -> bool {
        self.flag.swap(false, Ordering::AcqRel)
    }

    /// Resolves once events were dropped (possibly before this call).
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }
}

struct Subscriber {
    tx: mpsc::Sender<HubEvent>,
    lagged: Arc<Lagged>,
}

impl Subscriber {
    fn deliver(&self, event: HubEvent) {
        match self.tx.try_send(event) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.lagged.flag.store(true, Ordering::Release);
                self.lagged.notify.notify_one();
            }
        }
    }
}

struct Watched {
    wd: WatchDescriptor,
    watchers: HashSet<u64>,
}

pub(crate) struct State {
    watches: Watches,
    /// Kernel watches by descriptor number; the kernel returns the same descriptor for every
    /// `add` of the same inode, so watchers share (and reference-count) them.
    watched: HashMap<c_int, Watched>,
    subscribers: HashMap<u64, Subscriber>,
    failure: Option<Arc<str>>,
    overflows: u64,
}

impl State {
    fn dispatch(&mut self, event: &Event<&OsStr>) {
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            self.overflows += 1;
            tracing::warn!("inotify event queue overflowed; every sentinel watcher rescans");
            for subscriber in self.subscribers.values() {
                subscriber.deliver(HubEvent::Overflow);
            }
            return;
        }
        let wd = event.wd.get_watch_descriptor_id();
        let Some(watched) = self.watched.get(&wd) else {
            return;
        };
        for id in &watched.watchers {
            if let Some(subscriber) = self.subscribers.get(id) {
                subscriber.deliver(HubEvent::Fs {
                    wd,
                    mask: event.mask,
                    name: event.name.map(OsStr::to_os_string),
                });
            }
        }
        if event.mask.contains(EventMask::IGNORED) {
            // The kernel has dropped the watch (directory deleted or unmounted).
            self.watched.remove(&wd);
        }
    }

    fn fail(&mut self, reason: Arc<str>) {
        for subscriber in self.subscribers.values() {
            subscriber.deliver(HubEvent::ReaderFailed(Arc::clone(&reason)));
        }
        self.failure = Some(reason);
    }

    fn release(&mut self, watcher: u64, wd: c_int) {
        let Some(watched) = self.watched.get_mut(&wd) else {
            return;
        };
        watched.watchers.remove(&watcher);
        if watched.watchers.is_empty()
            && let Some(watched) = self.watched.remove(&wd)
            && let Err(error) = self.watches.remove(watched.wd)
        {
            // The kernel already dropped it (its IN_IGNORED is still queued).
            tracing::debug!(wd, %error, "inotify watch already gone");
        }
    }
}

pub(crate) struct Hub {
    state: Arc<Mutex<State>>,
    next_id: AtomicU64,
}

static HUB: OnceLock<Hub> = OnceLock::new();
static HUB_INIT: Mutex<()> = Mutex::new(());

/// The process-wide hub, started on first use. A failed start is retried on the next call.
pub(crate) fn hub() -> io::Result<&'static Hub> {
    if let Some(hub) = HUB.get() {
        return Ok(hub);
    }
    let _init = HUB_INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(hub) = HUB.get() {
        return Ok(hub);
    }
    let hub = Hub::start()?;
    Ok(HUB.get_or_init(|| hub))
}

/// The hub if it was started, for diagnostics.
pub(crate) fn started() -> Option<&'static Hub> {
    HUB.get()
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hub {
    fn start() -> io::Result<Hub> {
        let inotify = Inotify::init()?;
        let state = Arc::new(Mutex::new(State {
            watches: inotify.watches(),
            watched: HashMap::new(),
            subscribers: HashMap::new(),
            failure: None,
            overflows: 0,
        }));
        let reader_state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("rota-sentinel-inotify".to_owned())
            .spawn(move || read_loop(inotify, &reader_state))?;
        Ok(Hub {
            state,
            next_id: AtomicU64::new(0),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(crate) fn overflows(&self) -> u64 {
        self.lock().overflows
    }

    /// Registers a new watcher; events for the watches it acquires arrive on the receiver.
    pub(crate) fn register(&'static self) -> (Registration, mpsc::Receiver<HubEvent>, Arc<Lagged>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let lagged = Arc::new(Lagged::default());
        let subscriber = Subscriber {
            tx,
            lagged: Arc::clone(&lagged),
        };
        let mut state = self.lock();
        if let Some(reason) = &state.failure {
            subscriber.deliver(HubEvent::ReaderFailed(Arc::clone(reason)));
        }
        state.subscribers.insert(id, subscriber);
        (Registration { hub: self, id }, rx, lagged)
    }
}

/// A watcher's membership in the hub; dropping it releases all of the watcher's watches.
pub(crate) struct Registration {
    hub: &'static Hub,
    id: u64,
}

impl Registration {
    /// Watches directory `dir` for this watcher and returns the descriptor its events carry.
    /// Registration happens under the hub's lock, so no event of the new watch is lost.
    pub(crate) fn acquire(&self, dir: &Path) -> io::Result<c_int> {
        let mut state = self.hub.lock();
        let wd = state.watches.add(dir, DIR_MASK)?;
        let id = wd.get_watch_descriptor_id();
        state
            .watched
            .entry(id)
            .or_insert_with(|| Watched {
                wd,
                watchers: HashSet::new(),
            })
            .watchers
            .insert(self.id);
        Ok(id)
    }

    /// Gives up this watcher's interest in `wd`; the kernel watch goes when nobody holds it.
    pub(crate) fn release(&self, wd: c_int) {
        self.hub.lock().release(self.id, wd);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        state.subscribers.remove(&self.id);
        let held: Vec<c_int> = state
            .watched
            .iter()
            .filter(|(_, watched)| watched.watchers.contains(&self.id))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in held {
            state.release(self.id, wd);
        }
    }
}

fn read_loop(mut inotify: Inotify, state: &Mutex<State>) {
    let mut buffer = vec![0_u8; READ_BUFFER];
    loop {
        match inotify.read_events_blocking(&mut buffer) {
            Ok(events) => {
                let mut state = lock(state);
                for event in events {
                    state.dispatch(&event);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::error!(%error, "reading inotify events failed; sentinel watchers stop");
                lock(state).fail(error.to_string().into());
                return;
            }
        }
    }
}

//! `Store::changes` on Kubernetes: one watch on the slot Leases.
//!
//! Every release of a slot — by this process or any other, or by the garbage collector deleting
//! a Lease whose Node went away — moves the counter by one, so waiting agents learn of it from
//! the watch rather than by polling. A release made through this handle is counted as soon as
//! the write returns (callers rely on that), and the watch event for the same write is then
//! recognised by its resourceVersion and not counted again.
//!
//! Wake-ups that do not show in the Leases (another process's agent leaving the queue without a
//! slot, an operator's retry, a new concurrency) are counted at once in the process that made
//! them; other processes see them at their agent's periodic re-read of the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tracing::warn;

use crate::slots::{SLOT_LABEL, holder};

/// What is known of one Lease: the resourceVersion last seen, and whether it was held.
#[derive(Clone, Copy, Debug)]
struct Seen {
    version: u64,
    held: bool,
}

/// The change counter and the Lease states behind it, shared by the store and its watch.
#[derive(Debug)]
pub(crate) struct Changes {
    counter: watch::Sender<u64>,
    leases: Mutex<HashMap<String, Seen>>,
}

impl Changes {
    pub(crate) fn new() -> Arc<Changes> {
        Arc::new(Changes {
            counter: watch::channel(0).0,
            leases: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.counter.subscribe()
    }

    pub(crate) fn current(&self) -> u64 {
        *self.counter.borrow()
    }

    pub(crate) fn bump(&self, wakes: u64) {
        if wakes > 0 {
            self.counter.send_modify(|n| *n = n.wrapping_add(wakes));
        }
    }

    /// Records that Lease `name` is at `version` and `held` (or not). A held → free step is
    /// one change; a version already seen (the watch echoing this process's own write, or an
    /// event older than one seen) is ignored. `was_held` is what the writer read before its
    /// write, for Leases this handle has not seen yet.
    pub(crate) fn observe(&self, name: &str, version: Option<&str>, held: bool, was_held: bool) {
        // resourceVersions are etcd revisions: integers that grow with every write. One that
        // does not parse cannot be ordered, and is counted as a new state.
        let version = version
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        let before = match leases.get(name) {
            Some(seen) if seen.version >= version && version != u64::MAX => return,
            Some(seen) => seen.held,
            None => was_held,
        };
        leases.insert(name.to_string(), Seen { version, held });
        drop(leases);
        if before && !held {
            self.bump(1);
        }
    }
}

/// Watches the slot Leases of `api`'s namespace until the task is aborted.
pub(crate) async fn watch_leases(api: Api<Lease>, changes: Arc<Changes>) {
    let config = watcher::Config::default().labels(SLOT_LABEL);
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                let name = lease.metadata.name.clone().unwrap_or_default();
                let held = holder(&lease).is_some();
                changes.observe(
                    &name,
                    lease.metadata.resource_version.as_deref(),
                    held,
                    false,
                );
            }
            Ok(watcher::Event::Delete(lease)) => {
                let name = lease.metadata.name.clone().unwrap_or_default();
                changes.observe(
                    &name,
                    lease.metadata.resource_version.as_deref(),
                    false,
                    false,
                );
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => warn!(error = %e, "watching the slot Leases failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_counts_once_whichever_side_sees_it_first() {
        let changes = Changes::new();
        changes.observe("rota-slot-0", Some("10"), true, false);
        changes.observe("rota-slot-0", Some("11"), false, true);
        changes.observe("rota-slot-0", Some("11"), false, false);
        assert_eq!(*changes.subscribe().borrow(), 1);

        changes.observe("rota-slot-1", Some("20"), false, false);
        assert_eq!(
            *changes.subscribe().borrow(),
            1,
            "a free Lease first seen is no change"
        );
        changes.observe("rota-slot-1", Some("21"), true, false);
        changes.observe("rota-slot-1", Some("22"), false, true);
        changes.observe("rota-slot-1", Some("21"), true, false);
        assert_eq!(
            *changes.subscribe().borrow(),
            2,
            "an old event does not undo a release"
        );
    }

    #[test]
    fn a_grant_is_no_change() {
        let changes = Changes::new();
        changes.observe("rota-slot-0", Some("5"), false, false);
        changes.observe("rota-slot-0", Some("6"), true, false);
        assert_eq!(*changes.subscribe().borrow(), 0);
    }
}

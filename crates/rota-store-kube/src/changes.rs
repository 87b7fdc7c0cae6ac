//! `Store::changes` on Kubernetes, and the slot Leases as this process sees them: one watch on
//! the slot Leases.
//!
//! Every release of a slot — by this process or any other, or by the garbage collector deleting
//! a Lease whose Node went away — moves the counter by one, so waiting agents learn of it from
//! the watch rather than by polling. A release made through this handle is counted as soon as
//! the write returns (callers rely on that), and the watch event for the same write is then
//! recognised by its resourceVersion and not counted again.
//!
//! The same events keep a view of the Leases, so that the store does not list them at every
//! look at the queue. A list is a consistent read: the API server answers it only once its watch
//! cache has caught up with etcd, which on a Lease's quiet cache takes until etcd's next progress
//! report (tens of milliseconds, on the path of every slot handoff). The view is as fresh as the
//! wake-up it answers: the release that woke a waiter came through this watch. Where it is
//! behind, the compare-and-swap of every Lease write refuses, as it does for a racing writer.
//! Until the watch has listed the Leases (and after it failed, until it is back), the store
//! lists them itself.
//!
//! Wake-ups that do not show in the Leases (another process's agent leaving the queue without a
//! slot, an operator's retry) are counted at once in the process that made them; other
//! processes see them at their agent's periodic re-read of the store. A new concurrency, a
//! pause and a resume come through the watch of `rota-config` (see `config_view`).

use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::slots::{SLOT_LABEL, holder};
use crate::view::{ObjectChange, View, watch};

/// The change counter and the Lease view behind it, shared by the store and its watch.
#[derive(Debug)]
pub(crate) struct Changes {
    counter: watch::Sender<u64>,
    view: Mutex<View<Lease>>,
}

fn held(lease: Option<&Lease>) -> bool {
    lease.is_some_and(|l| holder(l).is_some())
}

/// Whether `change` gave a slot back; `was_held` stands for a Lease not seen before.
fn released(change: &ObjectChange<Lease>, was_held: bool) -> bool {
    let before = match &change.before {
        Some(before) => held(before.as_ref()),
        None => was_held,
    };
    before && !held(change.after.as_ref())
}

impl Changes {
    pub(crate) fn new() -> Arc<Changes> {
        Arc::new(Changes {
            counter: watch::channel(0).0,
            view: Mutex::new(View::default()),
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

    fn view(&self) -> std::sync::MutexGuard<'_, View<Lease>> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every slot Lease, if the view holds them all.
    pub(crate) fn leases(&self) -> Option<Vec<Lease>> {
        self.view().all()
    }

    /// Records `lease` as read or written at its resourceVersion. A Lease going from held to
    /// free is one change; a version already seen (the watch echoing this process's own write,
    /// or an event older than one seen) is ignored. `was_held` is what the writer read before
    /// its write, for Leases this handle has not seen yet.
    pub(crate) fn observe(&self, lease: &Lease, was_held: bool) {
        let change = self.view().record(lease, false);
        if change.is_some_and(|change| released(&change, was_held)) {
            self.bump(1);
        }
    }

    /// Applies one event of the watch.
    fn apply(&self, event: watcher::Event<Lease>) {
        let object_changes = self.view().apply(event);
        let releases = object_changes
            .iter()
            .filter(|change| released(change, false))
            .count();
        self.bump(u64::try_from(releases).unwrap_or(u64::MAX));
    }

    /// The watch failed or was stopped: until it is back, the view may miss changes.
    pub(crate) fn lost(&self) {
        self.view().lost();
    }
}

/// Watches the slot Leases of `api`'s namespace until the task is aborted.
pub(crate) async fn watch_leases(api: Api<Lease>, changes: Arc<Changes>) {
    let config = watcher::Config::default().labels(SLOT_LABEL);
    watch(
        api,
        config,
        "the slot Leases",
        |event| changes.apply(event),
        || changes.lost(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::{released, taken};

    fn at(lease: Lease, version: u64) -> Lease {
        let mut lease = lease;
        lease.metadata.resource_version = Some(version.to_string());
        lease
    }

    fn held(slot: u32, node: &str, version: u64) -> Lease {
        at(taken(slot, None, node, None, 1), version)
    }

    fn free(slot: u32, version: u64) -> Lease {
        at(released(&taken(slot, None, "x", None, 1), 2), version)
    }

    fn count(changes: &Changes) -> u64 {
        *changes.subscribe().borrow()
    }

    fn holders(changes: &Changes) -> Option<Vec<(String, Option<String>)>> {
        let mut all: Vec<_> = changes
            .leases()?
            .iter()
            .map(|l| {
                (
                    l.metadata.name.clone().unwrap_or_default(),
                    holder(l).map(String::from),
                )
            })
            .collect();
        all.sort();
        Some(all)
    }

    #[test]
    fn a_release_counts_once_whichever_side_sees_it_first() {
        let changes = Changes::new();
        changes.observe(&held(0, "a", 10), false);
        changes.observe(&free(0, 11), true);
        changes.observe(&free(0, 11), false);
        assert_eq!(count(&changes), 1);

        changes.observe(&free(1, 20), false);
        assert_eq!(count(&changes), 1, "a free Lease first seen is no change");
        changes.observe(&held(1, "b", 21), false);
        changes.observe(&free(1, 22), true);
        changes.observe(&held(1, "b", 21), false);
        assert_eq!(count(&changes), 2, "an old event does not undo a release");
    }

    #[test]
    fn a_grant_is_no_change() {
        let changes = Changes::new();
        changes.observe(&free(0, 5), false);
        changes.observe(&held(0, "a", 6), false);
        assert_eq!(count(&changes), 0);
    }

    #[test]
    fn the_view_is_used_only_once_the_watch_has_listed_the_leases() {
        let changes = Changes::new();
        changes.observe(&held(0, "a", 3), false);
        assert_eq!(
            holders(&changes),
            None,
            "own writes alone are not every Lease"
        );
        changes.apply(watcher::Event::Init);
        changes.apply(watcher::Event::InitApply(held(0, "a", 3)));
        changes.apply(watcher::Event::InitApply(free(1, 4)));
        assert_eq!(holders(&changes), None, "halfway through the list");
        changes.apply(watcher::Event::InitDone);
        assert_eq!(
            holders(&changes),
            Some(vec![
                ("rota-slot-0".into(), Some("a".into())),
                ("rota-slot-1".into(), None)
            ])
        );
        changes.lost();
        assert_eq!(holders(&changes), None, "a failed watch may miss changes");
        changes.apply(watcher::Event::Apply(free(0, 9)));
        assert_eq!(
            holders(&changes),
            Some(vec![
                ("rota-slot-0".into(), None),
                ("rota-slot-1".into(), None)
            ])
        );
        assert_eq!(count(&changes), 1);
    }

    #[test]
    fn the_view_follows_own_writes_and_ignores_older_events() {
        let changes = Changes::new();
        changes.apply(watcher::Event::Init);
        changes.apply(watcher::Event::InitApply(free(0, 3)));
        changes.apply(watcher::Event::InitDone);
        changes.observe(&held(0, "a", 7), false);
        changes.apply(watcher::Event::Apply(free(0, 3)));
        assert_eq!(
            holders(&changes),
            Some(vec![("rota-slot-0".into(), Some("a".into()))])
        );
    }

    #[test]
    fn a_lease_deleted_while_the_watch_was_away_is_dropped_and_counts_if_held() {
        let changes = Changes::new();
        changes.apply(watcher::Event::Init);
        changes.apply(watcher::Event::InitApply(held(0, "a", 3)));
        changes.apply(watcher::Event::InitApply(held(1, "b", 4)));
        changes.apply(watcher::Event::InitDone);
        changes.lost();
        changes.apply(watcher::Event::Init);
        changes.apply(watcher::Event::InitApply(held(1, "b", 4)));
        changes.apply(watcher::Event::InitDone);
        assert_eq!(
            holders(&changes),
            Some(vec![("rota-slot-1".into(), Some("b".into()))])
        );
        assert_eq!(count(&changes), 1, "the deleted Lease was held");

        changes.apply(watcher::Event::Delete(held(1, "b", 8)));
        assert_eq!(holders(&changes), Some(vec![]));
        assert_eq!(count(&changes), 2);
        changes.apply(watcher::Event::Apply(held(1, "b", 4)));
        assert_eq!(
            holders(&changes),
            Some(vec![]),
            "no older event brings it back"
        );
    }
}

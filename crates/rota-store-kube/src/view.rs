//! What a watch keeps of one kind of object: each object as of the newest resourceVersion seen,
//! from the watch's events and from this process's own reads and writes (so that an older
//! event never undoes a newer write, and the watch's echo of an own write is no news), and
//! whether the watch has listed them all and not failed since. The Lease view (`changes`) and
//! the ConfigMap view (`config_view`) are this, with what a change means to each.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tracing::warn;

/// An object's resourceVersion as the etcd revision it is: an integer that grows with every
/// write. `None` when it does not parse, and so cannot be ordered.
pub(crate) fn revision(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// An object's revision; one that does not parse is taken as newer than anything seen.
fn version_of<K: Resource>(object: &K) -> u64 {
    revision(object.meta()).unwrap_or(u64::MAX)
}

/// One object's change in the view.
pub(crate) struct ObjectChange<K> {
    pub name: String,
    /// As it was: `None` if never seen, `Some(None)` if seen deleted.
    pub before: Option<Option<K>>,
    /// As it is now: `None` once deleted.
    pub after: Option<K>,
}

#[derive(Debug)]
struct Seen<K> {
    version: u64,
    object: Option<K>,
}

#[derive(Debug)]
pub(crate) struct View<K> {
    objects: HashMap<String, Seen<K>>,
    /// Whether `objects` holds every object: the watch has listed them and not failed since.
    synced: bool,
    /// The names listed since the watch began a (re)list; the others were deleted meanwhile.
    listing: Option<HashSet<String>>,
    /// The names this process read or wrote itself while the watch was listing: the list may
    /// have been taken before the write (a slot Lease taken a moment after the watch began),
    /// so its not holding them says nothing; the watch brings the write next.
    recorded_while_listing: HashSet<String>,
    /// The newest revision among the objects listed: the list was taken at it or later, so an
    /// own write no newer than it that the list lacks was deleted since.
    listed_newest: u64,
}

impl<K> Default for View<K> {
    fn default() -> View<K> {
        View {
            objects: HashMap::new(),
            synced: false,
            listing: None,
            recorded_while_listing: HashSet::new(),
            listed_newest: 0,
        }
    }
}

impl<K: Resource + Clone> View<K> {
    /// Every object, if the view holds them all.
    pub fn all(&self) -> Option<Vec<K>> {
        self.synced.then(|| {
            self.objects
                .values()
                .filter_map(|s| s.object.clone())
                .collect()
        })
    }

    /// The object `name` (`Some(None)`: there is none), if the view holds them all.
    pub fn get(&self, name: &str) -> Option<Option<K>> {
        self.synced
            .then(|| self.objects.get(name).and_then(|s| s.object.clone()))
    }

    /// Records `object` as read or written by this process (or its deletion), unless the same
    /// or a newer version was seen.
    pub fn record(&mut self, object: &K, deleted: bool) -> Option<ObjectChange<K>> {
        if self.listing.is_some()
            && let Some(name) = object.meta().name.clone()
        {
            self.recorded_while_listing.insert(name);
        }
        self.seen(object, deleted)
    }

    /// Takes `object` (or its deletion) unless the same or a newer version was seen.
    fn seen(&mut self, object: &K, deleted: bool) -> Option<ObjectChange<K>> {
        let name = object.meta().name.clone().unwrap_or_default();
        let version = version_of(object);
        let before = match self.objects.get(&name) {
            Some(seen) if seen.version >= version && version != u64::MAX => return None,
            seen => seen.map(|s| s.object.clone()),
        };
        let after = (!deleted).then(|| object.clone());
        self.objects.insert(
            name.clone(),
            Seen {
                version,
                object: after.clone(),
            },
        );
        Some(ObjectChange {
            name,
            before,
            after,
        })
    }

    /// Applies one event of the watch.
    pub fn apply(&mut self, event: watcher::Event<K>) -> Vec<ObjectChange<K>> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                self.recorded_while_listing.clear();
                self.listed_newest = 0;
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if let (Some(listing), Some(name)) =
                    (self.listing.as_mut(), object.meta().name.clone())
                {
                    listing.insert(name);
                }
                if let Some(revision) = revision(object.meta()) {
                    self.listed_newest = self.listed_newest.max(revision);
                }
                self.seen(&object, false).into_iter().collect()
            }
            watcher::Event::InitDone => {
                let mut changes = Vec::new();
                if let Some(listed) = self.listing.take() {
                    let recorded = std::mem::take(&mut self.recorded_while_listing);
                    let newest = self.listed_newest;
                    for (name, seen) in &mut self.objects {
                        let maybe_after_list = recorded.contains(name) && seen.version > newest;
                        if !listed.contains(name) && !maybe_after_list && seen.object.is_some() {
                            changes.push(ObjectChange {
                                name: name.clone(),
                                before: Some(seen.object.take()),
                                after: None,
                            });
                        }
                    }
                }
                self.synced = true;
                changes
            }
            watcher::Event::Apply(object) => {
                self.synced = true;
                self.seen(&object, false).into_iter().collect()
            }
            watcher::Event::Delete(object) => {
                self.synced = true;
                self.seen(&object, true).into_iter().collect()
            }
        }
    }

    /// The watch failed: until it is back, the view may miss changes.
    pub fn lost(&mut self) {
        self.synced = false;
    }
}

/// Watches `api`'s objects chosen by `config` until the task is aborted, handing each event to
/// `apply` and each failure to `lost`; `what` names them in the log.
pub(crate) async fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    mut apply: impl FnMut(watcher::Event<K>),
    mut lost: impl FnMut(),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => apply(event),
            Err(e) => {
                lost();
                warn!(error = %e, "watching {what} failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::Lease;

    use super::*;

    fn lease(name: &str, version: u64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.to_string()),
                ..ObjectMeta::default()
            },
            ..Lease::default()
        }
    }

    #[test]
    fn what_this_process_wrote_while_the_watch_listed_is_not_taken_for_deleted() {
        let mut view = View::default();
        view.record(&lease("slot-1", 3), false);
        view.apply(watcher::Event::Init);
        // Taken right after the list was read: the list does not hold it.
        view.record(&lease("slot-0", 10), false);
        view.apply(watcher::Event::InitApply(lease("other", 5)));
        let changes = view.apply(watcher::Event::InitDone);
        assert!(
            view.get("slot-0").flatten().is_some(),
            "the own write stays"
        );
        assert_eq!(
            view.get("slot-1"),
            Some(None),
            "an object seen before the list and not in it was deleted"
        );
        assert_eq!(changes.len(), 1);
        // The next list holds it, or it was deleted since: the ordinary rule again.
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitDone);
        assert_eq!(view.get("slot-0"), Some(None));
    }

    #[test]
    fn an_own_write_older_than_the_list_and_missing_from_it_was_deleted() {
        let mut view = View::default();
        view.apply(watcher::Event::Init);
        // Written, then deleted by another process before the list was taken at 20 or later.
        view.record(&lease("slot-0", 10), false);
        view.apply(watcher::Event::InitApply(lease("other", 20)));
        let changes = view.apply(watcher::Event::InitDone);
        assert_eq!(
            view.get("slot-0"),
            Some(None),
            "the list is newer than the write"
        );
        assert_eq!(changes.len(), 1);
    }
}

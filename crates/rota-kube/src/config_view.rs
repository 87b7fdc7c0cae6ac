//! `rota-config` as this process sees it, through one watch on that ConfigMap (an agent's
//! second and last; see the crate docs).
//!
//! The pause and the concurrency are read before every disruptive step and at every look at
//! the queue; from the watch those reads cost no request, and a change made by another process
//! (an operator's `rota pause`, `rota resume` or new concurrency) wakes the waiting agents as
//! soon as its event arrives, instead of at their next periodic re-read. A change of what
//! agents wait on moves the change counter by a large jump, so that every waiter looks again.
//!
//! The view is used only while the watch has listed the ConfigMap and not failed since;
//! otherwise the store reads it. Every read and write of this process goes into the view too,
//! ordered by resourceVersion, so the view is never older than what this process saw last, and
//! the watch's echo of this process's own write is recognised and not counted again.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tracing::warn;

use crate::changes::{Changes, revision};
use crate::store::{CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY};

/// The keys whose change may let a waiting or blocked agent go on.
const WAKING_KEYS: [&str; 3] = [CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY];

/// How far a change of the fleet's settings moves the counter: a new concurrency may free any
/// number of slots, so every waiter looks again (as in the SQLite store).
const SETTINGS_CHANGED: u64 = 1 << 32;

#[derive(Debug, Default)]
struct Seen {
    /// The resourceVersion of `map` (of its deletion, once gone); 0 before anything was seen.
    version: u64,
    map: Option<ConfigMap>,
    /// Whether the watch has listed the ConfigMap and not failed since.
    synced: bool,
    /// Whether the watch's (re)list is under way, and whether it has listed the ConfigMap yet.
    listing: Option<bool>,
}

/// `rota-config` as last seen by this process, and the change counter it moves.
#[derive(Debug)]
pub(crate) struct ConfigView {
    seen: Mutex<Seen>,
    changes: Arc<Changes>,
}

fn value<'a>(map: Option<&'a ConfigMap>, key: &str) -> Option<&'a str> {
    map?.data.as_ref()?.get(key).map(String::as_str)
}

fn wakes(before: Option<&ConfigMap>, after: Option<&ConfigMap>) -> bool {
    WAKING_KEYS
        .iter()
        .any(|key| value(before, key) != value(after, key))
}

impl ConfigView {
    pub(crate) fn new(changes: Arc<Changes>) -> Arc<ConfigView> {
        Arc::new(ConfigView {
            seen: Mutex::new(Seen::default()),
            changes,
        })
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ConfigMap as the watch keeps it (`Some(None)`: there is none), if the watch is
    /// synced; `None` means: read it.
    pub(crate) fn current(&self) -> Option<Option<ConfigMap>> {
        let seen = self.seen();
        seen.synced.then(|| seen.map.clone())
    }

    /// Records `map` as read or written by this process, or as the watch delivered it.
    pub(crate) fn observe(&self, map: &ConfigMap) {
        self.record(revision(&map.metadata).unwrap_or(u64::MAX), Some(map));
    }

    /// Records the ConfigMap as of `version` (`None`: deleted), unless something newer was seen;
    /// a change of what agents wait on moves the counter.
    fn record(&self, version: u64, map: Option<&ConfigMap>) {
        let mut seen = self.seen();
        if seen.version >= version && version != u64::MAX {
            return;
        }
        let wake = wakes(seen.map.as_ref(), map);
        seen.version = version;
        seen.map = map.cloned();
        drop(seen);
        if wake {
            self.changes.bump(SETTINGS_CHANGED);
        }
    }

    /// Applies one event of the watch.
    fn apply(&self, event: watcher::Event<ConfigMap>) {
        match event {
            watcher::Event::Init => self.seen().listing = Some(false),
            watcher::Event::InitApply(map) => {
                if let Some(listed) = self.seen().listing.as_mut() {
                    *listed = true;
                }
                self.observe(&map);
            }
            watcher::Event::InitDone => {
                let mut seen = self.seen();
                let gone = seen.listing.take() == Some(false) && seen.map.is_some();
                seen.synced = true;
                if gone {
                    // Deleted while the watch was away: gone as of anything seen so far.
                    let wake = wakes(seen.map.as_ref(), None);
                    seen.map = None;
                    drop(seen);
                    if wake {
                        self.changes.bump(SETTINGS_CHANGED);
                    }
                }
            }
            watcher::Event::Apply(map) => {
                self.observe(&map);
                self.seen().synced = true;
            }
            watcher::Event::Delete(map) => {
                self.record(revision(&map.metadata).unwrap_or(u64::MAX), None);
                self.seen().synced = true;
            }
        }
    }

    /// The watch failed: until it is back, the view may miss changes.
    fn lost(&self) {
        self.seen().synced = false;
    }
}

/// Watches the ConfigMap `name` of `api`'s namespace until the task is aborted.
pub(crate) async fn watch_config(api: Api<ConfigMap>, name: &str, view: Arc<ConfigView>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => view.apply(event),
            Err(e) => {
                view.lost();
                warn!(error = %e, "watching the rota-config ConfigMap failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn map(version: u64, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("rota-config".into()),
                resource_version: Some(version.to_string()),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ConfigMap::default()
        }
    }

    fn view() -> (Arc<Changes>, Arc<ConfigView>) {
        let changes = Changes::new();
        let view = ConfigView::new(changes.clone());
        (changes, view)
    }

    fn concurrency(view: &ConfigView) -> Option<Option<String>> {
        view.current()
            .map(|m| value(m.as_ref(), "concurrency").map(String::from))
    }

    #[test]
    fn the_view_is_used_only_once_the_watch_has_listed_the_config_map() {
        let (_, view) = view();
        view.observe(&map(3, &[("concurrency", "2")]));
        assert_eq!(concurrency(&view), None, "a read of its own is no watch");
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(map(3, &[("concurrency", "2")])));
        assert_eq!(concurrency(&view), None, "halfway through the list");
        view.apply(watcher::Event::InitDone);
        assert_eq!(concurrency(&view), Some(Some("2".into())));
        view.lost();
        assert_eq!(concurrency(&view), None, "a failed watch may miss changes");
    }

    #[test]
    fn a_change_of_the_pause_the_concurrency_or_the_rollout_wakes_every_waiter_once() {
        let (changes, view) = view();
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(map(3, &[("concurrency", "2")])));
        view.apply(watcher::Event::InitDone);
        let start = changes.current();

        view.apply(watcher::Event::Apply(map(
            4,
            &[("concurrency", "2"), ("nextTag", "7")],
        )));
        assert_eq!(changes.current(), start, "a node's tag wakes nobody");

        view.observe(&map(5, &[("concurrency", "3"), ("nextTag", "7")]));
        assert_eq!(changes.current(), start + SETTINGS_CHANGED);
        view.apply(watcher::Event::Apply(map(
            5,
            &[("concurrency", "3"), ("nextTag", "7")],
        )));
        assert_eq!(
            changes.current(),
            start + SETTINGS_CHANGED,
            "the watch's echo of an own write counts once"
        );

        view.apply(watcher::Event::Apply(map(
            6,
            &[("concurrency", "3"), ("paused", "x")],
        )));
        view.apply(watcher::Event::Apply(map(
            7,
            &[("concurrency", "3"), ("paused", ""), ("resumedAt", "9")],
        )));
        assert_eq!(changes.current(), start + 3 * SETTINGS_CHANGED);

        view.apply(watcher::Event::Apply(map(6, &[("concurrency", "1")])));
        assert_eq!(
            concurrency(&view),
            Some(Some("3".into())),
            "an older event changes nothing"
        );
        assert_eq!(changes.current(), start + 3 * SETTINGS_CHANGED);
    }

    #[test]
    fn a_config_map_deleted_while_the_watch_was_away_is_dropped() {
        let (changes, view) = view();
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(map(3, &[("concurrency", "2")])));
        view.apply(watcher::Event::InitDone);
        let start = changes.current();
        view.lost();
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitDone);
        assert_eq!(view.current(), Some(None));
        assert_eq!(changes.current(), start + SETTINGS_CHANGED);

        view.apply(watcher::Event::Apply(map(9, &[("concurrency", "4")])));
        view.apply(watcher::Event::Delete(map(10, &[("concurrency", "4")])));
        assert_eq!(view.current(), Some(None));
    }
}

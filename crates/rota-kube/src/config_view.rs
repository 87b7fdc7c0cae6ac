//! The ConfigMaps of rota's namespace as this process sees them, through one watch (an
//! agent's second and last; see the crate docs): `rota-config` and the procedures' scripts.
//!
//! The pause and the concurrency are read before every disruptive step and at every look at
//! the queue, and every agent looks for new procedures, with their scripts, every few seconds;
//! from the watch those reads cost no request, and a change made by another process (an
//! operator's `rota pause`, `rota resume` or new concurrency) wakes the waiting agents as soon
//! as its event arrives, instead of at their next periodic re-read. A change of what agents
//! wait on moves the change counter by a large jump, so that every waiter looks again.
//!
//! The view is used only while the watch has listed the ConfigMaps and not failed since;
//! otherwise the store reads them. Every read and write of this process goes into the view
//! too, ordered by resourceVersion, so the view is never older than what this process saw
//! last, and the watch's echo of this process's own write is recognised and not counted again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tracing::warn;

use crate::changes::{Changes, revision};
use crate::store::{CONCURRENCY_KEY, CONFIG_MAP, PAUSED_KEY, RESUMED_KEY};

/// The keys of `rota-config` whose change may let a waiting or blocked agent go on.
const WAKING_KEYS: [&str; 3] = [CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY];

/// How far a change of the fleet's settings moves the counter: a new concurrency may free any
/// number of slots, so every waiter looks again (as in the SQLite store).
const SETTINGS_CHANGED: u64 = 1 << 32;

/// One ConfigMap as last seen: its resourceVersion (of its deletion, once gone) and content.
#[derive(Debug)]
struct Seen {
    version: u64,
    map: Option<ConfigMap>,
}

#[derive(Debug, Default)]
struct View {
    maps: HashMap<String, Seen>,
    /// Whether `maps` holds every ConfigMap: the watch has listed them and not failed since.
    synced: bool,
    /// The names listed since the watch began a (re)list; the others were deleted meanwhile.
    listing: Option<HashSet<String>>,
}

/// The ConfigMaps of rota's namespace as last seen by this process, and the change counter
/// that `rota-config` moves.
#[derive(Debug)]
pub(crate) struct ConfigView {
    view: Mutex<View>,
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
            view: Mutex::new(View::default()),
            changes,
        })
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ConfigMap `name` as the watch keeps it (`Some(None)`: there is none), if the watch
    /// is synced; `None` means: read it.
    pub(crate) fn current(&self, name: &str) -> Option<Option<ConfigMap>> {
        let view = self.view();
        view.synced
            .then(|| view.maps.get(name).and_then(|seen| seen.map.clone()))
    }

    /// Records `map` as read or written by this process, or as the watch delivered it.
    pub(crate) fn observe(&self, map: &ConfigMap) {
        let name = map.metadata.name.clone().unwrap_or_default();
        let version = revision(&map.metadata).unwrap_or(u64::MAX);
        self.record(name, version, Some(map));
    }

    /// Records the ConfigMap `name` as of `version` (`None`: deleted), unless something newer
    /// was seen; a change of what agents wait on moves the counter.
    fn record(&self, name: String, version: u64, map: Option<&ConfigMap>) {
        let mut view = self.view();
        let before = match view.maps.get(&name) {
            Some(seen) if seen.version >= version && version != u64::MAX => return,
            Some(seen) => seen.map.as_ref(),
            None => None,
        };
        let wake = name == CONFIG_MAP && wakes(before, map);
        view.maps.insert(
            name,
            Seen {
                version,
                map: map.cloned(),
            },
        );
        drop(view);
        if wake {
            self.changes.bump(SETTINGS_CHANGED);
        }
    }

    /// Applies one event of the watch.
    fn apply(&self, event: watcher::Event<ConfigMap>) {
        match event {
            watcher::Event::Init => self.view().listing = Some(HashSet::new()),
            watcher::Event::InitApply(map) => {
                {
                    let mut view = self.view();
                    if let (Some(listing), Some(name)) =
                        (view.listing.as_mut(), map.metadata.name.clone())
                    {
                        listing.insert(name);
                    }
                }
                self.observe(&map);
            }
            watcher::Event::InitDone => {
                let mut view = self.view();
                let mut wake = false;
                if let Some(listed) = view.listing.take() {
                    // Deleted while the watch was away: gone as of anything seen so far.
                    for (name, seen) in &mut view.maps {
                        if !listed.contains(name) && seen.map.is_some() {
                            wake |= name == CONFIG_MAP && wakes(seen.map.as_ref(), None);
                            seen.map = None;
                        }
                    }
                }
                view.synced = true;
                drop(view);
                if wake {
                    self.changes.bump(SETTINGS_CHANGED);
                }
            }
            watcher::Event::Apply(map) => {
                self.observe(&map);
                self.view().synced = true;
            }
            watcher::Event::Delete(map) => {
                let name = map.metadata.name.clone().unwrap_or_default();
                self.record(name, revision(&map.metadata).unwrap_or(u64::MAX), None);
                self.view().synced = true;
            }
        }
    }

    /// The watch failed: until it is back, the view may miss changes.
    fn lost(&self) {
        self.view().synced = false;
    }
}

/// Watches the ConfigMaps of `api`'s namespace until the task is aborted.
pub(crate) async fn watch_config_maps(api: Api<ConfigMap>, view: Arc<ConfigView>) {
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => view.apply(event),
            Err(e) => {
                view.lost();
                warn!(error = %e, "watching the ConfigMaps of rota's namespace failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn named(name: &str, version: u64, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
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

    fn map(version: u64, data: &[(&str, &str)]) -> ConfigMap {
        named(CONFIG_MAP, version, data)
    }

    fn view() -> (Arc<Changes>, Arc<ConfigView>) {
        let changes = Changes::new();
        let view = ConfigView::new(changes.clone());
        (changes, view)
    }

    fn concurrency(view: &ConfigView) -> Option<Option<String>> {
        view.current(CONFIG_MAP)
            .map(|m| value(m.as_ref(), CONCURRENCY_KEY).map(String::from))
    }

    #[test]
    fn the_view_is_used_only_once_the_watch_has_listed_the_config_maps() {
        let (_, view) = view();
        view.observe(&map(3, &[("concurrency", "2")]));
        assert_eq!(concurrency(&view), None, "a read of its own is no watch");
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(map(3, &[("concurrency", "2")])));
        assert_eq!(concurrency(&view), None, "halfway through the list");
        view.apply(watcher::Event::InitApply(named("fw", 4, &[("run", "x")])));
        view.apply(watcher::Event::InitDone);
        assert_eq!(concurrency(&view), Some(Some("2".into())));
        let script = view.current("fw").flatten();
        assert_eq!(value(script.as_ref(), "run"), Some("x"));
        assert_eq!(view.current("other"), Some(None), "none such");
        view.lost();
        assert_eq!(concurrency(&view), None, "a failed watch may miss changes");
        assert_eq!(view.current("fw"), None);
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
            &[("concurrency", "2"), ("nextNodeTag", "7")],
        )));
        view.apply(watcher::Event::Apply(named(
            "fw",
            5,
            &[("concurrency", "9")],
        )));
        assert_eq!(
            changes.current(),
            start,
            "a node's tag and a script wake nobody"
        );

        view.observe(&map(6, &[("concurrency", "3"), ("nextNodeTag", "7")]));
        assert_eq!(changes.current(), start + SETTINGS_CHANGED);
        view.apply(watcher::Event::Apply(map(
            6,
            &[("concurrency", "3"), ("nextNodeTag", "7")],
        )));
        assert_eq!(
            changes.current(),
            start + SETTINGS_CHANGED,
            "the watch's echo of an own write counts once"
        );

        view.apply(watcher::Event::Apply(map(
            7,
            &[("concurrency", "3"), ("paused", "x")],
        )));
        view.apply(watcher::Event::Apply(map(
            8,
            &[("concurrency", "3"), ("paused", ""), ("resumedAt", "9")],
        )));
        assert_eq!(changes.current(), start + 3 * SETTINGS_CHANGED);

        view.apply(watcher::Event::Apply(map(7, &[("concurrency", "1")])));
        assert_eq!(
            concurrency(&view),
            Some(Some("3".into())),
            "an older event changes nothing"
        );
        assert_eq!(changes.current(), start + 3 * SETTINGS_CHANGED);
    }

    #[test]
    fn config_maps_deleted_while_the_watch_was_away_are_dropped() {
        let (changes, view) = view();
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(map(3, &[("concurrency", "2")])));
        view.apply(watcher::Event::InitApply(named("fw", 4, &[("run", "x")])));
        view.apply(watcher::Event::InitDone);
        let start = changes.current();
        view.lost();
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(named("fw", 4, &[("run", "x")])));
        view.apply(watcher::Event::InitDone);
        assert_eq!(view.current(CONFIG_MAP), Some(None));
        assert!(view.current("fw").flatten().is_some());
        assert_eq!(changes.current(), start + SETTINGS_CHANGED);

        view.apply(watcher::Event::Delete(named("fw", 10, &[("run", "x")])));
        assert_eq!(view.current("fw"), Some(None));
        view.apply(watcher::Event::Apply(named("fw", 4, &[("run", "x")])));
        assert_eq!(
            view.current("fw"),
            Some(None),
            "no older event brings it back"
        );
    }
}

//! The ConfigMaps of rota's namespace as this process sees them, through one watch (an
//! agent's second and last; see the crate docs): `rota-config` and the procedures' scripts.
//!
//! The pause and the concurrency are read before anything disruptive and at every look at
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::watcher;

use rota_store::{Millis, WAKE_ALL, now_millis};

use crate::changes::Changes;
use crate::store::{CONCURRENCY_KEY, CONFIG_MAP, PAUSED_KEY, RESUMED_KEY, WAKE_KEY};
use crate::view::{ObjectChange, View, revision, watch};

/// The keys of `rota-config` whose change may let a waiting or blocked agent go on.
const WAKING_KEYS: [&str; 3] = [CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY];

/// The target of an operator's wake for every node (else it names one node).
pub(crate) const EVERY_NODE: &str = "*";

/// The value of the wake key: a new one for every wake (the time makes two wakes of one node
/// differ), and the node it is for.
pub(crate) fn wake_value(at: i64, node: Option<&str>) -> String {
    format!("{at} {}", node.unwrap_or(EVERY_NODE))
}

/// The node a wake value is for.
fn wake_target(value: &str) -> Option<&str> {
    value.split_once(' ').map(|(_, node)| node)
}

/// The ConfigMaps of rota's namespace as last seen by this process, and the change counter
/// that `rota-config` moves.
#[derive(Debug)]
pub(crate) struct ConfigView {
    view: Mutex<View<ConfigMap>>,
    changes: Arc<Changes>,
    /// The nodes whose agents run in this process, each with when an operator's wake for it
    /// (or for every node) last arrived (0: never): such a wake wakes this process's waiters.
    locals: Mutex<HashMap<String, Millis>>,
    /// The etcd revision of the latest wake for every node: it announces a new procedure,
    /// written before it, so a list of the procedures must be at least this new.
    everyone_woken_at: AtomicU64,
}

fn value<'a>(map: Option<&'a ConfigMap>, key: &str) -> Option<&'a str> {
    map?.data.as_ref()?.get(key).map(String::as_str)
}

impl ConfigView {
    pub(crate) fn new(changes: Arc<Changes>) -> Arc<ConfigView> {
        Arc::new(ConfigView {
            view: Mutex::new(View::default()),
            changes,
            locals: Mutex::new(HashMap::new()),
            everyone_woken_at: AtomicU64::new(0),
        })
    }

    /// Counts `node`'s agent as one of this process's, for the operators' wakes.
    pub(crate) fn add_local(&self, node: &str) {
        let mut locals = self.locals.lock().unwrap_or_else(|e| e.into_inner());
        locals.entry(node.to_owned()).or_insert(0);
    }

    /// Whether `change` changed what agents wait on: the fleet's settings, or an operator's
    /// wake for every node or for one of this process's.
    fn wakes(&self, change: &ObjectChange<ConfigMap>) -> bool {
        if change.name != CONFIG_MAP {
            return false;
        }
        let before = change.before.as_ref().and_then(Option::as_ref);
        let after = change.after.as_ref();
        if WAKING_KEYS
            .iter()
            .any(|key| value(before, key) != value(after, key))
        {
            return true;
        }
        let wake = value(after, WAKE_KEY);
        if wake == value(before, WAKE_KEY) {
            return false;
        }
        let Some(target) = wake.and_then(wake_target) else {
            return false;
        };
        if target == EVERY_NODE
            && let Some(version) = after.and_then(|map| revision(&map.metadata))
        {
            self.everyone_woken_at.fetch_max(version, Ordering::Relaxed);
        }
        let now = now_millis();
        let mut locals = self.locals.lock().unwrap_or_else(|e| e.into_inner());
        let mut woke = false;
        for (node, at) in locals.iter_mut() {
            if target == EVERY_NODE || target == node {
                *at = now;
                woke = true;
            }
        }
        woke
    }

    /// When this process last learned of an operator's wake for `node` (0: never): what it
    /// read or wrote of the node before then may miss the operator's change.
    pub(crate) fn woken_at(&self, node: &str) -> Millis {
        let locals = self.locals.lock().unwrap_or_else(|e| e.into_inner());
        locals.get(node).copied().unwrap_or(0)
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View<ConfigMap>> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The etcd revision of the latest wake for every node (0: none seen).
    pub(crate) fn everyone_woken_at(&self) -> u64 {
        self.everyone_woken_at.load(Ordering::Relaxed)
    }

    /// The ConfigMap `name` as the watch keeps it (`Some(None)`: there is none), if the watch
    /// is synced; `None` means: read it.
    pub(crate) fn current(&self, name: &str) -> Option<Option<ConfigMap>> {
        self.view().get(name)
    }

    /// Records `map` as read or written by this process.
    pub(crate) fn observe(&self, map: &ConfigMap) {
        let change = self.view().record(map, false);
        self.wake(change.iter());
    }

    fn wake<'a>(&self, changes: impl Iterator<Item = &'a ObjectChange<ConfigMap>>) {
        for change in changes {
            if self.wakes(change) {
                self.changes.bump(WAKE_ALL);
            }
        }
    }

    /// Applies one event of the watch.
    fn apply(&self, event: watcher::Event<ConfigMap>) {
        let changes = self.view().apply(event);
        self.wake(changes.iter());
    }

    /// The watch failed: until it is back, the view may miss changes.
    fn lost(&self) {
        self.view().lost();
    }
}

/// Watches the ConfigMaps of `api`'s namespace until the task is aborted.
pub(crate) async fn watch_config_maps(api: Api<ConfigMap>, view: Arc<ConfigView>) {
    watch(
        api,
        watcher::Config::default(),
        "the ConfigMaps of rota's namespace",
        |event| view.apply(event),
        || view.lost(),
    )
    .await;
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
        assert_eq!(changes.current(), start + WAKE_ALL);
        view.apply(watcher::Event::Apply(map(
            6,
            &[("concurrency", "3"), ("nextNodeTag", "7")],
        )));
        assert_eq!(
            changes.current(),
            start + WAKE_ALL,
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
        assert_eq!(changes.current(), start + 3 * WAKE_ALL);

        view.apply(watcher::Event::Apply(map(7, &[("concurrency", "1")])));
        assert_eq!(
            concurrency(&view),
            Some(Some("3".into())),
            "an older event changes nothing"
        );
        assert_eq!(changes.current(), start + 3 * WAKE_ALL);
    }

    #[test]
    fn an_operators_wake_wakes_the_process_of_its_node_and_a_wake_for_every_node_everyone() {
        let (changes, view) = view();
        view.add_local("n1");
        view.apply(watcher::Event::Init);
        view.apply(watcher::Event::InitApply(map(3, &[("concurrency", "2")])));
        view.apply(watcher::Event::InitDone);
        let start = changes.current();

        view.apply(watcher::Event::Apply(map(
            4,
            &[("concurrency", "2"), ("wake", &wake_value(10, Some("n2")))],
        )));
        assert_eq!(changes.current(), start, "another process's node");
        view.apply(watcher::Event::Apply(map(
            5,
            &[("concurrency", "2"), ("wake", &wake_value(11, Some("n1")))],
        )));
        assert_eq!(changes.current(), start + WAKE_ALL, "this process's node");
        assert!(
            view.woken_at("n1") > 0,
            "what was seen of n1 before is stale"
        );
        assert_eq!(view.woken_at("n2"), 0, "not a node of this process");
        view.apply(watcher::Event::Apply(map(
            6,
            &[
                ("concurrency", "2"),
                ("wake", &wake_value(11, Some("n1"))),
                ("nextNodeTag", "3"),
            ],
        )));
        assert_eq!(
            changes.current(),
            start + WAKE_ALL,
            "the same wake counts once"
        );
        assert_eq!(view.everyone_woken_at(), 0);

        view.apply(watcher::Event::Apply(map(
            9,
            &[("concurrency", "2"), ("wake", &wake_value(12, None))],
        )));
        assert_eq!(
            changes.current(),
            start + 2 * WAKE_ALL,
            "a wake for every node"
        );
        assert_eq!(
            view.everyone_woken_at(),
            9,
            "procedures are listed at least as new as the wake that announced them"
        );
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
        assert_eq!(changes.current(), start + WAKE_ALL);

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

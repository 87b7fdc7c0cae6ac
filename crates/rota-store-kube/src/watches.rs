//! The watch of an agent's process besides its own RotaNode's (`store/own.rs`): a
//! kube-runtime reflector of the ConfigMaps of rota's namespace (`rota-config` and the
//! procedures' scripts). The Procedures are not watched: the scheduler publishes their
//! fingerprint in `rota-config`, and an agent lists them again only when it changed.
//!
//! While the watch has listed its objects and not failed since, its store answers an agent's
//! looks without a request (else the store reads). A change an idle or waiting agent must see
//! moves the change counter by `WAKE_ALL`, so that every waiter looks again: a new concurrency,
//! pause or resume, an operator's wake for one of this process's nodes or for every node, and
//! a new, deleted or changed procedure (its fingerprint).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use rota_kube_api::CONFIG_MAP;
use rota_kube_api::procedure::Procedure;
use rota_store::WAKE_ALL;
use tokio::task::AbortHandle;
use tracing::warn;

use crate::changes::Changes;
use crate::procedures::SUBMITTED_AT_ANNOTATION;
use crate::store::{CONCURRENCY_KEY, PAUSED_KEY, PROCEDURES_KEY, RESUMED_KEY, WAKE_KEY};

/// An object's resourceVersion as the etcd revision it is: an integer that grows with every
/// write. `None` when it does not parse.
pub(crate) fn revision(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A reflector's store, kept by its own task until dropped.
struct Reflector<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    /// Whether the store holds every object: the watch has listed them, and has not failed
    /// since (or has shown an event since: the watcher resumes where it stopped).
    ready: Arc<AtomicBool>,
    task: AbortHandle,
}

impl<K: Resource<DynamicType = ()> + 'static> Drop for Reflector<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Reflector<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    /// Follows `events` into a new store; `seen` hears of each event once the store has it.
    fn start(
        events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
        what: &'static str,
        mut seen: impl FnMut(&watcher::Event<K>, &Store<K>) + Send + 'static,
    ) -> Reflector<K> {
        let (store, writer) = reflector::store();
        let ready = Arc::new(AtomicBool::new(false));
        let (reader, flag) = (store.clone(), ready.clone());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events.default_backoff().reflect(writer));
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        if !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
                            flag.store(true, Ordering::SeqCst);
                        }
                        seen(&event, &reader);
                    }
                    Err(e) => {
                        flag.store(false, Ordering::SeqCst);
                        warn!(error = %e, "watching {what} failed; retrying");
                    }
                }
            }
        })
        .abort_handle();
        Reflector { store, ready, task }
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// The keys of `rota-config` whose change may let a waiting or blocked agent go on, or give
/// an idle one work.
const SETTING_KEYS: [&str; 4] = [CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY, PROCEDURES_KEY];

/// The target of an operator's wake for every node (else it names one node).
pub(crate) const EVERY_NODE: &str = "*";

/// The value of the wake key: a new one for every wake (the time makes two wakes of one node
/// differ), and the node it is for.
pub(crate) fn wake_value(at: i64, node: Option<&str>) -> String {
    format!("{at} {}", node.unwrap_or(EVERY_NODE))
}

fn value<'a>(map: Option<&'a ConfigMap>, key: &str) -> Option<&'a str> {
    map?.data.as_ref()?.get(key).map(String::as_str)
}

/// The ConfigMaps of rota's namespace, through their watch.
pub(crate) struct ConfigWatch {
    namespace: String,
    maps: Reflector<ConfigMap>,
    seen: Arc<Seen>,
}

/// `rota-config` as this handle saw it last, and whom its changes wake.
struct Seen {
    changes: Arc<Changes>,
    /// The nodes of this process's agents: an operator's wake for one of them wakes it.
    locals: Mutex<HashSet<String>>,
    latest: Mutex<Latest>,
}

/// `rota-config` as of etcd revision `version` (`map` is `None`: there is none).
#[derive(Debug, Default)]
struct Latest {
    version: u64,
    map: Option<ConfigMap>,
    /// Written by this handle, and not yet shown by the watch.
    written: bool,
}

impl Seen {
    /// Takes `map` as `rota-config` at `version` (a write of this handle, or an event of the
    /// watch), unless this handle saw it already, and wakes the agents if a change wakes them.
    ///
    /// The versions are compared because the watch shows a write of this handle after the
    /// write has returned: the write must be read back and wake this process's waiters at once
    /// (a resume wakes every waiter when it returns), and then its echo is no news, nor is an
    /// event older than it (counting it would wake the waiters twice, and move `Store::changes`
    /// while a test asserts it is still).
    fn see(&self, version: u64, map: Option<&ConfigMap>, written: bool) {
        let mut latest = lock(&self.latest);
        // A version that does not parse (0) cannot be ordered, and is taken.
        if version != 0 && version <= latest.version {
            if version == latest.version {
                latest.written &= written;
            }
            return;
        }
        let wakes = self.wakes(latest.map.as_ref(), map);
        *latest = Latest {
            version,
            map: map.cloned(),
            written,
        };
        drop(latest);
        if wakes {
            self.changes.bump(WAKE_ALL);
        }
    }

    /// The watch listed again (after a failure it could not resume from) without `rota-config`:
    /// it was deleted meanwhile, unless this handle wrote it after the list was taken.
    fn gone(&self) {
        let mut latest = lock(&self.latest);
        if latest.written {
            return;
        }
        let wakes = self.wakes(latest.map.take().as_ref(), None);
        drop(latest);
        if wakes {
            self.changes.bump(WAKE_ALL);
        }
    }

    /// Whether a change from `before` to `after` changed what agents wait on: the fleet's
    /// settings, or an operator's wake for every node or for one of this process's.
    fn wakes(&self, before: Option<&ConfigMap>, after: Option<&ConfigMap>) -> bool {
        if SETTING_KEYS
            .iter()
            .any(|key| value(before, key) != value(after, key))
        {
            return true;
        }
        let wake = value(after, WAKE_KEY);
        if wake == value(before, WAKE_KEY) {
            return false;
        }
        let Some((_, target)) = wake.and_then(|w| w.split_once(' ')) else {
            return false;
        };
        target == EVERY_NODE || lock(&self.locals).contains(target)
    }
}

impl ConfigWatch {
    /// Starts the watch of `api`'s ConfigMaps, which `changes` hears of.
    pub(crate) fn start(api: Api<ConfigMap>, namespace: &str, changes: Arc<Changes>) -> Self {
        let seen = Arc::new(Seen {
            changes,
            locals: Mutex::default(),
            latest: Mutex::default(),
        });
        let watched = seen.clone();
        let config = ObjectRef::new(CONFIG_MAP).within(namespace);
        let events = watcher(api, watcher::Config::default());
        let maps = Reflector::start(
            events,
            "the ConfigMaps of rota's namespace",
            move |event, store| match event {
                watcher::Event::Apply(map) | watcher::Event::InitApply(map)
                    if map.name_any() == CONFIG_MAP =>
                {
                    watched.see(revision(&map.metadata).unwrap_or(0), Some(map), false);
                }
                watcher::Event::Delete(map) if map.name_any() == CONFIG_MAP => {
                    watched.see(revision(&map.metadata).unwrap_or(0), None, false);
                }
                watcher::Event::InitDone if store.get(&config).is_none() => watched.gone(),
                _ => {}
            },
        );
        ConfigWatch {
            namespace: namespace.to_owned(),
            maps,
            seen,
        }
    }

    /// Counts `node`'s agent as one of this process's, for the operators' wakes.
    pub(crate) fn add_local(&self, node: &str) {
        lock(&self.seen.locals).insert(node.to_owned());
    }

    /// Whether the watch has listed the ConfigMaps and not failed since.
    pub(crate) fn ready(&self) -> bool {
        self.maps.ready()
    }

    /// `rota-config` (`Some(None)`: there is none) as the watch or a write of this handle
    /// left it, if the watch is ready; `None` means: read it.
    pub(crate) fn config_map(&self) -> Option<Option<ConfigMap>> {
        self.ready().then(|| lock(&self.seen.latest).map.clone())
    }

    /// Records `map`, `rota-config` as this handle wrote it: read back at once, and waking
    /// this process's waiters if it changed what they wait on.
    pub(crate) fn written(&self, map: &ConfigMap) {
        let version = revision(&map.metadata).unwrap_or(0);
        self.seen.see(version, Some(map), true);
    }

    /// The procedures' fingerprint the scheduler published, if the watch is ready and shows one.
    pub(crate) fn procedures(&self) -> Option<String> {
        let latest = self.config_map()?;
        value(latest.as_ref(), PROCEDURES_KEY).map(str::to_owned)
    }

    /// The ConfigMap `name`, if the watch is ready and has it.
    pub(crate) fn get(&self, name: &str) -> Option<ConfigMap> {
        let key = ObjectRef::new(name).within(&self.namespace);
        self.ready()
            .then(|| self.maps.store.get(&key))
            .flatten()
            .map(|map| (*map).clone())
    }
}

/// What the fingerprint takes of one Procedure, besides its name.
type Described<'a> = (Option<&'a str>, Option<i64>, Option<&'a str>);

/// The fingerprint of the Procedures among `metas` named with `prefix` (see
/// `KubeStoreConfig::name_prefix`; empty in production): a digest of each one's name, uid,
/// `generation` (which the API server moves on a change of the spec, not of the status) and
/// submission time. The scheduler publishes it in `rota-config` (key `procedures`) from its
/// watch of the Procedures, and an agent compares it with that of its last list.
pub fn procedures_fingerprint<'a>(
    prefix: &str,
    metas: impl Iterator<Item = &'a ObjectMeta>,
) -> String {
    let described: BTreeMap<&str, Described> = metas
        .filter_map(|meta| {
            let name = meta.name.as_deref().filter(|n| n.starts_with(prefix))?;
            let submitted = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(SUBMITTED_AT_ANNOTATION))
                .map(String::as_str);
            Some((name, (meta.uid.as_deref(), meta.generation, submitted)))
        })
        .collect();
    let content = serde_json::to_string(&described).unwrap_or_default();
    rota_core::sha256_hex(&content)[..16].to_owned()
}

/// An agent's last list of the procedures: between changes of the procedures, an agent's look
/// at them is answered from it, without a request.
pub(crate) struct ProcedureCache {
    prefix: String,
    listed: Mutex<Option<Listed>>,
}

/// A list of the procedures, made at etcd revision `revision`.
struct Listed {
    fingerprint: String,
    revision: u64,
    objects: Vec<Procedure>,
}

impl ProcedureCache {
    pub(crate) fn new(prefix: String) -> ProcedureCache {
        ProcedureCache {
            prefix,
            listed: Mutex::default(),
        }
    }

    /// The objects of the last list, if `published` (the fingerprint in `rota-config`) is the
    /// list's and the list is at least as new as etcd revision `at_least` (this handle's own
    /// submissions: they must be listed even before the scheduler publishes them).
    pub(crate) fn cached(&self, published: &str, at_least: u64) -> Option<Vec<Procedure>> {
        let listed = lock(&self.listed);
        let listed = listed.as_ref()?;
        (listed.fingerprint == published && listed.revision >= at_least)
            .then(|| listed.objects.clone())
    }

    /// Whether a list was made at all: an agent's first look at the procedures is behind it.
    pub(crate) fn has_listed(&self) -> bool {
        lock(&self.listed).is_some()
    }

    /// Keeps a list made at `revision`.
    pub(crate) fn keep(&self, revision: u64, objects: Vec<Procedure>) {
        let fingerprint = procedures_fingerprint(&self.prefix, objects.iter().map(|o| &o.metadata));
        *lock(&self.listed) = Some(Listed {
            fingerprint,
            revision,
            objects,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(version: u64, data: &[(&str, &str)]) -> (u64, ConfigMap) {
        let map = ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        (version, map)
    }

    fn settings(locals: &[&str]) -> Seen {
        Seen {
            changes: Changes::new(),
            locals: Mutex::new(locals.iter().map(|n| (*n).to_string()).collect()),
            latest: Mutex::default(),
        }
    }

    fn see(settings: &Seen, (version, map): (u64, ConfigMap), written: bool) -> u64 {
        settings.see(version, Some(&map), written);
        settings.changes.current() / WAKE_ALL
    }

    #[test]
    fn a_change_of_the_settings_wakes_every_waiter_once_and_an_own_write_at_once() {
        let s = settings(&[]);
        assert_eq!(see(&s, map(3, &[("concurrency", "2")]), false), 1);
        assert_eq!(
            see(&s, map(4, &[("concurrency", "2"), ("other", "x")]), false),
            1,
            "another key wakes nobody"
        );
        assert_eq!(see(&s, map(6, &[("concurrency", "3")]), true), 2);
        assert_eq!(
            see(&s, map(5, &[("concurrency", "1")]), false),
            2,
            "an event older than the own write"
        );
        assert_eq!(
            see(&s, map(6, &[("concurrency", "3")]), false),
            2,
            "the watch's echo of the own write"
        );
        let paused = [("concurrency", "3"), ("paused", "x")];
        assert_eq!(see(&s, map(7, &paused), false), 3);
        let resumed = [("concurrency", "3"), ("paused", ""), ("resumedAt", "9")];
        assert_eq!(see(&s, map(8, &resumed), false), 4);
        s.gone();
        assert_eq!(s.changes.current() / WAKE_ALL, 5, "deleted: no pause");
    }

    #[test]
    fn an_operators_wake_wakes_the_process_of_its_node_and_a_wake_for_every_node_everyone() {
        let s = settings(&["n1"]);
        let wake = |node| wake_value(10, node);
        assert_eq!(see(&s, map(3, &[("wake", &wake(Some("n2")))]), false), 0);
        assert_eq!(see(&s, map(4, &[("wake", &wake(Some("n1")))]), false), 1);
        assert_eq!(
            see(
                &s,
                map(5, &[("wake", &wake(Some("n1"))), ("x", "y")]),
                false
            ),
            1,
            "the same wake counts once"
        );
        assert_eq!(see(&s, map(6, &[("wake", &wake(None))]), false), 2);
    }

    #[test]
    fn a_procedures_status_does_not_change_the_fingerprint_its_spec_does() {
        let meta = |name: &str, generation| ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(generation),
            ..ObjectMeta::default()
        };
        let of = |metas: &[ObjectMeta]| procedures_fingerprint("t-", metas.iter());
        let first = of(&[meta("t-a", 1), meta("t-b", 1)]);
        assert_eq!(
            of(&[meta("t-a", 1), meta("other-c", 1), meta("t-b", 1)]),
            first,
            "another prefix"
        );
        assert_eq!(of(&[meta("t-b", 1), meta("t-a", 1)]), first, "in any order");
        let mut status_written = meta("t-a", 1);
        status_written.resource_version = Some("9".into());
        assert_eq!(of(&[status_written, meta("t-b", 1)]), first);
        assert_ne!(of(&[meta("t-a", 2), meta("t-b", 1)]), first, "a new spec");
        assert_ne!(of(&[meta("t-a", 1)]), first, "one deleted");
        let mut recreated = meta("t-a", 1);
        recreated.uid = Some("another".into());
        assert_ne!(of(&[recreated, meta("t-b", 1)]), first, "one made again");
    }

    #[test]
    fn a_cached_list_answers_only_under_its_own_fingerprint_and_after_own_submissions() {
        let object = |name: &str| Procedure {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                generation: Some(1),
                ..ObjectMeta::default()
            },
            spec: rota_kube_api::ProcedureBody::of(&rota_core::ProcedureSpec::new(
                name.to_string(),
                "true\n".to_string(),
            )),
            status: None,
        };
        let cache = ProcedureCache::new(String::new());
        assert!(cache.cached("anything", 0).is_none(), "nothing listed");
        cache.keep(7, vec![object("a")]);
        let listed = procedures_fingerprint("", std::iter::once(&object("a").metadata));
        assert_eq!(cache.cached(&listed, 7).map(|o| o.len()), Some(1));
        assert!(
            cache.cached(&listed, 8).is_none(),
            "an own newer submission"
        );
        let other =
            procedures_fingerprint("", [object("a"), object("b")].iter().map(|o| &o.metadata));
        assert!(cache.cached(&other, 0).is_none(), "the procedures changed");
    }
}

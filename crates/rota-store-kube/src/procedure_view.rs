//! The Procedures as an agent's process sees them, through one metadata-only watch (see the
//! crate docs): a new procedure, a deleted one and a changed spec wake the agents at once, and
//! between such changes a look at the procedures is answered from the last list, without a
//! request. So an idle agent no longer lists the procedures at every poll, and a Procedure from
//! `kubectl apply` reaches it as soon as one announced by `rota mop submit`.
//!
//! Only what a list answers with counts as a change: an object's uid, its `generation` (which
//! the API server moves on a change of the spec, not of the status) and its submission time.
//! The agents write every Procedure's status as their nodes go through it; those writes reach
//! the watch too, as small metadata events, and change nothing here.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use rota_store::WAKE_ALL;

use crate::changes::Changes;
use crate::procedure::Procedure;
use crate::procedures::SUBMITTED_AT_ANNOTATION;
use crate::view::{ObjectChange, View, revision, watch};

type Meta = PartialObjectMeta<Procedure>;

/// What a list of the procedures depends on, per object: uid, generation, submission time.
type Key = (Option<String>, Option<i64>, Option<String>);

/// Every procedure with the store's prefix, by name, with its [`Key`].
type Fingerprint = BTreeMap<String, Key>;

fn key(meta: Option<&Meta>) -> Option<Key> {
    meta.map(|meta| key_of(&meta.metadata))
}

fn key_of(meta: &ObjectMeta) -> Key {
    (
        meta.uid.clone(),
        meta.generation,
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(SUBMITTED_AT_ANNOTATION))
            .cloned(),
    )
}

/// A list of the procedures, kept while nothing it depends on has changed.
#[derive(Debug)]
struct Listed {
    fingerprint: Fingerprint,
    /// The list's resourceVersion.
    revision: u64,
    objects: Vec<Procedure>,
}

#[derive(Debug)]
pub(crate) struct ProcedureView {
    prefix: String,
    changes: std::sync::Arc<Changes>,
    view: Mutex<View<Meta>>,
    /// The etcd revision of the newest change seen of what a list answers with.
    changed_at: AtomicU64,
    listed: Mutex<Option<Listed>>,
}

impl ProcedureView {
    pub(crate) fn new(prefix: String, changes: std::sync::Arc<Changes>) -> ProcedureView {
        ProcedureView {
            prefix,
            changes,
            view: Mutex::new(View::default()),
            changed_at: AtomicU64::new(0),
            listed: Mutex::new(None),
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View<Meta>> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn listed(&self) -> std::sync::MutexGuard<'_, Option<Listed>> {
        self.listed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The procedures with the store's prefix as the watch sees them, if it has listed them
    /// and not failed since.
    pub(crate) fn fingerprint(&self) -> Option<Fingerprint> {
        let all = self.view().all()?;
        Some(self.fingerprint_of(all.iter().map(|meta| &meta.metadata)))
    }

    fn fingerprint_of<'a>(&self, metas: impl Iterator<Item = &'a ObjectMeta>) -> Fingerprint {
        metas
            .filter_map(|meta| {
                let name = meta.name.as_deref()?;
                name.starts_with(&self.prefix)
                    .then(|| (name.to_owned(), key_of(meta)))
            })
            .collect()
    }

    /// The etcd revision a list must have reached to hold every change the watch has seen.
    pub(crate) fn changed_at(&self) -> u64 {
        self.changed_at.load(Ordering::Relaxed)
    }

    /// The objects of the last list, if nothing a list answers with has changed since and
    /// the list is at least as new as etcd revision `at_least`.
    pub(crate) fn cached(&self, at_least: u64) -> Option<Vec<Procedure>> {
        let current = self.fingerprint()?;
        let listed = self.listed();
        let listed = listed.as_ref()?;
        (listed.fingerprint == current && listed.revision >= at_least.max(self.changed_at()))
            .then(|| listed.objects.clone())
    }

    /// Keeps a list made at `revision`: it answers while the watch shows the same procedures.
    pub(crate) fn keep(&self, revision: u64, objects: Vec<Procedure>) {
        let fingerprint = self.fingerprint_of(objects.iter().map(|o| &o.metadata));
        *self.listed() = Some(Listed {
            fingerprint,
            revision,
            objects,
        });
    }

    /// Whether `change` changed what a list answers with.
    fn changes_list(&self, change: &ObjectChange<Meta>) -> bool {
        let before = change.before.as_ref().and_then(Option::as_ref);
        change.name.starts_with(&self.prefix) && key(before) != key(change.after.as_ref())
    }

    fn apply(&self, event: watcher::Event<Meta>) {
        let changes = self.view().apply(event);
        let mut changed = false;
        for change in changes.iter().filter(|change| self.changes_list(change)) {
            changed = true;
            let meta = change
                .after
                .as_ref()
                .or(change.before.as_ref().and_then(Option::as_ref));
            if let Some(version) = meta.and_then(|m| revision(&m.metadata)) {
                self.changed_at.fetch_max(version, Ordering::Relaxed);
            }
        }
        if changed {
            // An idle agent waits for a jump of the counter: a new procedure may be its work.
            self.changes.bump(WAKE_ALL);
        }
    }

    fn lost(&self) {
        self.view().lost();
    }
}

/// Watches the Procedures' metadata until the task is aborted.
pub(crate) async fn watch_procedures(api: Api<Meta>, view: std::sync::Arc<ProcedureView>) {
    watch(
        api,
        watcher::Config::default(),
        "the Procedures",
        |event| view.apply(event),
        || view.lost(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn meta(name: &str, version: u64, generation: i64) -> Meta {
        PartialObjectMeta {
            types: None,
            _phantom: std::marker::PhantomData,
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                generation: Some(generation),
                resource_version: Some(version.to_string()),
                ..ObjectMeta::default()
            },
        }
    }

    fn synced(view: &ProcedureView, objects: &[Meta]) {
        view.apply(watcher::Event::Init);
        for object in objects {
            view.apply(watcher::Event::InitApply(object.clone()));
        }
        view.apply(watcher::Event::InitDone);
    }

    fn procedure(name: &str, version: u64, generation: i64) -> Procedure {
        let spec = rota_core::ProcedureSpec::new(name, "true\n".to_string());
        Procedure {
            metadata: meta(name, version, generation).metadata,
            spec: crate::procedure::ProcedureBody::of(&spec),
            status: None,
        }
    }

    #[test]
    fn a_list_is_kept_until_a_procedure_comes_goes_or_changes_its_spec() {
        let changes = Changes::new();
        let view = ProcedureView::new("t-".into(), changes.clone());
        view.keep(6, vec![procedure("t-a", 5, 1)]);
        assert!(view.cached(0).is_none(), "no watch yet: list");
        synced(&view, &[meta("t-a", 5, 1), meta("other-b", 6, 1)]);
        assert!(
            view.cached(0).is_some(),
            "a list made before the watch listed"
        );
        assert!(view.cached(7).is_none(), "a wake newer than the list");

        let start = changes.current();
        view.apply(watcher::Event::Apply(meta("t-a", 9, 1)));
        view.apply(watcher::Event::Apply(meta("other-b", 10, 2)));
        assert!(view.cached(0).is_some(), "a status write, another prefix");
        assert_eq!(changes.current(), start, "they wake nobody");

        view.apply(watcher::Event::Apply(meta("t-a", 11, 2)));
        assert!(view.cached(0).is_none(), "a new spec");
        assert_eq!(changes.current(), start + WAKE_ALL);
        assert_eq!(view.changed_at(), 11);
        view.keep(10, vec![procedure("t-a", 11, 2)]);
        assert!(view.cached(0).is_none(), "a list older than the change");

        view.keep(11, vec![procedure("t-a", 11, 2)]);
        assert!(view.cached(0).is_some());
        view.apply(watcher::Event::Apply(meta("t-c", 12, 1)));
        assert!(view.cached(0).is_none(), "a new procedure");
        view.keep(12, vec![procedure("t-a", 11, 2), procedure("t-c", 12, 1)]);
        view.apply(watcher::Event::Delete(meta("t-c", 13, 1)));
        assert!(view.cached(0).is_none(), "a deleted one");
        assert_eq!(changes.current(), start + 3 * WAKE_ALL);

        view.keep(13, vec![procedure("t-a", 11, 2)]);
        assert!(view.cached(0).is_some());
        view.lost();
        assert!(view.cached(0).is_none(), "a failed watch may miss changes");
    }
}

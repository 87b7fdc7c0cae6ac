//! The watches a handle starts as its agents need them (see the crate docs, "Watches"):
//!
//! - once an agent opens a session: the Procedures' metadata (`procedure_view`) and the
//!   agents' own RotaNodes, so that an idle agent learns of a new procedure, an operator's
//!   change of its node or a newer session of its node without asking;
//! - while one of its nodes is queued or in its window: the slot Leases (`changes`). An idle
//!   node waits for no slot, so an idle agent holds three watches, not four.
//!
//! The own RotaNodes' watch keeps the object this process answers its agent's reads from (see
//! `own_object`) as current as the API server's: a write this process did not make arrives as
//! an event newer than what it last read or wrote, replaces it, and wakes the agent. Only while
//! the watch has listed the objects and not failed since are the agent's reads of its node
//! answered from that object, and the idle session's check needs no request.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use rota_core::NodeName;
use rota_store::WAKE_ALL;
use tokio::task::AbortHandle;

use super::queue_view::QueueView;
use super::{Inner, KubeStore, NAMESPACE_LABEL, node_name};
use crate::changes::watch_leases;
use crate::crd::RotaNode;
use crate::procedure::Procedure;
use crate::procedure_view::watch_procedures;
use crate::view::{revision, watch};

/// Which RotaNodes the own watch follows.
#[derive(Clone, Debug, PartialEq, Eq)]
enum OwnScope {
    /// The one node whose agent runs in this process, by name: an agent's handle.
    One(String),
    /// Every RotaNode of the installation: a handle with several agents (`rota simulate`).
    All,
}

/// The watches started so far; each ends when the handle's last clone is dropped.
#[derive(Default)]
pub(super) struct Watches {
    procedures: Option<AbortHandle>,
    own: Option<(OwnScope, AbortHandle)>,
    leases: Option<AbortHandle>,
    /// The queued RotaNodes, while the own watch follows them all.
    queue: QueueView,
}

impl Watches {
    pub(super) fn abort(&mut self) {
        for task in [self.procedures.take(), self.leases.take()]
            .into_iter()
            .flatten()
            .chain(self.own.take().map(|(_, task)| task))
        {
            task.abort();
        }
    }

    /// How many watches run: what an agent holds open against the API server.
    pub(super) fn open(&self) -> usize {
        usize::from(self.procedures.is_some())
            + usize::from(self.own.is_some())
            + usize::from(self.leases.is_some())
    }
}

impl KubeStore {
    fn watch_tasks(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.inner.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts what an agent's handle watches, once `node`'s agent has opened its session.
    pub(super) fn watch_for_agents(&self) {
        let client = self.inner.rota_nodes.clone().into_client();
        let scope = match self.local_nodes().as_slice() {
            [one] => OwnScope::One(self.object_name(one)),
            _ => OwnScope::All,
        };
        let mut watches = self.watch_tasks();
        if watches.procedures.is_none() {
            let api: Api<PartialObjectMeta<Procedure>> = Api::all(client.clone());
            let view = self.inner.procedures.view.clone();
            watches.procedures = Some(tokio::spawn(watch_procedures(api, view)).abort_handle());
        }
        if watches.own.as_ref().is_none_or(|(s, _)| *s != scope) {
            if let Some((_, task)) = watches.own.take() {
                task.abort();
            }
            self.inner.own_synced.store(false, Ordering::SeqCst);
            watches.queue.restart();
            let config = match &scope {
                OwnScope::One(name) => watcher::Config::default()
                    .fields(&format!("metadata.name={name}"))
                    .labels(&format!(
                        "{NAMESPACE_LABEL}={}",
                        self.inner.config.namespace
                    )),
                OwnScope::All => watcher::Config::default().labels(&self.selector()),
            };
            // A RotaNode that does not read fails the watch, which then only costs the
            // requests it saves: the store reads the node itself.
            let api = self.inner.rota_nodes.clone();
            let all = scope == OwnScope::All;
            let task = tokio::spawn(watch_own(api, config, all, Arc::downgrade(&self.inner)));
            watches.own = Some((scope, task.abort_handle()));
        }
    }

    /// Runs the watch of the slot Leases while a node of this handle's agents is queued or in
    /// its window, and stops it once they are all idle.
    pub(super) fn watch_leases_while_busy(&self) {
        let busy = self.any_local_busy();
        let mut watches = self.watch_tasks();
        match (busy, watches.leases.is_some()) {
            (true, false) => {
                let task = watch_leases(self.inner.leases.clone(), self.inner.changes.clone());
                watches.leases = Some(tokio::spawn(task).abort_handle());
            }
            (false, true) => {
                if let Some(task) = watches.leases.take() {
                    task.abort();
                }
                self.inner.changes.lost();
            }
            _ => {}
        }
    }

    /// How many watches this handle holds open: the ConfigMaps' one, and those its agents need.
    pub fn watches(&self) -> usize {
        1 + self.watch_tasks().open()
    }

    /// Whether every watch an idle agent holds has listed its objects and not failed since:
    /// from then on, the agent's looks are answered without a request.
    pub fn settled(&self) -> bool {
        self.own_watched()
            && self.inner.procedures.view.fingerprint().is_some()
            && self.inner.settings.current(super::CONFIG_MAP).is_some()
    }

    /// The queued RotaNodes that took a place no later than `place`, as the watch of every
    /// RotaNode shows them (see `queue_view`); `None` unless it runs and has listed them.
    pub(super) fn queued_seen(
        &self,
        place: Option<rota_store::Millis>,
    ) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>> {
        self.watch_tasks().queue.queued(place)
    }

    /// Runs `f` on the queue's view, for the watch of every RotaNode.
    pub(super) fn view_queue(&self, f: impl FnOnce(&mut QueueView)) {
        f(&mut self.watch_tasks().queue);
    }

    /// Whether the own RotaNodes' watch has listed them and not failed since: the object this
    /// process keeps of each is then as current as the API server's.
    pub(super) fn own_watched(&self) -> bool {
        self.inner.own_synced.load(Ordering::SeqCst)
    }

    /// Marks a write of `node`'s RotaNode by this process as under way until the guard is
    /// dropped, after the write's answer is kept: an event of the own watch that arrives
    /// meanwhile is held back until then, so that the echo of this process's own write is not
    /// taken for someone else's (which would wake every waiter of the process).
    pub(super) fn writing(&self, node: &NodeName) -> Writing {
        let mut writing = self.inner.writing.lock().unwrap_or_else(|e| e.into_inner());
        writing.entry(node.as_str().to_owned()).or_default().0 += 1;
        Writing {
            store: self.clone(),
            node: node.clone(),
        }
    }

    /// Takes `object`, as the own watch delivered it, for its node's cache if it is newer than
    /// what this process read or wrote: then someone else wrote it, and its agent must look.
    fn observe_own(&self, object: &RotaNode) {
        let Ok(node) = node_name(object) else {
            return;
        };
        if self.local_session(&node).is_none() {
            return;
        }
        {
            let mut writing = self.inner.writing.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, held_back)) = writing.get_mut(node.as_str()) {
                let newer = held_back
                    .as_ref()
                    .is_none_or(|held| revision(&object.metadata) > revision(&held.metadata));
                if newer {
                    *held_back = Some(object.clone());
                }
                return;
            }
        }
        let seen = self
            .cached(&node)
            .and_then(|known| revision(&known.object.metadata));
        let newer = match (revision(&object.metadata), seen) {
            (Some(event), Some(seen)) => event > seen,
            _ => true,
        };
        if newer {
            // Unknown: whether the writer gave the node's slot back with it.
            self.cache(&node, object, false);
            self.inner.changes.bump(WAKE_ALL);
        }
    }
}

/// A write of a node's RotaNode under way (see [`KubeStore::writing`]).
pub(super) struct Writing {
    store: KubeStore,
    node: NodeName,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let held_back = {
            let mut writing = self
                .store
                .inner
                .writing
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some((count, held_back)) = writing.get_mut(self.node.as_str()) else {
                return;
            };
            *count -= 1;
            if *count > 0 {
                return;
            }
            let held_back = held_back.take();
            writing.remove(self.node.as_str());
            held_back
        };
        if let Some(object) = held_back {
            self.store.observe_own(&object);
        }
    }
}

/// Watches the RotaNodes `config` chooses until the task is aborted, keeping `store`'s own,
/// and with `all` (every RotaNode of the installation) the view of the queue.
async fn watch_own(api: Api<RotaNode>, config: watcher::Config, all: bool, store: Weak<Inner>) {
    let with = |f: &mut dyn FnMut(&KubeStore)| {
        if let Some(inner) = store.upgrade() {
            f(&KubeStore { inner });
        }
    };
    watch(
        api,
        config,
        "this process's RotaNodes",
        |event| match event {
            watcher::Event::Init if all => with(&mut |store| store.view_queue(QueueView::restart)),
            watcher::Event::Init => {}
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                with(&mut |store| {
                    if all {
                        store.saw_revision(&object.metadata);
                        store.view_queue(|view| view.apply(&object.metadata));
                    }
                    store.observe_own(&object);
                });
            }
            watcher::Event::Delete(object) => with(&mut |store| {
                if all {
                    store.view_queue(|view| view.delete(&object.metadata));
                }
                if let Ok(node) = node_name(&object) {
                    store.stop_answering_reads(&node);
                    store.inner.changes.bump(WAKE_ALL);
                }
            }),
            watcher::Event::InitDone => with(&mut |store| {
                if all {
                    store.view_queue(QueueView::listed);
                }
                store.inner.own_synced.store(true, Ordering::SeqCst);
            }),
        },
        || {
            with(&mut |store| {
                store.view_queue(QueueView::lost);
                store.inner.own_synced.store(false, Ordering::SeqCst);
            });
        },
    )
    .await;
}

//! The queued RotaNodes as a handle with several agents (`rota simulate`'s) sees them through
//! its watch of every RotaNode of the installation (see `watches`). A look at the queue that
//! only tells a waiter to wait is answered from it, without a list: at a 1,000-node fleet's
//! start, a thousand lists of the nodes ahead, from one process, kept the test API server busy
//! until it timed its requests out. A look that may grant still lists the queue consistently.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rota_store::Millis;

use super::STATE_LABEL;
use crate::queue_labels::QUEUED_AT_LABEL;
use crate::view::revision;

/// The metadata of every queued RotaNode, by object name, while the watch of them all runs.
#[derive(Default)]
pub(super) struct QueueView {
    /// Whether the watch follows every RotaNode (not one agent's own) and has listed them
    /// since it last started or failed.
    synced: bool,
    queued: HashMap<String, ObjectMeta>,
    /// The newest revision taken of each RotaNode: the handle's own writes come in both
    /// through their answers and through the watch, in either order.
    revisions: HashMap<String, u64>,
}

impl QueueView {
    /// A watch of every RotaNode starts or restarts its list: what was seen may be gone.
    pub(super) fn restart(&mut self) {
        self.synced = false;
        self.queued.clear();
        self.revisions.clear();
    }

    pub(super) fn listed(&mut self) {
        self.synced = true;
    }

    pub(super) fn lost(&mut self) {
        self.synced = false;
    }

    /// Takes a version of a RotaNode, as the watch delivered it or this handle wrote it,
    /// unless a newer one was taken.
    pub(super) fn apply(&mut self, meta: &ObjectMeta) {
        let Some(name) = meta.name.clone() else {
            return;
        };
        if let Some(this) = revision(meta) {
            match self.revisions.get(&name) {
                Some(newest) if *newest > this => return,
                _ => self.revisions.insert(name.clone(), this),
            };
        }
        let queued = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(STATE_LABEL))
            .is_some_and(|state| state == "queued");
        if queued {
            self.queued.insert(name, meta.clone());
        } else {
            self.queued.remove(&name);
        }
    }

    pub(super) fn delete(&mut self, meta: &ObjectMeta) {
        if let Some(name) = &meta.name {
            self.queued.remove(name);
            self.revisions.remove(name);
        }
    }

    /// The queued nodes that took a place no later than `place` (all of them without it), as a
    /// list with the queue's label selector would hold them; `None` while the view is not
    /// synced.
    pub(super) fn queued(&self, place: Option<Millis>) -> Option<Vec<ObjectMeta>> {
        if !self.synced {
            return None;
        }
        let within = |meta: &ObjectMeta| match place {
            Some(place) if place >= 0 => meta
                .labels
                .as_ref()
                .and_then(|l| l.get(QUEUED_AT_LABEL))
                .and_then(|at| at.parse::<Millis>().ok())
                .is_some_and(|at| at <= place),
            _ => true,
        };
        Some(
            self.queued
                .values()
                .filter(|m| within(m))
                .cloned()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(name: &str, state: &str, queued_at: Option<Millis>) -> ObjectMeta {
        at(name, state, queued_at, 1)
    }

    fn at(name: &str, state: &str, queued_at: Option<Millis>, revision: u64) -> ObjectMeta {
        let mut labels = BTreeMap::from([(STATE_LABEL.to_owned(), state.to_owned())]);
        if let Some(at) = queued_at {
            labels.insert(QUEUED_AT_LABEL.to_owned(), at.to_string());
        }
        ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            resource_version: Some(revision.to_string()),
            ..ObjectMeta::default()
        }
    }

    fn names(view: &QueueView, place: Option<Millis>) -> Option<Vec<String>> {
        view.queued(place).map(|metas| {
            let mut names: Vec<String> = metas.into_iter().filter_map(|m| m.name).collect();
            names.sort();
            names
        })
    }

    #[test]
    fn holds_the_queued_nodes_up_to_a_place_once_listed() {
        let mut view = QueueView::default();
        view.apply(&meta("a", "queued", Some(10)));
        view.apply(&meta("b", "queued", Some(20)));
        view.apply(&meta("c", "idle", None));
        assert_eq!(names(&view, None), None, "not listed yet");
        view.listed();
        assert_eq!(names(&view, Some(10)), Some(vec!["a".to_owned()]));
        assert_eq!(
            names(&view, None),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        // A node that leaves the queue, or is deleted, is gone from it.
        view.apply(&meta("a", "maintenance", None));
        view.delete(&meta("b", "queued", Some(20)));
        assert_eq!(names(&view, None), Some(vec![]));
    }

    #[test]
    fn a_failed_or_restarted_watch_answers_nothing_until_it_lists_again() {
        let mut view = QueueView::default();
        view.apply(&meta("a", "queued", Some(10)));
        view.listed();
        view.lost();
        assert_eq!(names(&view, None), None);
        view.restart();
        view.listed();
        assert_eq!(names(&view, None), Some(vec![]), "the restart forgot a");
    }

    #[test]
    fn an_older_version_after_a_newer_one_changes_nothing() {
        let mut view = QueueView::default();
        view.listed();
        view.apply(&at("a", "maintenance", None, 7));
        view.apply(&at("a", "queued", Some(10), 5));
        assert_eq!(names(&view, None), Some(vec![]));
        view.apply(&at("b", "queued", Some(10), 9));
        view.apply(&at("b", "idle", None, 8));
        assert_eq!(names(&view, None), Some(vec!["b".to_owned()]));
    }
}

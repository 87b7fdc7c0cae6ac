//! Taking a slot (`Store::try_acquire_slot`): a look at the queue (the node, the slot Leases,
//! the concurrency and the queued nodes, read at once), the answer "wait for n changes" it
//! gives and remembers, and the take of a free slot. The counting is in `queue`.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ListParams, VersionMatch};
use rota_core::NodeName;
use rota_store::{Acquire, Millis, Result, Session, now_millis};

use super::caches::{FAR_WAIT_CACHE, WAIT_CACHE};
use super::cas::CAS_ATTEMPTS;
use super::queue::{
    Waiter, changes_before_turn, far, place_in_queue, places_ahead, slot_for, waiter_of,
    waiters_ahead,
};
use super::slot_leases::held_by;
use super::{KubeStore, ROTA_NODES, STATE_LABEL, fenced};
use crate::crd::RotaNodeStatus;
use crate::error::Context;
use crate::view::revision;
use crate::{queue_labels, slots};

/// What one look at the queue read.
struct Look {
    /// The node's status, its session current.
    status: RotaNodeStatus,
    leases: Vec<Lease>,
    concurrency: u32,
    /// The metadata of the queued nodes that may be ahead of this one.
    queued: Vec<ObjectMeta>,
    /// The ownerReference to the node's Node, when it was read with the rest.
    owner: Option<Option<OwnerReference>>,
    now: Millis,
}

impl KubeStore {
    pub(super) async fn acquire_slot(&self, session: &Session) -> Result<Acquire> {
        // Waiters ask often (at every change, and at every re-read of the agent), and an answer
        // costs five requests. An answer "wait for n changes" given at counter c stands until
        // the counter reaches c + n: every change this process can see is counted, and each
        // moves a waiter at most one place. So only the waiters at the front ask the API server
        // after a release. The answer is recomputed after `WAIT_CACHE` anyway, for what the
        // counter does not show (a waiter ahead whose session ran out, or that left the queue
        // in another process).
        let counter = self.inner.changes.current();
        if let Some(changes) = self.cached_wait(session, counter, now_millis()) {
            return Ok(Acquire::Wait { changes });
        }
        // Only the nodes queued no later than this one can be ahead of it: the list asks for
        // those alone, by the place this process last saw the node take (a queued node keeps
        // it). At a fleet-wide start that halves what 100 looks list, and the front waiters,
        // who take the slots, list almost nothing.
        let place_seen = self
            .cached(&session.node)
            .and_then(|known| known.object.status?.queued_at)
            .map(|t| t.0);
        // A waiter whose earlier answer near the front has run out is likely at the front: it
        // reads its Node (for the Lease's owner) with the rest. A node's first look after it
        // queued, and one far back, reads it only if granted: when a fleet queues at once,
        // most are told to wait.
        let turn_may_have_come = self.answered_near(session);
        // A look that ends in "wait" reads the API server's cache as it is; one that may take
        // a slot reads again, consistently.
        let mut from_cache = true;
        for _ in 0..CAS_ATTEMPTS {
            let look = self
                .look(session, place_seen, turn_may_have_come, from_cache)
                .await?;
            let now = look.now;
            if let Some(slot) = self.slot_held(&session.node, &look.leases) {
                return Ok(Acquire::Granted(slot));
            }
            let queued_at = place_in_queue(&look.status);
            let holders: Vec<&str> = look.leases.iter().filter_map(slots::holder).collect();
            let waiters = match queued_at.filter(|q| *q <= now) {
                Some(place) => {
                    self.waiters(place, place_seen, look.queued, &holders, now, from_cache)
                        .await?
                }
                None => Vec::new(),
            };
            let changes = changes_before_turn(
                session.node.as_str(),
                queued_at,
                &waiters,
                look.concurrency,
                holders.len(),
                now,
            );
            let places =
                queued_at.map_or(0, |q| places_ahead(session.node.as_str(), q, &waiters, now));
            let far = far(look.concurrency);
            self.wait_far_back(session, &look.status, places >= far)
                .await?;
            // A node far back looks again once it may have come near: it renews its session
            // as usual from then on, before the others' looks need it to.
            let changes = match places.checked_sub(far) {
                Some(beyond) => changes.min(u64::try_from(beyond).unwrap_or(u64::MAX) + 1),
                None => changes,
            };
            if changes > 0 {
                let near = places < far;
                let valid = if near { WAIT_CACHE } else { far_wait_valid() };
                return Ok(if queued_at.is_some_and(|q| q <= now) {
                    self.cache_wait(session, counter, now, changes, valid, near)
                } else {
                    Acquire::Wait { changes }
                });
            }
            if from_cache {
                from_cache = false;
                continue;
            }
            let place = queued_at.map_or(0, |q| {
                waiters_ahead(session.node.as_str(), q, &waiters, look.concurrency, now)
            });
            let Some((slot, previous)) = slot_for(&look.leases, look.concurrency, place) else {
                if self.free_orphaned(&look.leases).await? > 0 {
                    continue;
                }
                return Ok(self.cache_wait(session, counter, now, 1, WAIT_CACHE, true));
            };
            let owner = match look.owner {
                Some(owner) => owner,
                None => self.node_owner(&session.node).await?,
            };
            if self.take(slot, previous, &session.node, owner).await? {
                return Ok(Acquire::Granted(slot));
            }
        }
        // Lost every race: others took the free slots; their releases will wake this waiter.
        Ok(Acquire::Wait { changes: 1 })
    }

    /// The reads of a look at the queue, with the Node's ownerReference if `with_owner`. They
    /// are independent: one round trip instead of five in a row, which is most of a handoff.
    async fn look(
        &self,
        session: &Session,
        place_seen: Option<Millis>,
        with_owner: bool,
        from_cache: bool,
    ) -> Result<Look> {
        let owner_now = async {
            if with_owner {
                self.node_owner(&session.node).await.map(Some)
            } else {
                Ok(None)
            }
        };
        let (object, leases, concurrency, queued, owner) = tokio::try_join!(
            self.own_object(&session.node),
            self.list_leases(),
            self.read_concurrency(),
            self.list_queue_metadata(place_seen, from_cache),
            owner_now,
        )?;
        let now = now_millis();
        // The node's own object may come from this process's last write (see
        // `own_object`); a refusal is only ever given on a fresh read.
        let mut object = object;
        if !object
            .as_ref()
            .is_some_and(|o| self.session_ok(&o.status.clone().unwrap_or_default(), session, now))
        {
            object = self.get_rota_node(&session.node).await?;
        }
        let Some(object) = object else {
            return Err(fenced(session));
        };
        let status = object.status.unwrap_or_default();
        if !self.session_ok(&status, session, now) {
            return Err(fenced(session));
        }
        Ok(Look {
            status,
            leases,
            concurrency,
            queued,
            owner,
            now,
        })
    }

    /// The slot `node` already holds among `leases`, if any.
    fn slot_held(&self, node: &NodeName, leases: &[Lease]) -> Option<u32> {
        let lease = held_by(leases, node)?;
        let slot = slots::slot_of(lease)?;
        self.cache_lease(node, lease);
        Some(slot)
    }

    /// The waiters queued no later than `place`: from the labels of `queued` (listed by
    /// `place_seen`, the place this process knew of), or from the objects themselves when one
    /// lacks the labels (see `queue_labels`).
    async fn waiters(
        &self,
        place: Millis,
        place_seen: Option<Millis>,
        queued: Vec<ObjectMeta>,
        holders: &[&str],
        now: Millis,
        from_cache: bool,
    ) -> Result<Vec<Waiter>> {
        let queue = self.queue_selector(Some(place));
        // The node took a later place than this process knew of (an operator re-queued it):
        // the list may have missed nodes between the two.
        let queued = match place_seen {
            Some(seen) if seen < place => self.list_queue_metadata(Some(place), from_cache).await?,
            _ => queued,
        };
        let prefix = &self.inner.config.name_prefix;
        Ok(match queue_labels::waiters(&queued, prefix, holders, now) {
            Some(waiters) => waiters,
            None => self
                .list_rota_nodes(&queue)
                .await?
                .iter()
                .filter_map(|o| waiter_of(o, holders, now))
                .collect(),
        })
    }

    /// The label selector of the queued RotaNodes, with `place` (a `queuedAt`) of those queued
    /// no later than it.
    fn queue_selector(&self, place: Option<Millis>) -> String {
        let queued = format!("{},{STATE_LABEL}=queued", self.selector());
        match place {
            // Label selectors compare integers with `<`; a node queued at the same instant
            // may be ahead by its name.
            Some(place) if place >= 0 => format!(
                "{queued},{}<{}",
                queue_labels::QUEUED_AT_LABEL,
                place.saturating_add(1)
            ),
            _ => queued,
        }
    }

    /// The metadata of the RotaNodes with `selector`, for a look at the queue, whose labels hold
    /// all it needs (see `queue_labels`).
    ///
    /// Without `from_cache`, the list is consistent: it holds every queueing the API server had
    /// taken when it was asked, so the queue order is the written one. A list from a lagging
    /// cache could miss a node ahead of this one and grant out of order. But a consistent list
    /// waits for the API server's cache to catch up with etcd (its newest revision, which every
    /// write of the fleet moves), and reads etcd itself when that takes seconds: at a
    /// 1,000-node fleet's start, a thousand such lists made the busy API server time out nearly
    /// all of them. So a look that only tells a waiter to wait reads the cache holding at least
    /// what this handle wrote or saw (its own writes, an operator's through it, the slot
    /// Leases of its watch), which the cache has nearly always caught up with, or, after a
    /// 504, the cache as it is: what a list from it lacks or still shows moves the waiter a
    /// few places, and its answer stands for seconds (see `cache_wait`); a look that may grant
    /// reads again, consistently.
    ///
    /// A handle with several agents answers such a look from its watch of every RotaNode
    /// instead (see `queue_view`), while that has listed them.
    async fn list_queue_metadata(
        &self,
        place: Option<Millis>,
        from_cache: bool,
    ) -> Result<Vec<ObjectMeta>> {
        if from_cache && let Some(queued) = self.queued_seen(place) {
            return Ok(queued);
        }
        let selector = &self.queue_selector(place);
        let params = ListParams::default().labels(selector);
        let list = if from_cache {
            let newest = self.newest_seen().max(self.leases_seen());
            let at_least = newest.map(|revision| {
                params
                    .clone()
                    .matching(VersionMatch::NotOlderThan)
                    .at(&revision.to_string())
            });
            match at_least {
                Some(at_least) => match self.inner.rota_nodes.list_metadata(&at_least).await {
                    // The API server's cache is seconds behind (a busy API server): as it is,
                    // it still tells a waiter far back that it waits.
                    Err(kube::Error::Api(status)) if status.code == 504 => {
                        self.inner
                            .rota_nodes
                            .list_metadata(&params.match_any())
                            .await
                    }
                    listed => listed,
                },
                None => {
                    self.inner
                        .rota_nodes
                        .list_metadata(&params.match_any())
                        .await
                }
            }
        } else {
            self.inner.rota_nodes.list_metadata(&params).await
        }
        .context("list", ROTA_NODES, format!("with labels {selector}"))?;
        Ok(list.items.into_iter().map(|o| o.metadata).collect())
    }

    /// The newest revision among the slot Leases this handle's watch shows.
    fn leases_seen(&self) -> Option<u64> {
        self.inner
            .changes
            .leases()?
            .iter()
            .filter_map(|l| revision(&l.metadata))
            .max()
    }
}

/// How long the answer to a waiter far back stands: [`FAR_WAIT_CACHE`], give or take half,
/// so that waiters told to wait at the same moment do not all look again together.
fn far_wait_valid() -> Millis {
    let half = FAR_WAIT_CACHE / 2;
    half + fastrand::i64(0..FAR_WAIT_CACHE)
}

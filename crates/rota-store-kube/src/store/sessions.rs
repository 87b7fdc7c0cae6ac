//! Sessions: opening one (and the node's RotaNode with it), heartbeats (in memory while the
//! node is idle, see the crate docs), closing, and the check every agent write makes.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use rota_core::{NodeName, NodeState};
use rota_kube_client::is_conflict;
use rota_store::{Error, Millis, Result, Session, now_millis};
use tracing::warn;

use super::caches::LocalSession;
use super::cas::{CAS_ATTEMPTS, Edit};
use super::slot_leases::held_by;
use super::waiting::ttl_ms;
use super::{KubeStore, ROTA_NODES, fenced};
use crate::crd::{RotaNode, RotaNodeSpec, RotaNodeStatus, SessionStatus, Timestamp};
use crate::error::Context;
use crate::status;

/// How long an idle agent's heartbeats go without asking the API server whether its session
/// is still current (a read; idle heartbeats never write), while the watch of its own RotaNode
/// is down; while it stands, the watch would have brought a newer session.
const IDLE_RECHECK: Millis = 5 * 60 * 1000;

impl KubeStore {
    /// Whether `session` is the node's current one and has not expired: by the deadline in the
    /// RotaNode, or by the later one this process renewed in memory while the node was idle.
    pub(super) fn session_ok(
        &self,
        status: &RotaNodeStatus,
        session: &Session,
        now: Millis,
    ) -> bool {
        let Some(current) = &status.session else {
            return false;
        };
        let local = self
            .local_session(&session.node)
            .filter(|l| l.id == session.id)
            .map_or(0, |l| l.deadline);
        current.id == session.id && current.deadline.0.max(local) > now
    }

    /// Whether the own RotaNodes' watch shows `session` as its node's current one: a newer
    /// session would have reached this process through it.
    fn watched_current(&self, session: &Session) -> bool {
        self.own_watched()
            && self.cached(&session.node).is_some_and(|known| {
                known
                    .object
                    .status
                    .as_ref()
                    .and_then(|s| s.session.as_ref())
                    .is_some_and(|current| current.id == session.id)
            })
    }

    /// Why a session's renewal was refused: `Expired` if it is still the node's latest (nobody
    /// took the node over), else `Fenced`.
    async fn expired_or_fenced(&self, session: &Session) -> Error {
        match self.get_rota_node(&session.node).await {
            Ok(object) => Error::renewal_refused(
                session,
                object
                    .and_then(|o| o.status?.session)
                    .is_some_and(|current| current.id == session.id),
            ),
            Err(e) => e,
        }
    }

    /// A new session for `node` (see `Store::open_session`): written into its RotaNode, made
    /// for the node if it has none.
    pub(super) async fn start_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let ttl_ms = ttl_ms(ttl);
        for _ in 0..CAS_ATTEMPTS {
            let now = now_millis();
            let deadline = Timestamp(now.saturating_add(ttl_ms));
            // The Leases with the object: the agent's first pass then needs no request, and
            // an idle node's leftover slot is found without another one.
            let (object, leases) = tokio::try_join!(self.get_rota_node(node), self.list_leases())?;
            let held = held_by(&leases, node).cloned();
            let (written, id) = match object {
                Some(mut object) => {
                    let mut status = object.status.take().unwrap_or_default();
                    // Ids grow per node even if this clock is behind the last agent's.
                    let id = status.session.as_ref().map_or(now, |s| now.max(s.id + 1));
                    status.session = Some(SessionStatus {
                        id,
                        deadline,
                        sparse: false,
                    });
                    object.status = Some(status);
                    (self.replace(object, true).await?, id)
                }
                None => (self.create_rota_node(node, now, deadline).await?, now),
            };
            let Some(written) = written else {
                continue;
            };
            // Nobody wrote the object between the read and this write, so no operator gave a
            // slot back in between either: the Leases read with it are current with it (the
            // write kept the object with them, see `replace` and `create_rota_node`).
            match &held {
                Some(lease) => self.cache_lease(node, lease),
                None => self.forget_lease(node),
            }
            let session = Session {
                id,
                node: node.clone(),
            };
            let status = written.status.unwrap_or_default();
            self.open_local(
                node,
                LocalSession {
                    id,
                    idle: status.state == NodeState::Idle,
                    deadline: deadline.0,
                    checked_at: now,
                    ttl: ttl_ms,
                    far_back: false,
                },
            );
            self.inner.settings.add_local(node.as_str());
            // An idle node holds no slot: one it still holds was left by an agent that died
            // between recording the end of its window and giving the slot back.
            if status.state == NodeState::Idle
                && let Some(lease) = &held
            {
                warn!(node = %node, "giving back a slot left held by the previous agent");
                self.release_lease(lease, node, now).await?;
            }
            return Ok(session);
        }
        Err(self.contended(node))
    }

    /// Creates the RotaNode of a node that has none, with a tag of its own and a first session
    /// (id `now`) until `deadline`; `None` if another create of it came first.
    async fn create_rota_node(
        &self,
        node: &NodeName,
        now: Millis,
        deadline: Timestamp,
    ) -> Result<Option<RotaNode>> {
        let name = self.object_name(node);
        let (tag, claim) = self.claim_tag(node).await?;
        let mut status = status::new_status(now, tag);
        status.session = Some(SessionStatus {
            id: now,
            deadline,
            sparse: false,
        });
        let object = RotaNode {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(self.labels(NodeState::Idle)),
                ..ObjectMeta::default()
            },
            spec: RotaNodeSpec {
                node: node.as_str().into(),
            },
            status: Some(status),
        };
        match self
            .inner
            .rota_nodes
            .create(&PostParams::default(), &object)
            .await
        {
            Ok(written) => {
                self.schema_kept(&written)?;
                self.cache(node, &written, true);
                if let Some(claim) = claim {
                    self.own_tag(&written, tag, claim).await;
                }
                Ok(Some(written))
            }
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(e).context("create", ROTA_NODES, name),
        }
    }

    /// A heartbeat (see `Store::heartbeat`): in memory while the node is idle, else written.
    pub(super) async fn renew_session(&self, session: &Session, ttl: Duration) -> Result<()> {
        let ttl_ms = ttl_ms(ttl);
        let now = now_millis();
        if let Some(local) = self.local_session(&session.node) {
            if local.id > session.id {
                return Err(fenced(session));
            }
            self.remember_ttl(session, ttl_ms);
            // Idle: renew in memory only; nobody else needs an idle node's deadline, and an
            // idle fleet then sends no writes at all (see the crate docs).
            let checked = now - local.checked_at < IDLE_RECHECK || self.watched_current(session);
            if local.id == session.id && local.idle && checked {
                if local.deadline <= now {
                    return Err(self.expired_or_fenced(session).await);
                }
                self.renew_locally(session, now.saturating_add(ttl_ms));
                return Ok(());
            }
            // Queued far back: in memory too, between sparse renewals (see `waiting`).
            if local.id == session.id && self.sparse_in_memory(session, now) {
                self.renew_locally(session, now.saturating_add(ttl_ms));
                return Ok(());
            }
        }
        let deadline = now.saturating_add(ttl_ms);
        let edited = self.renew_queued(session, ttl_ms).await;
        let (written, status) = match edited {
            Err(Error::Fenced { .. }) => return Err(self.expired_or_fenced(session).await),
            edited => edited?,
        };
        if !written {
            self.remember(session, &status, deadline);
        }
        Ok(())
    }

    /// Ends `session` now (see `Store::close_session`); one already over is left alone.
    pub(super) async fn end_session(&self, session: &Session) -> Result<()> {
        self.end_locally(session);
        let closed = self
            .edit(session, false, |status, seen| {
                if let Some(current) = status.session.as_mut() {
                    current.deadline = Timestamp(seen.now);
                }
                Ok(Edit::Write(()))
            })
            .await;
        match closed {
            // Already over: nothing to close.
            Ok(_) | Err(Error::Fenced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

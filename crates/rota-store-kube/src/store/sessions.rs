//! Sessions: opening one (and the node's RotaNode with it), heartbeats, closing.
//!
//! A heartbeat writes only while the node is in its window, where the deadline guards the
//! slot. Elsewhere it renews the deadline in this process's memory, and the next write of the
//! node carries it: a waiting or idle node writes nothing.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use rota_core::NodeName;
use rota_kube_api::crd::{RotaNode, RotaNodeSpec, SessionStatus, Timestamp};
use rota_kube_client::is_conflict;
use rota_store::{Error, Millis, Result, Session, now_millis};

use super::own::Edit;
use super::{KubeStore, ROTA_NODES};
use crate::error::Context;
use crate::record;

fn ttl_ms(ttl: Duration) -> Millis {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl KubeStore {
    /// A new session for `node` (see `Store::open_session`): written into its RotaNode, made
    /// for the node if it has none. Session ids grow per node even if this clock is behind the
    /// last agent's.
    pub(super) async fn start_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        let name = self.object_name(node);
        self.inner.own.watch(&name, &self.selector());
        self.inner.settings.add_local(node.as_str());
        loop {
            let now = now_millis();
            let deadline = Timestamp(now.saturating_add(ttl_ms(ttl)));
            let id = match self.rota_node(node, true).await? {
                Some(mut object) => {
                    let status = object.status.get_or_insert_with(|| record::new_status(now));
                    let id = status.session.as_ref().map_or(now, |s| now.max(s.id + 1));
                    status.session = Some(SessionStatus { id, deadline });
                    object.spec.withdrawn = None;
                    if self.replace(object).await?.is_none() {
                        continue;
                    }
                    id
                }
                None => {
                    if !self.create_rota_node(node, now, deadline).await? {
                        continue;
                    }
                    now
                }
            };
            self.remember_deadline(node, id, deadline.0);
            return Ok(Session {
                id,
                node: node.clone(),
            });
        }
    }

    /// Creates the RotaNode of a node that has none, with a first session (id `now`) until
    /// `deadline`; `false` if another create of it came first.
    async fn create_rota_node(
        &self,
        node: &NodeName,
        now: Millis,
        deadline: Timestamp,
    ) -> Result<bool> {
        let name = self.object_name(node);
        let mut status = record::new_status(now);
        status.session = Some(SessionStatus { id: now, deadline });
        let object = RotaNode {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(self.labels()),
                ..ObjectMeta::default()
            },
            spec: RotaNodeSpec {
                node: node.as_str().into(),
                grant: None,
                withdrawn: None,
            },
            status: Some(status),
        };
        let _sending = self.inner.own.send(&object);
        match self
            .inner
            .rota_nodes
            .create(&PostParams::default(), &object)
            .await
        {
            Ok(written) => {
                self.inner.own.put(&written);
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e).context("create", ROTA_NODES, name),
        }
    }

    pub(super) fn remember_deadline(&self, node: &NodeName, id: i64, deadline: Millis) {
        let mut deadlines = self
            .inner
            .deadlines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        deadlines.insert(node.to_string(), (id, deadline));
    }

    /// A heartbeat (see `Store::heartbeat`): written while the node is in its window (or the
    /// scheduler counts its agent as gone), else in memory.
    pub(super) async fn renew_session(&self, session: &Session, ttl: Duration) -> Result<()> {
        let now = now_millis();
        let known = self.rota_node(&session.node, false).await?;
        let current = known.as_ref().and_then(|o| {
            let recorded = o.status.as_ref()?.session.as_ref()?;
            (recorded.id == session.id).then(|| self.deadline(session, recorded.deadline.0))
        });
        match current {
            Some(deadline) if deadline > now => {}
            _ => return Err(self.expired_or_fenced(session).await),
        }
        let deadline = now.saturating_add(ttl_ms(ttl));
        self.remember_deadline(&session.node, session.id, deadline);
        let object = known.as_ref();
        let holds = object.is_some_and(|o| o.status.as_ref().is_some_and(|s| s.slot.is_some()));
        let withdrawn = object.is_some_and(|o| o.spec.withdrawn.is_some());
        if holds || withdrawn {
            self.edit(&session.node, Some(session), |_, _| Ok(Edit::Write(())))
                .await?;
        }
        Ok(())
    }

    /// Why a session's renewal was refused: `Expired` if it is still the node's latest (nobody
    /// took the node over), else `Fenced`.
    async fn expired_or_fenced(&self, session: &Session) -> Error {
        match self.rota_node(&session.node, true).await {
            Ok(object) => Error::renewal_refused(
                session,
                object
                    .and_then(|o| o.status?.session)
                    .is_some_and(|current| current.id == session.id),
            ),
            Err(e) => e,
        }
    }

    /// Ends `session` now (see `Store::close_session`); one already over is left alone.
    pub(super) async fn end_session(&self, session: &Session) -> Result<()> {
        let closed = self
            .edit(&session.node, Some(session), |object, now| {
                if let Some(current) = object.status.as_mut().and_then(|s| s.session.as_mut()) {
                    current.deadline = Timestamp(now);
                }
                Ok(Edit::Write(()))
            })
            .await;
        self.remember_deadline(&session.node, session.id, 0);
        match closed {
            Ok(_) | Err(Error::Fenced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl KubeStore {
    /// How many watches this handle holds open: the ConfigMaps' one, and its agents' RotaNodes'.
    pub fn watches(&self) -> usize {
        1 + usize::from(self.inner.own.watching().0)
    }

    /// Whether every watch an idle agent holds has listed its objects and not failed since,
    /// and the agent's first look at the procedures is made: from then on, its looks are
    /// answered without a request.
    pub fn settled(&self) -> bool {
        self.inner.own.watching().1
            && self.inner.settings.ready()
            && self.inner.procedures.cache.has_listed()
    }

    /// Whether this handle opened a session: it serves agents, not an operator's command.
    pub(super) fn has_local_sessions(&self) -> bool {
        let deadlines = self
            .inner
            .deadlines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        !deadlines.is_empty()
    }
}

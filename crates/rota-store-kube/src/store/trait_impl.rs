//! [`Store`] for [`KubeStore`]: the short methods whole, the longer ones handed to the file of
//! their concern (see the map in `store`).

use std::time::Duration;

use async_trait::async_trait;
use rota_core::{NodeName, NodeState, ProcedureSpec, Process};
use rota_store::{
    Acquire, AgentStore, BackoffRecord, Blocked, Error, HistoryEntry, HistoryFilter, Millis,
    NodeOverview, NodeRecord, OperatorStore, Outcome, Pause, ProcedureRecord, ProcedureStore,
    ReadStore, RequestRecord, Result, Session, SlotHolder, StepRecord, Transition, now_millis,
};
use tokio::sync::watch;

use super::cas::Edit;
use super::events::outcome_event;
use super::settings::{CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY, concurrency_of};
use super::slot_leases::held_by;
use super::{KubeStore, node_name};
use crate::crd::{BlockedStatus, Timestamp};
use crate::history_ring::bounded;
use crate::{slots, status};

#[async_trait]
impl AgentStore for KubeStore {
    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.start_session(node, ttl).await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.renew_session(session, ttl).await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        self.end_session(session).await
    }

    async fn try_acquire_slot(&self, session: &Session) -> Result<Acquire> {
        self.acquire_slot(session).await
    }

    async fn fence(&self, session: &Session, ttl: Duration) -> Result<u32> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let current = self.edit(session, false, |status, seen| {
            if let Some(current) = status.session.as_mut() {
                let deadline = seen.now.saturating_add(ttl_ms);
                current.deadline = Timestamp(current.deadline.0.max(deadline));
            }
            Ok(Edit::Write(()))
        });
        // The two proofs are independent writes: both must succeed before the disruptive step,
        // in whichever order they land.
        let (current, slot) = tokio::join!(current, self.renew_lease(session));
        current?;
        slot
    }

    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        let ((request, created), _, _) = self
            .edit_with_ledger(session, false, &[process], |status, seen, ledger| {
                let (request, created) =
                    status::add_request(status, process, source, seen.now, ledger);
                Ok(if created {
                    Edit::Write((request, created))
                } else {
                    Edit::Keep((request, created))
                })
            })
            .await?;
        Ok((status::request_record(&session.node, &request), created))
    }

    async fn set_blocked(&self, session: &Session, blocked: Option<&Blocked>) -> Result<bool> {
        let (changed, _, _) = self
            .edit(session, false, |status, _| {
                let reason = blocked.map(|b| bounded(&b.reason));
                if status.blocked.as_ref().map(|b| &b.reason) == reason.as_ref() {
                    return Ok(Edit::Keep(false));
                }
                status.blocked = blocked.map(|b| BlockedStatus {
                    reason: bounded(&b.reason),
                    since: Timestamp(b.since),
                });
                Ok(Edit::Write(true))
            })
            .await?;
        if changed {
            // Nodes queued behind a node now blocked may go on.
            self.inner.changes.bump(1);
        }
        Ok(changed)
    }

    async fn cancel_request(&self, session: &Session, process: &Process) -> Result<bool> {
        let (canceled, _, _) = self
            .edit(session, false, |status, seen| {
                Ok(if status::cancel_request(status, process, seen.now) {
                    Edit::Write(true)
                } else {
                    Edit::Keep(false)
                })
            })
            .await?;
        Ok(canceled)
    }

    async fn complete_request(
        &self,
        session: &Session,
        process: &Process,
        outcome: &Outcome,
    ) -> Result<RequestRecord> {
        let (request, _, _) = self
            .edit(session, false, |status, seen| {
                let fails = matches!(outcome, Outcome::Failed { .. });
                if fails && status.state != NodeState::Maintaining {
                    return Err(Error::Conflict {
                        node: session.node.clone(),
                        expected: NodeState::Maintaining,
                        actual: status.state.to_string(),
                    });
                }
                let request = status::complete_request(status, process, outcome, seen.now)
                    .ok_or_else(|| Error::NotActive {
                        node: session.node.clone(),
                        process: process.clone(),
                    })?;
                if fails {
                    // Fail closed in the same write: a failure recorded without it would let
                    // a restarted agent start the next attempt instead of waiting.
                    status::enter(status, NodeState::Failed, seen.now);
                }
                Ok(Edit::Write(request))
            })
            .await?;
        let (type_, reason, note) = outcome_event(process, &session.node, outcome);
        self.emit(&session.node, type_, reason, note);
        Ok(status::request_record(&session.node, &request))
    }

    async fn transition(&self, session: &Session, transition: Transition) -> Result<NodeRecord> {
        self.apply(session, transition, None).await
    }

    /// The fence's two proofs, the session (the transition's own compare-and-swap on the
    /// RotaNode, which renews the session as the fence does) and the slot (the Lease), go out
    /// at once: the step that follows waits for one round trip instead of two.
    async fn fenced_transition(
        &self,
        session: &Session,
        transition: Transition,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        if transition.window.releases_slot() {
            self.fence(session, ttl).await?;
            return self.transition(session, transition).await;
        }
        let (record, slot) = tokio::join!(
            self.apply(session, transition, Some(ttl)),
            self.renew_lease(session)
        );
        slot?;
        record
    }

    fn refresh(&self, node: &NodeName) {
        // While the own RotaNodes' watch is synced, what this process keeps is current.
        if !self.own_watched() {
            self.stop_answering_reads(node);
        }
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}

#[async_trait]
impl OperatorStore for KubeStore {
    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        if !(1..=1000).contains(&concurrency) {
            return Err(Error::Concurrency { value: concurrency });
        }
        self.update_config(CONCURRENCY_KEY, |_| Ok((concurrency.to_string(), ())))
            .await
    }

    async fn unlock(&self, node: &NodeName, reason: &str) -> Result<NodeRecord> {
        self.operator_unlock(node, reason).await
    }

    async fn retry(&self, node: &NodeName) -> Result<NodeRecord> {
        self.operator_retry(node).await
    }

    async fn request(
        &self,
        node: &NodeName,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        self.operator_request(node, process, source).await
    }

    async fn cancel(&self, node: &NodeName, process: &Process) -> Result<bool> {
        self.operator_cancel(node, process).await
    }

    async fn pause(&self, reason: &str) -> Result<Pause> {
        let pause = Pause {
            reason: reason.to_string(),
            since: now_millis(),
        };
        let value = pause.encode();
        self.update_config(PAUSED_KEY, |_| Ok((value.clone(), ())))
            .await?;
        Ok(pause)
    }

    async fn resume(&self) -> Result<Option<Pause>> {
        // The new rollout first: a resume that fails halfway leaves the fleet paused, never
        // resumed into the old rollout (whose failures would pause it again).
        let now = now_millis().to_string();
        self.update_config(RESUMED_KEY, |_| Ok((now.clone(), ())))
            .await?;
        // An empty value is no pause: the ConfigMap keeps the key, and a replace never races
        // with a delete of it.
        let previous = self
            .update_config(PAUSED_KEY, |current| {
                Ok((String::new(), current.unwrap_or_default().to_string()))
            })
            .await?;
        Pause::decode("rota-config.data.paused", Some(&previous))
    }
}

#[async_trait]
impl ProcedureStore for KubeStore {
    async fn submit_procedure(&self, spec: &ProcedureSpec) -> Result<(ProcedureRecord, bool)> {
        let (record, changed) = self.inner.procedures.submit(spec).await?;
        if changed {
            self.wake_agents(None).await;
        }
        Ok((record, changed))
    }

    async fn procedures(&self) -> Result<Vec<ProcedureRecord>> {
        // An agent's handle reads them from the API server's cache; an operator's command
        // reads them as they are now.
        let agent = self.has_local_sessions();
        if agent {
            self.inner
                .procedures
                .at_least(self.inner.settings.everyone_woken_at());
        }
        self.inner.procedures.list(agent).await
    }
}

#[async_trait]
impl ReadStore for KubeStore {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    async fn concurrency(&self) -> Result<Option<u32>> {
        concurrency_of(self.config_map().await?.as_ref())
    }

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        let mut holders = self
            .list_leases()
            .await?
            .iter()
            .filter_map(slots::slot_holder)
            .collect::<Result<Vec<_>, _>>()?;
        holders.sort_by_key(|h| h.slot);
        Ok(holders)
    }

    async fn open_requests(&self, node: &NodeName) -> Result<Vec<RequestRecord>> {
        let Some(object) = self.own_object(node).await? else {
            return Ok(Vec::new());
        };
        let status = object.status.unwrap_or_default();
        let mut open: Vec<_> = status::open_requests(&status)
            .map(|r| status::request_record(node, r))
            .collect();
        open.sort_by_key(|r| r.id);
        Ok(open)
    }

    async fn all_requests(&self) -> Result<Vec<RequestRecord>> {
        let mut all = Vec::new();
        let selector = self.selector();
        let (objects, ledgers) =
            tokio::try_join!(self.list_rota_nodes(&selector), self.all_ledgers())?;
        for object in objects {
            let node = node_name(&object)?;
            let ledger = object
                .metadata
                .uid
                .as_ref()
                .and_then(|uid| ledgers.get(uid))
                .cloned()
                .unwrap_or_default();
            let status = object.status.unwrap_or_default();
            all.extend(
                status::every_request(&status, &ledger).map(|r| status::request_record(&node, &r)),
            );
        }
        all.sort_by_key(|r| r.id);
        Ok(all)
    }

    async fn node(&self, node: &NodeName) -> Result<Option<NodeRecord>> {
        // The agent reads its node before every step: right after its own write, that write's
        // answer (see `own_object`), and else one round trip, not two.
        if let Some(known) = self.recent(node).filter(|k| k.with_lease) {
            let status = known.object.status.unwrap_or_default();
            return Ok(Some(status::node_record(
                node,
                &status,
                self.own_slot(node),
            )));
        }
        let (object, leases) = tokio::try_join!(self.get_rota_node(node), self.list_leases())?;
        let Some(object) = object else {
            return Ok(None);
        };
        if self.local_session(node).is_some() {
            self.cache(node, &object, true);
            match held_by(&leases, node) {
                Some(lease) => self.cache_lease(node, lease),
                None => self.forget_lease(node),
            }
        }
        self.record_of(&object, &leases).map(Some)
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let selector = self.selector();
        let (objects, leases) =
            tokio::try_join!(self.list_rota_nodes(&selector), self.list_leases())?;
        let mut records = objects
            .iter()
            .map(|o| self.record_of(o, &leases))
            .collect::<Result<Vec<_>>>()?;
        records.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(records)
    }

    async fn backoffs(&self, node: &NodeName) -> Result<Vec<BackoffRecord>> {
        let Some(object) = self.own_object(node).await? else {
            return Ok(Vec::new());
        };
        let status = object.status.unwrap_or_default();
        let mut backoffs: Vec<_> = status
            .backoff
            .iter()
            .map(|b| status::backoff_record(node, b))
            .collect();
        backoffs.sort_by_key(|b| b.process.to_string());
        Ok(backoffs)
    }

    async fn overview(&self) -> Result<Vec<NodeOverview>> {
        let selector = self.selector();
        let (objects, leases) =
            tokio::try_join!(self.list_rota_nodes(&selector), self.list_leases())?;
        let (mut nodes, mut open, mut backoffs) = (Vec::new(), Vec::new(), Vec::new());
        for object in &objects {
            let record = self.record_of(object, &leases)?;
            if let Some(status) = &object.status {
                open.extend(
                    status::open_requests(status).map(|r| status::request_record(&record.node, r)),
                );
                backoffs.extend(
                    status
                        .backoff
                        .iter()
                        .map(|b| status::backoff_record(&record.node, b)),
                );
            }
            nodes.push(record);
        }
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(NodeOverview::group(nodes, open, backoffs))
    }

    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        self.read_history(filter).await
    }

    async fn steps(&self, filter: &HistoryFilter) -> Result<Vec<StepRecord>> {
        self.read_steps(filter).await
    }

    async fn paused(&self) -> Result<Option<Pause>> {
        let map = self.config_map().await?;
        let value = map
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(PAUSED_KEY))
            .map(String::as_str);
        Pause::decode("rota-config.data.paused", value)
    }

    async fn resumed_at(&self) -> Result<Option<Millis>> {
        let map = self.config_map().await?;
        let value = map
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(RESUMED_KEY))
            .map(String::as_str);
        rota_store::decode_resumed_at("rota-config.data.resumedAt", value)
    }
}

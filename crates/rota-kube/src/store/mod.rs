//! [`KubeStore`]: the [`Store`] trait on the Kubernetes API. See the crate docs for the design.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::ListParams;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use rota_core::{NodeName, NodeState, ProcedureSpec, Process};
use rota_store::{
    Acquire, BackoffRecord, Blocked, Error, HistoryEntry, HistoryFilter, Millis, NodeRecord,
    Outcome, Pause, ProcedureRecord, RequestRecord, Result, Session, SlotHolder, Store, Transition,
    now_millis,
};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::changes::{Changes, watch_leases};
use crate::config_view::{ConfigView, watch_config_maps};
use crate::crd::{BlockedStatus, RotaNode, Timestamp};
use crate::error::Context;
use crate::preflight;
use crate::procedure_status::{self, StatusReporter};
use crate::procedures::Procedures;
use crate::slots;
use crate::status;

mod acquire;
mod caches;
mod cas;
mod events;
mod operator;
mod queue;
mod sessions;
mod settings;
mod slot_leases;
mod tags;
mod transitions;

use caches::{CachedWait, Known, LocalSession};
use cas::Edit;
pub(crate) use cas::jitter;
use events::outcome_event;
pub(crate) use queue::Waiter;
pub use settings::CONFIG_MAP;
use settings::concurrency_of;
pub(crate) use settings::{CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY, WAKE_KEY};
use slot_leases::held_by;

const ROTA_NODES: &str = "rotanodes.rota.dev";
const LEASES: &str = "leases.coordination.k8s.io";
const CONFIG_MAPS: &str = "configmaps";
/// Label on every RotaNode: the namespace of the installation (its slots) it belongs to.
pub const NAMESPACE_LABEL: &str = "rota.dev/namespace";
/// Label on every RotaNode: its state, so that the queue is one filtered list.
pub const STATE_LABEL: &str = "rota.dev/state";
/// Where the store keeps its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeStoreConfig {
    /// The namespace of the slot Leases, the `rota-config` ConfigMap, and of the installation
    /// the RotaNodes are labelled with. Default `rota-system`.
    pub namespace: String,
    /// Put before every RotaNode's name. Empty in production; tests sharing one cluster set a
    /// unique one each (with a namespace of their own), so that they never see each other.
    pub name_prefix: String,
    /// `reportingController` of the Events the store emits.
    pub event_reporter: String,
}

impl Default for KubeStoreConfig {
    fn default() -> KubeStoreConfig {
        KubeStoreConfig {
            namespace: "rota-system".into(),
            name_prefix: String::new(),
            event_reporter: "rota".into(),
        }
    }
}

/// rota's state in a Kubernetes cluster. Clones share the API client, the change counter and
/// its watch; the watch ends when the last clone is dropped.
#[derive(Clone)]
pub struct KubeStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: KubeStoreConfig,
    rota_nodes: Api<RotaNode>,
    leases: Api<Lease>,
    config_maps: Api<ConfigMap>,
    nodes: Api<Node>,
    recorder: Recorder,
    changes: Arc<Changes>,
    /// What this process knows of the sessions it opened, by node.
    sessions: Mutex<HashMap<String, LocalSession>>,
    /// The RotaNode of each node as this process last read or wrote it: the first attempt of
    /// a write tries it without reading again (see `edit`), and an agent's reads of its own
    /// node are answered from it for a moment (see `own_object`).
    objects: Mutex<HashMap<String, Known>>,
    /// The slot Lease each node holds as this process last read or wrote it: steps that only
    /// need to know which slot the node holds, and the fence's compare-and-swap, start from it
    /// without listing the Leases again (see `lease_of`).
    held: Mutex<HashMap<String, Lease>>,
    /// The last `Wait` answered to each node's session, by node.
    waits: Mutex<HashMap<String, CachedWait>>,
    /// The ConfigMaps of rota's namespace as their watch and this process's reads and writes
    /// left them.
    settings: Arc<ConfigView>,
    watch: AbortHandle,
    config_watch: AbortHandle,
    procedures: Procedures,
    /// Writes the Procedures' status after this process's RotaNode writes (see
    /// `procedure_status`).
    reporter: StatusReporter,
    status_writer: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watch.abort();
        self.config_watch.abort();
        self.status_writer.abort();
    }
}

impl KubeStore {
    /// A store on `client`'s cluster. Checks what the store needs of the cluster (see
    /// [`preflight`]), and starts the watches on the slot Leases and the ConfigMaps.
    pub async fn connect(client: Client, config: KubeStoreConfig) -> Result<KubeStore> {
        preflight::check(&client, &config.namespace).await?;
        let rota_nodes: Api<RotaNode> = Api::all(client.clone());
        let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
        let changes = Changes::new();
        let watch = tokio::spawn(watch_leases(leases.clone(), changes.clone())).abort_handle();
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &config.namespace);
        let config_view = ConfigView::new(changes.clone());
        let config_watch =
            tokio::spawn(watch_config_maps(config_maps.clone(), config_view.clone()))
                .abort_handle();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: config.event_reporter.clone(),
                instance: None,
            },
        );
        let procedures = Procedures {
            api: Api::all(client.clone()),
            config_maps: config_maps.clone(),
            config_view: config_view.clone(),
            namespace: config.namespace.clone(),
            prefix: config.name_prefix.clone(),
            submitted: Arc::default(),
        };
        let (reporter, queue) = StatusReporter::new();
        let status_writer = tokio::spawn(procedure_status::write_statuses(
            procedures.api.clone(),
            Api::all(client.clone()),
            config.name_prefix.clone(),
            queue,
        ))
        .abort_handle();
        Ok(KubeStore {
            inner: Arc::new(Inner {
                rota_nodes,
                leases,
                config_maps,
                nodes: Api::all(client),
                procedures,
                reporter,
                status_writer,
                recorder,
                changes,
                sessions: Mutex::new(HashMap::new()),
                objects: Mutex::new(HashMap::new()),
                held: Mutex::new(HashMap::new()),
                waits: Mutex::new(HashMap::new()),
                settings: config_view,
                watch,
                config_watch,
                config,
            }),
        })
    }

    pub fn config(&self) -> &KubeStoreConfig {
        &self.inner.config
    }

    /// The RotaNode object's name for a node.
    pub fn object_name(&self, node: &NodeName) -> String {
        format!("{}{}", self.inner.config.name_prefix, node)
    }

    fn selector(&self) -> String {
        format!("{NAMESPACE_LABEL}={}", self.inner.config.namespace)
    }

    fn lease_path(&self, name: &str) -> String {
        format!("{}/{name}", self.inner.config.namespace)
    }

    async fn get_rota_node(&self, node: &NodeName) -> Result<Option<RotaNode>> {
        let name = self.object_name(node);
        self.inner
            .rota_nodes
            .get_opt(&name)
            .await
            .context("get", ROTA_NODES, name)
    }

    async fn list_rota_nodes(&self, selector: &str) -> Result<Vec<RotaNode>> {
        let list = self
            .inner
            .rota_nodes
            .list(&ListParams::default().labels(selector))
            .await
            .context("list", ROTA_NODES, format!("with labels {selector}"))?;
        Ok(list.items)
    }

    fn labels(&self, state: NodeState) -> BTreeMap<String, String> {
        BTreeMap::from([
            (NAMESPACE_LABEL.into(), self.inner.config.namespace.clone()),
            (STATE_LABEL.into(), state.as_str().into()),
        ])
    }

    fn record_of(&self, object: &RotaNode, leases: &[Lease]) -> Result<NodeRecord> {
        let node = node_name(object)?;
        let slot = held_by(leases, &node).and_then(slots::slot_of);
        let status = object.status.clone().unwrap_or_default();
        Ok(status::node_record(&node, &status, slot))
    }
}

fn fenced(session: &Session) -> Error {
    Error::Fenced {
        node: session.node.clone(),
        session: session.id,
    }
}

fn node_name(object: &RotaNode) -> Result<NodeName> {
    NodeName::new(&object.spec.node).map_err(|e| Error::Corrupt {
        column: "rotanodes.spec.node",
        value: object.spec.node.clone(),
        reason: e.to_string(),
    })
}

#[async_trait]
impl Store for KubeStore {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    async fn open_session(&self, node: &NodeName, ttl: Duration) -> Result<Session> {
        self.start_session(node, ttl).await
    }

    async fn heartbeat(&self, session: &Session, ttl: Duration) -> Result<()> {
        self.renew_session(session, ttl).await
    }

    async fn close_session(&self, session: &Session) -> Result<()> {
        self.end_session(session).await
    }

    async fn concurrency(&self) -> Result<Option<u32>> {
        concurrency_of(self.config_map().await?.as_ref())
    }

    async fn set_concurrency(&self, concurrency: u32) -> Result<()> {
        if !(1..=1000).contains(&concurrency) {
            return Err(Error::Concurrency { value: concurrency });
        }
        self.update_config(CONCURRENCY_KEY, |_| Ok((concurrency.to_string(), ())))
            .await
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

    async fn slot_holders(&self) -> Result<Vec<SlotHolder>> {
        let mut holders = Vec::new();
        for lease in self.list_leases().await? {
            let (Some(slot), Some(holder)) = (slots::slot_of(&lease), slots::holder(&lease)) else {
                continue;
            };
            holders.push(SlotHolder {
                slot,
                node: NodeName::new(holder).map_err(|e| Error::Corrupt {
                    column: "leases.spec.holderIdentity",
                    value: holder.into(),
                    reason: e.to_string(),
                })?,
                acquired_at: slots::acquired_at(&lease).unwrap_or(0),
            });
        }
        holders.sort_by_key(|h| h.slot);
        Ok(holders)
    }

    async fn add_request(
        &self,
        session: &Session,
        process: &Process,
        source: &str,
    ) -> Result<(RequestRecord, bool)> {
        let ((request, created), _, _) = self
            .edit(session, false, |status, seen| {
                let (request, created) = status::add_request(status, process, source, seen.now);
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
                if status.blocked.as_ref().map(|b| &b.reason) == blocked.map(|b| &b.reason) {
                    return Ok(Edit::Keep(false));
                }
                status.blocked = blocked.map(|b| BlockedStatus {
                    reason: b.reason.clone(),
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
        for object in self.list_rota_nodes(&self.selector()).await? {
            let node = node_name(&object)?;
            let status = object.status.unwrap_or_default();
            all.extend(status::every_request(&status).map(|r| status::request_record(&node, r)));
        }
        all.sort_by_key(|r| r.id);
        Ok(all)
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
                    status.state = NodeState::Failed;
                    status.since = Timestamp(seen.now);
                }
                Ok(Edit::Write(request))
            })
            .await?;
        let (type_, reason, note) = outcome_event(process, &session.node, outcome);
        self.emit(&session.node, type_, reason, note);
        Ok(status::request_record(&session.node, &request))
    }

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

    fn refresh(&self, node: &NodeName) {
        self.stop_answering_reads(node);
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

    async fn history(&self, filter: &HistoryFilter) -> Result<Vec<HistoryEntry>> {
        let objects = match &filter.node {
            Some(node) => self.get_rota_node(node).await?.into_iter().collect(),
            None => self.list_rota_nodes(&self.selector()).await?,
        };
        let mut entries = Vec::new();
        for object in objects {
            let node = node_name(&object)?;
            let status = object.status.unwrap_or_default();
            entries.extend(
                status
                    .history
                    .iter()
                    .map(|h| status::history_entry(&node, h))
                    .filter(|e| {
                        filter.process.as_ref().is_none_or(|p| &e.process == p)
                            && filter.event.is_none_or(|ev| e.event == ev)
                            && filter.since.is_none_or(|s| e.at >= s)
                            && filter.until.is_none_or(|u| e.at <= u)
                    }),
            );
        }
        entries.sort_by_key(|e| e.id);
        Ok(entries)
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

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}

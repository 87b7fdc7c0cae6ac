//! [`KubeStore`]: the [`Store`](rota_store::Store) trait on the Kubernetes API. See the crate
//! docs for the design. This file holds the store's handle, its configuration and its
//! constructor; the rest lives by concern:
//!
//! - `trait_impl`: the `Store` impl, each method short or handed to one of the files below;
//! - `sessions`: opening a session (and the node's RotaNode), heartbeats, closing;
//! - `acquire`: a look at the queue and the take of a slot (`try_acquire_slot`);
//! - `queue`: queue maths, pure: who is ahead, how many changes to wait, which slot to take;
//! - `writes`: `Store::write`, by writer: the agent's requests, block and completions;
//! - `transitions`: a transition of a node's agent, the slot it gives back, and the fence;
//! - `operator`: an operator's unlock, retry, request and cancel;
//! - `reads`: a node's record, the fleet's, every request, the settings;
//! - `audit`: the audit record of each operator command (`RotaAuditRecord` objects), and the
//!   actor;
//! - `cas`: compare-and-swap writes of RotaNodes, and the fenced edit behind the agent's;
//! - `history`: the history's ring of RotaWindows: written before a RotaNode, read back;
//! - `caches`: what this process remembers of each node between requests;
//! - `slot_leases`: the slot Leases: list, take, renew, give back, free orphans;
//! - `tags`: node tags, claimed with Leases of their own;
//! - `settings`: the ConfigMap `rota-config`: its keys, reads, writes and agent wakes;
//! - `events`: the Kubernetes Events on the Node.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use rota_core::{NodeName, NodeState};
use rota_store::{Error, NodeRecord, Result, Session};
use tokio::task::AbortHandle;
use tracing::warn;

use crate::audit_record::RotaAuditRecord;
use crate::changes::Changes;
use crate::config_view::{ConfigView, watch_config_maps};
use crate::crd::RotaNode;
use crate::error::Context;
use crate::preflight;
use crate::procedure_ledger::Ledger;
use crate::procedure_status::{self, StatusReporter};
use crate::procedure_view::ProcedureView;
use crate::procedures::Procedures;
use crate::slots;
use crate::status;

mod acquire;
mod audit;
mod caches;
mod cas;
mod events;
mod history;
mod ledger;
mod operator;
mod queue;
mod queue_view;
mod reads;
mod sessions;
mod settings;
mod slot_leases;
mod tags;
mod trait_impl;
mod transitions;
mod waiting;
mod watches;
mod writes;

use caches::{CachedWait, Known, LocalSession};
pub(crate) use cas::jitter;
pub(crate) use queue::Waiter;
pub use settings::CONFIG_MAP;
pub(crate) use settings::{CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY, WAKE_KEY};
use slot_leases::held_by;
use watches::Watches;

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
    /// The same objects undecoded: a list reads each one on its own (see `list_rota_nodes`).
    rota_node_objects: Api<DynamicObject>,
    leases: Api<Lease>,
    config_maps: Api<ConfigMap>,
    nodes: Api<Node>,
    /// The operators' audit trail, in rota's namespace.
    audit_records: Api<RotaAuditRecord>,
    /// Who this handle's credentials are.
    reviews: Api<SelfSubjectReview>,
    recorder: Recorder,
    changes: Arc<Changes>,
    /// What this process knows of the sessions it opened, by node.
    sessions: Mutex<HashMap<String, LocalSession>>,
    /// The RotaNode of each node as this process last read or wrote it: the first attempt of
    /// a write tries it without reading again (see `edit`), and an agent's reads of its own
    /// node are answered from it for a moment (see `own_object`).
    objects: Mutex<HashMap<String, Known>>,
    /// The newest revision of any RotaNode this handle wrote, read or was shown (by `cache`,
    /// and by the watch of every RotaNode): a list from the API server's cache asks for at
    /// least it (see `acquire`).
    newest: Mutex<Option<u64>>,
    /// Each node's procedure ledger as this process last read or wrote it, by RotaNode name
    /// (see `ledger`).
    ledgers: Mutex<HashMap<String, Ledger>>,
    /// The slot Lease each node holds as this process last read or wrote it: calls that only
    /// need to know which slot the node holds, and the fence's compare-and-swap, start from it
    /// without listing the Leases again (see `lease_of`).
    held: Mutex<HashMap<String, Lease>>,
    /// The last `Wait` answered to each node's session, by node.
    waits: Mutex<HashMap<String, CachedWait>>,
    /// The ConfigMaps of rota's namespace as their watch and this process's reads and writes
    /// left them.
    settings: Arc<ConfigView>,
    config_watch: AbortHandle,
    procedures: Procedures,
    /// The watches started as this handle's agents need them (see `watches`).
    watches: Mutex<Watches>,
    /// Whether an answer to this handle's write of a RotaNode kept its `schema`, so the CRD
    /// keeps every field this rota writes (see `cas::schema_kept`).
    schema_kept: AtomicBool,
    /// Whether the own RotaNodes' watch has listed them and not failed since.
    own_synced: AtomicBool,
    /// The writes of RotaNodes under way, by node, each with the newest event of the own
    /// watch held back until they end (see `watches`).
    writing: Mutex<HashMap<String, (usize, Option<RotaNode>)>>,
    /// Writes the Procedures' status after this process's RotaNode writes (see
    /// `procedure_status`).
    reporter: StatusReporter,
    status_writer: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watches
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .abort();
        self.config_watch.abort();
        self.status_writer.abort();
    }
}

impl KubeStore {
    /// A store on `client`'s cluster. Checks what the store needs of the cluster (see
    /// [`preflight`]), and starts the watch on the ConfigMaps; an agent's session starts the
    /// others (see `watches`).
    pub async fn connect(client: Client, config: KubeStoreConfig) -> Result<KubeStore> {
        preflight::check(&client, &config.namespace).await?;
        Ok(KubeStore::open(client, config))
    }

    /// [`KubeStore::connect`] without the check, for a caller that has just made it (the
    /// agent checks the cluster and its permissions before it opens the store): the check
    /// costs four requests, the first alone.
    pub fn open(client: Client, config: KubeStoreConfig) -> KubeStore {
        let rota_nodes: Api<RotaNode> = Api::all(client.clone());
        let rota_node_objects = Api::all_with(client.clone(), &ApiResource::erase::<RotaNode>(&()));
        let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
        let changes = Changes::new();
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
            view: Arc::new(ProcedureView::new(
                config.name_prefix.clone(),
                changes.clone(),
            )),
        };
        let (reporter, queue) = StatusReporter::new();
        let status_writer = tokio::spawn(procedure_status::write_statuses(
            procedures.api.clone(),
            Api::all(client.clone()),
            config.name_prefix.clone(),
            queue,
        ))
        .abort_handle();
        KubeStore {
            inner: Arc::new(Inner {
                rota_nodes,
                rota_node_objects,
                leases,
                config_maps,
                audit_records: Api::namespaced(client.clone(), &config.namespace),
                reviews: Api::all(client.clone()),
                nodes: Api::all(client),
                procedures,
                reporter,
                status_writer,
                recorder,
                changes,
                sessions: Mutex::new(HashMap::new()),
                objects: Mutex::new(HashMap::new()),
                newest: Mutex::new(None),
                held: Mutex::new(HashMap::new()),
                ledgers: Mutex::new(HashMap::new()),
                waits: Mutex::new(HashMap::new()),
                settings: config_view,
                watches: Mutex::default(),
                own_synced: AtomicBool::new(false),
                schema_kept: AtomicBool::new(false),
                writing: Mutex::default(),
                config_watch,
                config,
            }),
        }
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

    /// The RotaNodes `selector` picks. One that does not read (edited by hand into nonsense)
    /// is left out with a warning naming it and its field: a typed list would fail whole on
    /// it, and the queue of every other node with it.
    async fn list_rota_nodes(&self, selector: &str) -> Result<Vec<RotaNode>> {
        let list = self
            .inner
            .rota_node_objects
            .list(&ListParams::default().labels(selector))
            .await
            .context("list", ROTA_NODES, format!("with labels {selector}"))?;
        Ok(list.items.into_iter().filter_map(read_rota_node).collect())
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

/// `object` as a RotaNode, or `None` (and a warning that names it) if it does not read.
fn read_rota_node(object: DynamicObject) -> Option<RotaNode> {
    let name = object.metadata.name.clone().unwrap_or_default();
    match serde_json::to_value(object).and_then(serde_json::from_value::<RotaNode>) {
        Ok(node) => Some(node),
        Err(e) => {
            warn!(rotanode = name, error = %e, "a RotaNode that does not read is left out; the other nodes go on");
            None
        }
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

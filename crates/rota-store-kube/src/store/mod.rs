//! [`KubeStore`]: the [`Store`](rota_store::Store) trait on the Kubernetes API. See the crate
//! docs for the design. This file holds the store's handle, its configuration and its
//! constructor; the rest lives by concern:
//!
//! - `trait_impl`: the `Store` impl, each method short or handed to one of the files below;
//! - `own`: the RotaNodes of this handle's agents: reads, the watch, compare-and-swap edits;
//! - `sessions`: opening a session (and the node's RotaNode), heartbeats, closing;
//! - `turns`: taking a grant up, and the fence on the Lease it names;
//! - `writes`: `Store::write`, as rota-core decides it, and the ended window's `RotaWindow`;
//! - `reads`: a node's record, the fleet's, the history, the settings;
//! - `audit`: the audit record of each operator command (`RotaAuditRecord` objects), and the
//!   actor;
//! - `settings`: the ConfigMap `rota-config`: its keys, reads and writes;
//! - `events`: the Kubernetes Events on the Node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use rota_core::NodeName;
use rota_kube_api::audit_record::RotaAuditRecord;
use rota_kube_api::crd::RotaNode;
use rota_kube_api::preflight;
use rota_kube_api::window::{KEPT_WINDOWS, RotaWindow};
use rota_store::{Error, Result, Session};
use tracing::warn;

use crate::changes::Changes;
use crate::error::Context;
use crate::procedures::Procedures;
use crate::watches::{ConfigWatch, ProcedureCache};

mod audit;
mod events;
mod own;
mod reads;
mod sessions;
mod settings;
mod trait_impl;
mod turns;
mod writes;

pub(crate) use own::jitter;
pub(crate) use settings::{CONCURRENCY_KEY, PAUSED_KEY, RESUMED_KEY, WAKE_KEY};
pub use settings::{PROCEDURES_KEY, settings_of};

const ROTA_NODES: &str = "rotanodes.rota.dev";
const CONFIG_MAPS: &str = "configmaps";
/// Label on every RotaNode: the namespace of the installation (its slots) it belongs to.
pub const NAMESPACE_LABEL: &str = "rota.dev/namespace";
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
    /// How many ended windows each node keeps as `RotaWindow`s.
    pub kept_windows: usize,
}

impl Default for KubeStoreConfig {
    fn default() -> KubeStoreConfig {
        KubeStoreConfig {
            namespace: "rota-system".into(),
            name_prefix: String::new(),
            event_reporter: "rota".into(),
            kept_windows: KEPT_WINDOWS,
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
    rota_windows: Api<RotaWindow>,
    leases: Api<Lease>,
    config_maps: Api<ConfigMap>,
    /// The operators' audit trail, in rota's namespace.
    audit_records: Api<RotaAuditRecord>,
    /// Who this handle's credentials are.
    reviews: Api<SelfSubjectReview>,
    recorder: Recorder,
    changes: Arc<Changes>,
    /// The session deadline each node's agent renewed in memory, by node: written with the
    /// node's next write (see `sessions`).
    deadlines: Mutex<HashMap<String, (i64, rota_store::Millis)>>,
    /// When this handle last read the leader Lease, and what it found (see `turns`).
    scheduler_seen: Mutex<Option<(std::time::Instant, Option<String>)>>,
    /// The RotaNodes of this handle's agents as last written, read or watched (see `own`).
    own: Arc<own::Own>,
    /// The ConfigMaps of rota's namespace as their watch and this handle's writes left them.
    settings: Arc<ConfigWatch>,
    procedures: Procedures,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.own.abort();
    }
}

impl KubeStore {
    /// A store on `client`'s cluster. Checks what the store needs of the cluster (see
    /// [`preflight`]), and starts the watch on the ConfigMaps; an agent's session starts the
    /// watch of its RotaNode (see `own`).
    pub async fn connect(client: Client, config: KubeStoreConfig) -> Result<KubeStore> {
        preflight::check(&client, &config.namespace)
            .await
            .map_err(crate::KubeError::from)?;
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
        let config_watch = Arc::new(ConfigWatch::start(
            config_maps.clone(),
            &config.namespace,
            changes.clone(),
        ));
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
            config_watch: config_watch.clone(),
            namespace: config.namespace.clone(),
            prefix: config.name_prefix.clone(),
            submitted: Arc::default(),
            cache: Arc::new(ProcedureCache::new(config.name_prefix.clone())),
        };
        KubeStore {
            inner: Arc::new(Inner {
                own: Arc::new(own::Own::new(rota_nodes.clone(), changes.clone())),
                rota_nodes,
                rota_node_objects,
                rota_windows: Api::all(client.clone()),
                leases,
                config_maps,
                audit_records: Api::namespaced(client.clone(), &config.namespace),
                reviews: Api::all(client),
                procedures,
                recorder,
                changes,
                deadlines: Mutex::new(HashMap::new()),
                scheduler_seen: Mutex::new(None),
                settings: config_watch,
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

    fn labels(&self) -> std::collections::BTreeMap<String, String> {
        std::collections::BTreeMap::from([(
            NAMESPACE_LABEL.into(),
            self.inner.config.namespace.clone(),
        )])
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

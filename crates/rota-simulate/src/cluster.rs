//! `rota simulate --store kube`: the simulated fleet in a real cluster. Each run creates a
//! namespace of its own, one kwok-managed Node per simulated node with one pod bound to it, and
//! the RotaNode CRD if it is missing; the agents use a [`KubeStore`] in that namespace and
//! [`KubeActions`] for cordon, drain, uncordon and health. [`Cluster::delete`] removes the
//! Nodes, the RotaNodes and the namespace again.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, NodeSpec, NodeStatus, Pod, PodSpec, ServiceAccount, Toleration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Resource as _};
use rota_actions::NodeActions;
use rota_core::NodeName;
use rota_kube_actions::{DrainOptions, KubeActions};
use rota_kube_api::{RotaNode, procedure_crd, rota_node_crd, rota_window_crd};
use rota_store_kube::{KubeStore, KubeStoreConfig, NAMESPACE_LABEL};
use tracing::{info, warn};

use crate::handles::Opener;
use crate::{Error, Fleet, Result};

/// Annotation that makes kwok manage a node.
const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// Label on every Node of a run, with the run's namespace as value.
const RUN_LABEL: &str = "rota.dev/simulation";
/// The pods' image; kwok never pulls it.
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// How long the cluster may take to make the nodes Ready and run their pods.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// Nodes and pods created at once while preparing the run.
const CREATE_CONCURRENCY: usize = 16;

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

/// A random lowercase hex string for the run's names (no dependency for one random number).
fn run_suffix() -> String {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{:08x}", random & 0xffff_ffff)
}

/// One run's objects in the cluster.
pub(crate) struct Cluster {
    client: Client,
    namespace: String,
    created_namespace: bool,
}

impl Cluster {
    /// A run in `namespace` (a fresh `rota-simulate-<random>` when `None`); nothing is created
    /// until [`Cluster::prepare`].
    /// The run's namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(crate) fn new(client: Client, namespace: Option<String>) -> Cluster {
        Cluster {
            client,
            namespace: namespace.unwrap_or_else(|| format!("rota-simulate-{}", run_suffix())),
            created_namespace: false,
        }
    }

    /// Creates the namespace (which must not exist), the CRD if missing, `nodes` Nodes with a
    /// pod each (each labelled with its zone, with `zones`), waits until kwok runs them, and connects the store.
    pub(crate) async fn prepare(
        &mut self,
        nodes: usize,
        zones: Option<&crate::Zones>,
    ) -> Result<Fleet> {
        self.create_namespace().await?;
        install_crd(self.client.clone()).await?;
        let width = nodes.to_string().len();
        let names = (0..nodes)
            .map(|i| {
                NodeName::new(format!("{}-{i:0width$}", self.namespace))
                    .map_err(|e| Error::Invalid(format!("node name: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        // One after another, a hundred nodes take minutes on a busy API server.
        let this = &*self;
        stream::iter(names.iter().enumerate())
            .map(|(i, name)| async move {
                this.create_node(name.as_str(), zones.map(|zones| zones.of(i)))
                    .await?;
                this.create_pod(&format!("work-{i:0width$}"), name.as_str())
                    .await
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        self.wait_running(nodes).await?;
        info!(nodes, namespace = %self.namespace, "kwok nodes ready");
        let config = KubeStoreConfig {
            namespace: self.namespace.clone(),
            // The run's own names: a simulation never sees (or runs the scripts of) the
            // cluster's Procedures.
            name_prefix: format!("{}-", self.namespace),
            event_reporter: "rota-simulate".into(),
            ..KubeStoreConfig::default()
        };
        let store = KubeStore::connect(self.client.clone(), config.clone()).await?;
        let drain = DrainOptions {
            // The pods have no controller.
            force: true,
            ..DrainOptions::default()
        };
        let actions = names
            .iter()
            .map(|name| {
                // The reboot command is never run: the simulator's stand-in replaces it.
                let actions: Arc<dyn NodeActions> = Arc::new(KubeActions::new(
                    self.client.clone(),
                    name.clone(),
                    drain.clone(),
                    "false".into(),
                    None,
                ));
                Some(actions)
            })
            .collect();
        Ok(Fleet {
            store: Arc::new(store),
            label: "kube",
            names,
            actions,
            store_poll: rota_store_kube::AGENT_STORE_POLL,
            own_handle_store_poll: rota_store_kube::AGENT_STORE_POLL,
            procedure_poll: Some(rota_store_kube::AGENT_PROCEDURE_POLL),
            // Each check lists every RotaNode twice: the API server has better things to do.
            check_every: Duration::from_secs(1),
            opener: Opener::Kube {
                client: self.client.clone(),
                config,
            },
        })
    }

    async fn create_namespace(&mut self) -> Result<()> {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(api(format!("creating namespace {}", self.namespace)))?;
        self.created_namespace = true;
        // The ServiceAccount admission plugin refuses pods until the namespace's default
        // account exists.
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.namespace);
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while accounts
            .get_opt("default")
            .await
            .map_err(api("reading the default service account"))?
            .is_none()
        {
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Cluster(format!(
                    "namespace {} got no default service account within {}s",
                    self.namespace,
                    READY_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    async fn create_node(&self, name: &str, zone: Option<String>) -> Result<()> {
        let resources = BTreeMap::from([
            ("cpu".to_string(), Quantity("32".into())),
            ("memory".to_string(), Quantity("256Gi".into())),
            ("pods".to_string(), Quantity("110".into())),
        ]);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(
                    [
                        (RUN_LABEL.to_string(), self.namespace.clone()),
                        ("kubernetes.io/hostname".to_string(), name.to_string()),
                        ("type".to_string(), "kwok".to_string()),
                    ]
                    .into_iter()
                    .chain(zone.map(|zone| (crate::ZONE_LABEL.to_string(), zone)))
                    .collect(),
                ),
                annotations: Some(BTreeMap::from([(
                    KWOK_ANNOTATION.0.to_string(),
                    KWOK_ANNOTATION.1.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(resources.clone()),
                capacity: Some(resources),
                ..NodeStatus::default()
            }),
        };
        Api::<Node>::all(self.client.clone())
            .create(&PostParams::default(), &node)
            .await
            .map_err(api(format!("creating node {name}")))?;
        Ok(())
    }

    /// A pause pod bound to `node` (no scheduler), tolerating kwok's taint.
    async fn create_pod(&self, name: &str, node: &str) -> Result<()> {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(BTreeMap::from([(
                    RUN_LABEL.to_string(),
                    self.namespace.clone(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.to_string()),
                containers: vec![Container {
                    name: "pause".into(),
                    image: Some(PAUSE_IMAGE.into()),
                    ..Container::default()
                }],
                tolerations: Some(vec![Toleration {
                    key: Some(KWOK_ANNOTATION.0.into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    ..Toleration::default()
                }]),
                automount_service_account_token: Some(false),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &pod)
            .await
            .map_err(api(format!("creating pod {name} on {node}")))?;
        Ok(())
    }

    /// Waits until kwok has made every node Ready and runs every pod.
    async fn wait_running(&self, nodes: usize) -> Result<()> {
        let selector = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.namespace));
        let node_api = Api::<Node>::all(self.client.clone());
        let pod_api = Api::<Pod>::namespaced(self.client.clone(), &self.namespace);
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let ready = node_api
                .list(&selector)
                .await
                .map_err(api("listing the simulated nodes"))?
                .items
                .iter()
                .filter(|n| node_ready(n))
                .count();
            let running = pod_api
                .list(&selector)
                .await
                .map_err(api("listing the simulated pods"))?
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if ready == nodes && running == nodes {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Cluster(format!(
                    "after {}s, {ready} of {nodes} nodes are Ready and {running} of {nodes} pods \
                     run: does kwok manage nodes annotated {}={}?",
                    READY_TIMEOUT.as_secs(),
                    KWOK_ANNOTATION.0,
                    KWOK_ANNOTATION.1
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Deletes the run's Nodes, RotaNodes and namespace (with its pods, slot Leases and
    /// ConfigMap), without waiting for them to go. Best effort: a failure is logged.
    pub(crate) async fn delete(self) {
        if !self.created_namespace {
            return;
        }
        let nodes = Api::<Node>::all(self.client.clone());
        let by_run = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.namespace));
        if let Err(e) = nodes
            .delete_collection(&DeleteParams::default(), &by_run)
            .await
        {
            warn!(
                namespace = %self.namespace,
                "deleting the simulated nodes: {e}; delete them with `kubectl delete nodes -l \
                 {RUN_LABEL}={}`",
                self.namespace
            );
        }
        let rota_nodes = Api::<RotaNode>::all(self.client.clone());
        let by_store =
            ListParams::default().labels(&format!("{NAMESPACE_LABEL}={}", self.namespace));
        if let Err(e) = rota_nodes
            .delete_collection(&DeleteParams::default(), &by_store)
            .await
        {
            warn!(
                namespace = %self.namespace,
                "deleting the simulation's RotaNodes: {e}; delete them with `kubectl delete \
                 rotanodes -l {NAMESPACE_LABEL}={}`",
                self.namespace
            );
        }
        if let Err(e) = Api::<Namespace>::all(self.client.clone())
            .delete(&self.namespace, &DeleteParams::default())
            .await
        {
            warn!(
                "deleting namespace {}: {e}; delete it with `kubectl delete namespace {}`",
                self.namespace, self.namespace
            );
        }
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates the RotaNode, RotaWindow and Procedure CRDs if the cluster does not have them, and
/// waits until they are served.
async fn install_crd(client: Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in [rota_node_crd(), rota_window_crd(), procedure_crd()] {
        let name = crd.meta().name.clone().unwrap_or_default();
        if crds
            .get_opt(&name)
            .await
            .map_err(api("reading a rota CRD"))?
            .is_some()
        {
            continue;
        }
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            // Another run created it in the meantime.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(api("creating a rota CRD")(e)),
        }
        tokio::time::timeout(
            READY_TIMEOUT,
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .map_err(|_| Error::Cluster(format!("the CRD {name} was not established in time")))?
        .map_err(|e| Error::Cluster(format!("watching the CRD {name}: {e}")))?;
    }
    Ok(())
}

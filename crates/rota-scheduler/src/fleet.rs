//! What the scheduler follows, with kube-runtime's reflectors: the RotaNodes of the installation,
//! its slot Leases and `rota-config`; and its read of them, which rota-core decides on.
//!
//! The RotaNodes are followed undecoded, and each read on its own: one edited by hand into
//! nonsense is left out with a warning that names it and its field, and the others go on.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use rota_core::grants::{Granted, LeaseView, NodeView, Operation, decide};
use rota_core::{Batches, Limits, NodeName, NodeState, rollout};
use rota_kube_api::{CONFIG_MAP, RotaNode, slots};
use rota_store::now_millis;
use rota_store_kube::{NAMESPACE_LABEL, settings_of};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tracing::warn;

/// A RotaNode's resourceVersion, and the RotaNode decoded at it (`None`: it does not read).
type Decoded = (String, Option<Arc<RotaNode>>);

/// The scheduler's view of the installation.
pub struct Fleet {
    nodes: Store<DynamicObject>,
    leases: Store<Lease>,
    config: Store<ConfigMap>,
    /// Each reflector has listed its objects.
    ready: [Arc<AtomicBool>; 3],
    tasks: Vec<AbortHandle>,
    /// Each RotaNode as decoded at the resourceVersion beside it (`None`: it does not read,
    /// and was named in a warning): a decision decodes only the ones changed since the last.
    decoded: Mutex<HashMap<String, Decoded>>,
    /// Told of every change of a RotaNode: the Procedures' status follows them.
    rota_node_news: Arc<Notify>,
}

/// Runs `stream` (into its reflector), telling `ready` once it has listed and each of
/// `changed` of every event `news` says matters (and of every failure).
pub(crate) fn follow<K, S>(
    stream: S,
    ready: Arc<AtomicBool>,
    changed: Vec<Arc<Notify>>,
    mut news: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
) -> AbortHandle
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream.default_backoff());
        while let Some(event) = stream.next().await {
            let tell = match &event {
                Ok(event) => {
                    if matches!(event, watcher::Event::InitDone) {
                        ready.store(true, Ordering::SeqCst);
                    }
                    news(event)
                }
                Err(e) => {
                    warn!(error = %e, "a watch of the scheduler failed; retrying");
                    true
                }
            };
            if tell {
                for changed in &changed {
                    changed.notify_one();
                }
            }
        }
    })
    .abort_handle()
}

/// The watches end with the fleet's view: a scheduler killed (its task aborted) leaves none
/// behind.
impl Drop for Fleet {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Fills a reflector's store with `objects`, as a watch's first list would.
fn fill<K>(writer: &mut reflector::store::Writer<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

impl Fleet {
    /// Starts following the installation of `namespace`.
    pub fn follow(client: Client, namespace: &str, changed: Arc<Notify>) -> Fleet {
        let resource = ApiResource::erase::<RotaNode>(&());
        let nodes_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let selector = format!("{NAMESPACE_LABEL}={namespace}");
        let (nodes, nodes_writer) = {
            let writer = reflector::store::Writer::new(resource);
            (writer.as_reader(), writer)
        };
        let (leases, leases_writer) = reflector::store();
        let (config, config_writer) = reflector::store();
        let ready: [Arc<AtomicBool>; 3] = Default::default();
        let lease_api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let config_api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let rota_node_news = Arc::new(Notify::new());
        let tasks = vec![
            follow(
                watcher(nodes_api, watcher::Config::default().labels(&selector))
                    .reflect(nodes_writer),
                ready[0].clone(),
                vec![changed.clone(), rota_node_news.clone()],
                |_| true,
            ),
            follow(
                watcher(
                    lease_api,
                    watcher::Config::default().labels(slots::SLOT_LABEL),
                )
                .reflect(leases_writer),
                ready[1].clone(),
                vec![changed.clone()],
                |_| true,
            ),
            follow(
                watcher(
                    config_api,
                    watcher::Config::default().fields(&format!("metadata.name={CONFIG_MAP}")),
                )
                .reflect(config_writer),
                ready[2].clone(),
                vec![changed],
                |_| true,
            ),
        ];
        Fleet {
            nodes,
            leases,
            config,
            ready,
            tasks,
            decoded: Mutex::default(),
            rota_node_news,
        }
    }

    /// The installation of `namespace` as three lists read now show it: a scheduler's round
    /// without its watches (see [`crate::round`]).
    pub async fn read(client: Client, namespace: &str) -> Result<Fleet, kube::Error> {
        let resource = ApiResource::erase::<RotaNode>(&());
        let nodes_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let lease_api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let config_api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let selector = format!("{NAMESPACE_LABEL}={namespace}");
        let (of_nodes, of_leases) = (
            ListParams::default().labels(&selector),
            ListParams::default().labels(slots::SLOT_LABEL),
        );
        let (nodes, leases, config) = tokio::try_join!(
            nodes_api.list(&of_nodes),
            lease_api.list(&of_leases),
            config_api.get_opt(CONFIG_MAP),
        )?;
        let mut nodes_writer = reflector::store::Writer::new(resource);
        let mut leases_writer = reflector::store::Writer::default();
        let mut config_writer = reflector::store::Writer::default();
        fill(&mut nodes_writer, nodes.items);
        fill(&mut leases_writer, leases.items);
        fill(&mut config_writer, config.into_iter().collect());
        Ok(Fleet {
            nodes: nodes_writer.as_reader(),
            leases: leases_writer.as_reader(),
            config: config_writer.as_reader(),
            ready: Default::default(),
            tasks: Vec::new(),
            decoded: Mutex::default(),
            rota_node_news: Arc::default(),
        })
    }

    pub fn ready(&self) -> bool {
        self.ready.iter().all(|r| r.load(Ordering::SeqCst))
    }

    /// Told of every change of a RotaNode, apart from the decisions' own notice.
    pub(crate) fn rota_node_news(&self) -> Arc<Notify> {
        self.rota_node_news.clone()
    }

    /// The value of `key` in `rota-config`, as its reflector shows it.
    pub(crate) fn config_value(&self, key: &str) -> Option<String> {
        let config = self.config.state();
        config.first()?.data.as_ref()?.get(key).cloned()
    }

    /// Every RotaNode that reads.
    pub(crate) fn rota_nodes(&self) -> Vec<Arc<RotaNode>> {
        let objects = self.nodes.state();
        let mut decoded = self.decoded.lock().unwrap_or_else(|e| e.into_inner());
        let mut now = HashMap::with_capacity(objects.len());
        let mut nodes = Vec::with_capacity(objects.len());
        for object in &objects {
            let (name, version) = (
                object.name_any(),
                object.resource_version().unwrap_or_default(),
            );
            let node = match decoded.remove(&name) {
                Some((known, node)) if known == version => node,
                _ => decode(object).map(Arc::new),
            };
            nodes.extend(node.clone());
            now.insert(name, (version, node));
        }
        *decoded = now;
        nodes
    }

    /// What rota-core decides on the fleet as it stands now, and the read it decided on, whose
    /// objects each operation compares and swaps. A `rota-config` that does not read decides
    /// nothing.
    pub fn decide(&self, take_up: Duration) -> Result<(Vec<Operation>, Read), rota_store::Error> {
        let config = self.config.state();
        let settings = settings_of(config.first().map(|c| c.as_ref()))?;
        let paused = settings.pause.is_some();
        let read = Read {
            nodes: self
                .rota_nodes()
                .into_iter()
                .filter_map(|n| Some((NodeName::new(&n.spec.node).ok()?, n)))
                .collect(),
            leases: self
                .leases
                .state()
                .into_iter()
                .filter_map(|l| Some((slots::slot_of(&l)?, l)))
                .collect(),
        };
        let nodes: Vec<NodeView> = read
            .nodes
            .values()
            .filter_map(|node| view(node, paused))
            .collect();
        let leases: Vec<LeaseView> = read
            .leases
            .iter()
            .map(|(&slot, lease)| LeaseView {
                slot,
                holder: slots::holder(lease).and_then(|h| NodeName::new(h).ok()),
                acquired_at: slots::acquired_at(lease).unwrap_or(0),
            })
            .collect();
        let batches = &settings.rollout.batches;
        let finished = match batches {
            Batches::All => 0,
            _ => {
                let records = read.nodes.iter().filter_map(|(name, node)| {
                    Some(rota_store_kube::record::node_record(
                        name,
                        node.status.as_ref()?,
                    ))
                });
                rollout::finished(&records.collect::<Vec<_>>(), settings.resumed_at)
            }
        };
        let limits = settings
            .groups
            .limits(Limits::rollout(settings.slots(), batches, finished));
        let take_up = i64::try_from(take_up.as_millis()).unwrap_or(i64::MAX);
        let decided = decide(&nodes, &leases, &limits, now_millis(), take_up);
        Ok((decided, read))
    }
}

/// The objects one decision was made on: an operation compares and swaps them as they were
/// read, never as a later event shows them (which would let a withdrawal decided on a stale
/// read pass on a fresh one).
pub struct Read {
    nodes: BTreeMap<NodeName, Arc<RotaNode>>,
    leases: BTreeMap<u32, Arc<Lease>>,
}

impl Read {
    /// The RotaNode of `node`, as read.
    pub fn rota_node(&self, node: &NodeName) -> Option<RotaNode> {
        self.nodes.get(node).map(|n| RotaNode::clone(n))
    }

    /// The Lease of `slot`, as read.
    pub fn lease(&self, slot: u32) -> Option<Arc<Lease>> {
        self.leases.get(&slot).cloned()
    }
}

/// `object` as a RotaNode, or `None`, named in a warning (once per version: a decoded version
/// is kept).
fn decode(object: &DynamicObject) -> Option<RotaNode> {
    let problem = match serde_json::to_value(object).map(serde_json::from_value::<RotaNode>) {
        Ok(Ok(node)) if NodeName::new(&node.spec.node).is_ok() => return Some(node),
        Ok(Ok(node)) => format!("spec.node: {:?} is no node name", node.spec.node),
        Ok(Err(e)) | Err(e) => e.to_string(),
    };
    warn!(
        rotanode = object.name_any(),
        problem, "a RotaNode that does not read gets no grant; the other nodes go on"
    );
    None
}

/// What rota-core reads of a RotaNode. A node whose agent took a slot up is in that slot's
/// window whatever its grant says (a grant removed by hand takes no slot from a node that may
/// be out).
fn view(node: &RotaNode, paused: bool) -> Option<NodeView> {
    let status = node.status.as_ref();
    let taken = status.and_then(|s| s.slot);
    let grant = match taken {
        Some(slot) => Some(Granted {
            slot,
            at: node.spec.grant.map_or(0, |g| g.at.0),
        }),
        None => node.spec.grant.map(|g| Granted {
            slot: g.slot,
            at: g.at.0,
        }),
    };
    let queued = status
        .filter(|s| s.state == NodeState::Queued)
        .and_then(|s| s.queued_at)
        .map(|t| t.0);
    Some(NodeView {
        node: NodeName::new(&node.spec.node).ok()?,
        queued,
        blocked: paused || status.is_some_and(|s| s.blocked.is_some()),
        alive: node.spec.withdrawn.is_none(),
        group: status.and_then(|s| s.group.clone()),
        grant,
        taken_up: taken.is_some(),
        since: status.map_or(0, |s| s.since.0),
    })
}

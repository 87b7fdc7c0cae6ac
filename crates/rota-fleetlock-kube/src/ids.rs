//! [`NodeIds`]: which Node a FleetLock client id is. Zincati's id is its host's app-specific
//! machine id ([`rota_fleetlock::zincati_id`]), and a Node's kubelet reports the machine id
//! (`status.nodeInfo.machineID`): the id is the labelled Node whose machine id gives it, and
//! its requests must come from that Node's InternalIP.
//!
//! Only ids are mapped, never Node names: Zincati sends no other, and a name is easier to
//! come by than a host's machine id.
//!
//! The Nodes are followed with kube-runtime's reflector, each kept with only what the mapping
//! reads; an index by id, kept from the same events, finds a request's Node without an HMAC
//! per Node.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use rota_core::NodeName;
use rota_fleetlock::{Ids, zincati_id};
use tokio::task::AbortHandle;
use tracing::warn;

use crate::HOST_SELECTOR;
use crate::error::{Error, Result};

/// The FleetLock hosts' Nodes, by client id.
pub struct NodeIds {
    nodes: Store<Node>,
    index: Arc<Mutex<Index>>,
    task: AbortHandle,
}

/// The watch ends with the map.
impl Drop for NodeIds {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NodeIds {
    /// Starts following the Nodes labelled [`HOST_SELECTOR`]; [`NodeIds::ready`] waits for
    /// their first list.
    pub fn follow(client: Client) -> NodeIds {
        let api: Api<Node> = Api::all(client);
        let (nodes, writer) = reflector::store();
        let index = Arc::new(Mutex::new(Index::default()));
        let stream = watcher(api, watcher::Config::default().labels(HOST_SELECTOR))
            .map_ok(|event| event.modify(keep_what_is_read))
            .reflect(writer)
            .default_backoff();
        let task = tokio::spawn({
            let index = index.clone();
            async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(event) => lock(&index).apply(&event),
                        Err(e) => {
                            warn!(error = %e, selector = HOST_SELECTOR, "the watch of the FleetLock hosts' Nodes failed; retrying");
                        }
                    }
                }
            }
        })
        .abort_handle();
        NodeIds { nodes, index, task }
    }

    /// Waits until the Nodes have been listed: until then every id would map to no node.
    pub async fn ready(&self) -> Result<()> {
        self.nodes
            .wait_until_ready()
            .await
            .map_err(|_| Error::WatchEnded {
                selector: HOST_SELECTOR,
            })
    }
}

fn lock(index: &Mutex<Index>) -> std::sync::MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops all of a Node but what the mapping reads (its name, addresses and machine id): a
/// Node's status lists its images and conditions, many kilobytes per host.
fn keep_what_is_read(node: &mut Node) {
    node.managed_fields_mut().clear();
    node.annotations_mut().clear();
    node.spec = None;
    node.status = node.status.take().map(|status| NodeStatus {
        addresses: status.addresses,
        node_info: status.node_info.map(|info| NodeSystemInfo {
            machine_id: info.machine_id,
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    });
}

/// Each Node's Zincati id, and the Nodes of each id.
#[derive(Default)]
struct IdMap {
    /// By Node name: `None` for a Node whose machine id gives no id.
    of_node: HashMap<String, Option<String>>,
    /// By id: more than one Node is a fault of the hosts (one machine id cloned).
    nodes: HashMap<String, BTreeSet<String>>,
}

impl IdMap {
    fn put(&mut self, node: &Node) {
        let name = node.name_any();
        let machine_id = node
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map_or("", |info| info.machine_id.as_str());
        let id = zincati_id(machine_id);
        if id.is_none() && !matches!(self.of_node.get(&name), Some(None)) {
            warn!(
                node = name,
                machine_id,
                "a FleetLock host's Node reports no machine id of 128 bits in hexadecimal (status.nodeInfo.machineID): no client id maps to it"
            );
        }
        self.remove(&name);
        if let Some(id) = &id {
            self.nodes
                .entry(id.clone())
                .or_default()
                .insert(name.clone());
        }
        self.of_node.insert(name, id);
    }

    fn remove(&mut self, name: &str) {
        if let Some(Some(id)) = self.of_node.remove(name)
            && let Some(nodes) = self.nodes.get_mut(&id)
        {
            nodes.remove(name);
            if nodes.is_empty() {
                self.nodes.remove(&id);
            }
        }
    }
}

/// The ids as the reflector's events leave them: a new list replaces them whole once it has
/// ended, as it replaces the reflector's store.
#[derive(Default)]
struct Index {
    live: IdMap,
    relist: Option<IdMap>,
}

impl Index {
    fn apply(&mut self, event: &watcher::Event<Node>) {
        match event {
            watcher::Event::Apply(node) => self.live.put(node),
            watcher::Event::Delete(node) => self.live.remove(&node.name_any()),
            watcher::Event::Init => self.relist = Some(IdMap::default()),
            watcher::Event::InitApply(node) => self.relist.get_or_insert_default().put(node),
            watcher::Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.live = relist;
                }
            }
        }
    }
}

/// Where a mapping fault is reported: the server answers it as its own error (500), with
/// this as the reason, since no request of the host can work until the hosts are mended.
fn fault(reason: String) -> rota_fleetlock::Error {
    rota_fleetlock::Error::Ids {
        path: format!("the Nodes labelled {HOST_SELECTOR}"),
        reason,
    }
}

#[async_trait]
impl Ids for NodeIds {
    async fn client(&self, id: &str) -> rota_fleetlock::Result<Option<rota_fleetlock::Client>> {
        let Some(names) = lock(&self.index).live.nodes.get(id).cloned() else {
            return Ok(None);
        };
        if names.len() > 1 {
            let all: Vec<&str> = names.iter().map(String::as_str).collect();
            return Err(fault(format!(
                "client id {id} is the Zincati id of {} Nodes, {}: they report one machine id \
                 (status.nodeInfo.machineID), as hosts cloned with their /etc/machine-id do; \
                 give each host its own",
                all.len(),
                all.join(", ")
            )));
        }
        let Some(name) = names.into_iter().next() else {
            return Ok(None);
        };
        let Some(object) = self.nodes.get(&ObjectRef::new(&name)) else {
            return Ok(None);
        };
        let node = NodeName::new(&name).map_err(|e| fault(format!("Node {name}: {e}")))?;
        let address = internal_ip(&object).map_err(|problem| {
            fault(format!(
                "Node {name} {problem}: the address its requests must come from is unknown"
            ))
        })?;
        Ok(Some(rota_fleetlock::Client {
            node,
            address: Some(address),
        }))
    }
}

/// The Node's first InternalIP (a dual-stack Node lists its primary family first), or what
/// is wrong with it.
fn internal_ip(node: &Node) -> Result<IpAddr, String> {
    let address = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|all| all.iter().find(|a| a.type_ == "InternalIP"))
        .ok_or_else(|| "has no InternalIP in status.addresses".to_owned())?;
    address.address.parse().map_err(|e| {
        format!(
            "has the InternalIP {:?}, not an IP address ({e})",
            address.address
        )
    })
}

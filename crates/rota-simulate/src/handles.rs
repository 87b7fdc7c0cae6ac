//! `--handle-per-agent`: every agent opens a store handle of its own at each start, as the
//! agents of a real fleet do (each its own process), instead of sharing the harness's. On
//! Kubernetes each handle then holds its own watches and caches, and every request it sends is
//! counted by verb and resource on the client side, where it can be told apart from the
//! cluster's own traffic (kwok's node heartbeats are Leases too).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request};
use kube::Client;
use kube::client::Body;
use rota_store::{SqliteStore, Store, StoreUrl};
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde::Serialize;

/// How an agent's own handle is opened.
#[derive(Clone)]
pub(crate) enum Opener {
    Sqlite(PathBuf),
    Url(StoreUrl),
    Kube {
        client: Client,
        config: KubeStoreConfig,
    },
}

/// The agents' own handles, and what the Kubernetes ones sent.
pub(crate) struct Handles {
    opener: Opener,
    traffic: Arc<Traffic>,
    /// The Kubernetes handle each agent runs on now, by node index: a restarted agent's
    /// replaces (and so closes) its predecessor's.
    open: Mutex<BTreeMap<usize, KubeStore>>,
}

impl Handles {
    pub(crate) fn new(opener: Opener) -> Handles {
        Handles {
            opener,
            traffic: Arc::new(Traffic::default()),
            open: Mutex::new(BTreeMap::new()),
        }
    }

    /// A new handle for the agent of node `index`; `returning`: the agent comes back into its
    /// window, and skips the Kubernetes store's start-up check.
    pub(crate) async fn open(
        &self,
        index: usize,
        returning: bool,
    ) -> rota_store::Result<Arc<dyn Store>> {
        match &self.opener {
            Opener::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path).await?)),
            Opener::Url(url) => url.open().await,
            Opener::Kube { client, config } => {
                let client = counted(client.clone(), self.traffic.clone());
                let store = if returning {
                    KubeStore::open(client, config.clone())
                } else {
                    KubeStore::connect(client, config.clone()).await?
                };
                self.open
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(index, store.clone());
                Ok(Arc::new(store))
            }
        }
    }

    /// The requests sent so far, if the handles are Kubernetes ones.
    pub(crate) fn sent(&self) -> Option<BTreeMap<String, u64>> {
        matches!(self.opener, Opener::Kube { .. }).then(|| self.traffic.sent())
    }

    /// Whether every Kubernetes handle's watches have listed what they watch.
    pub(crate) fn settled(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.values().all(KubeStore::settled)
    }

    /// The watches the Kubernetes handles hold open now.
    pub(crate) fn watches(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.values().map(KubeStore::watches).sum()
    }
}

/// Requests counted by verb and resource (see [`describe`]).
#[derive(Default)]
pub(crate) struct Traffic(Mutex<BTreeMap<String, u64>>);

impl Traffic {
    fn count(&self, request: &Request<Body>) {
        let key = describe(request.method(), request.uri());
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry(key).or_default() += 1;
    }

    fn sent(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// `client` with every request counted into `traffic`.
fn counted(client: Client, traffic: Arc<Traffic>) -> Client {
    let namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |request: Request<Body>| {
        traffic.count(&request);
        let client = client.clone();
        async move { client.send(request).await }
    });
    Client::new(service, namespace)
}

/// A request as `VERB resource[/subresource]`, with the API server's verbs: `LIST` and `WATCH`
/// for reads of a collection, `GET` for one object, `CREATE`, `UPDATE`, `PATCH`, `DELETE`.
pub(crate) fn describe(method: &Method, uri: &http::Uri) -> String {
    let parts: Vec<&str> = uri.path().split('/').filter(|p| !p.is_empty()).collect();
    // /api/v1/… or /apis/<group>/<version>/…; then namespaces/<ns>/ for a namespaced one.
    let mut rest = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        _ => parts.get(3..).unwrap_or_default(),
    };
    if rest.len() > 2 && rest[0] == "namespaces" {
        rest = &rest[2..];
    }
    let resource = match rest {
        [] => "(none)".to_owned(),
        [kind] | [kind, _] => (*kind).to_owned(),
        [kind, _, sub, ..] => format!("{kind}/{sub}"),
    };
    let one = rest.len() >= 2;
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "WATCH",
        Method::GET if one => "GET",
        Method::GET => "LIST",
        Method::POST => "CREATE",
        Method::PUT => "UPDATE",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => method.as_str(),
    };
    format!("{verb} {resource}")
}

/// What the agents' handles sent in one phase of a run.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseTraffic {
    pub seconds: f64,
    /// Requests by `VERB resource`, watches included.
    pub requests: BTreeMap<String, u64>,
    /// Every request but the watches.
    pub total: u64,
    /// Creates, updates, patches and deletes.
    pub writes: u64,
    /// `total` per node and hour of the phase.
    pub per_node_hour: f64,
    /// `writes` per node and hour of the phase.
    pub writes_per_node_hour: f64,
}

impl PhaseTraffic {
    /// The requests sent between the counts `before` and `after`, `took` apart, by `nodes`.
    pub(crate) fn between(
        before: &BTreeMap<String, u64>,
        after: &BTreeMap<String, u64>,
        took: Duration,
        nodes: usize,
    ) -> PhaseTraffic {
        let requests: BTreeMap<String, u64> = after
            .iter()
            .filter_map(|(key, n)| {
                let sent = n - before.get(key).copied().unwrap_or(0);
                (sent > 0).then(|| (key.clone(), sent))
            })
            .collect();
        let sum = |f: &dyn Fn(&str) -> bool| -> u64 {
            requests
                .iter()
                .filter(|(key, _)| f(key))
                .map(|(_, n)| n)
                .sum()
        };
        let total = sum(&|key| !key.starts_with("WATCH "));
        let writes = sum(&|key| {
            ["CREATE ", "UPDATE ", "PATCH ", "DELETE "]
                .iter()
                .any(|verb| key.starts_with(verb))
        });
        let node_hours = nodes as f64 * took.as_secs_f64() / 3600.0;
        let rate = |n: u64| {
            if node_hours > 0.0 {
                n as f64 / node_hours
            } else {
                0.0
            }
        };
        PhaseTraffic {
            seconds: took.as_secs_f64(),
            requests,
            total,
            writes,
            per_node_hour: rate(total),
            writes_per_node_hour: rate(writes),
        }
    }
}

/// What the agents' own Kubernetes handles sent (`--handle-per-agent`).
#[derive(Clone, Debug, Serialize)]
pub struct TrafficSummary {
    /// While every agent was idle (`--idle`), if there was such a phase.
    pub idle: Option<PhaseTraffic>,
    /// Watches held open per agent at the end of the idle phase.
    pub idle_watches_per_agent: Option<f64>,
    /// From the sentinels to the end of the rollout.
    pub rollout: PhaseTraffic,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(method: Method, uri: &str) -> String {
        describe(&method, &uri.parse().expect("a URI"))
    }

    #[test]
    fn requests_are_named_by_the_api_servers_verb_and_resource() {
        let rota_nodes = "/apis/rota.dev/v1alpha1/rotanodes";
        assert_eq!(described(Method::GET, rota_nodes), "LIST rotanodes");
        assert_eq!(
            described(
                Method::GET,
                &format!("{rota_nodes}?watch=true&labelSelector=x")
            ),
            "WATCH rotanodes"
        );
        assert_eq!(
            described(Method::PUT, &format!("{rota_nodes}/n1")),
            "UPDATE rotanodes"
        );
        assert_eq!(
            described(Method::PUT, &format!("{rota_nodes}/n1/status")),
            "UPDATE rotanodes/status"
        );
        assert_eq!(
            described(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/rota/leases/rota-slot-0"
            ),
            "GET leases"
        );
        assert_eq!(
            described(Method::POST, "/api/v1/namespaces/default/pods/p/eviction"),
            "CREATE pods/eviction"
        );
        assert_eq!(described(Method::PATCH, "/api/v1/nodes/n1"), "PATCH nodes");
        assert_eq!(
            described(Method::GET, "/api/v1/namespaces"),
            "LIST namespaces"
        );
    }

    #[test]
    fn a_phase_counts_what_was_sent_in_it_per_node_hour() {
        let before = BTreeMap::from([("LIST procedures".to_string(), 5)]);
        let after = BTreeMap::from([
            ("LIST procedures".to_string(), 7),
            ("UPDATE rotanodes".to_string(), 3),
            ("WATCH leases".to_string(), 4),
        ]);
        let phase = PhaseTraffic::between(&before, &after, Duration::from_secs(1800), 2);
        assert_eq!(phase.total, 5, "watches are not requests here");
        assert_eq!(phase.writes, 3);
        assert_eq!(phase.per_node_hour, 5.0);
        assert_eq!(phase.writes_per_node_hour, 3.0);
        assert_eq!(phase.requests.get("WATCH leases"), Some(&4));
    }
}

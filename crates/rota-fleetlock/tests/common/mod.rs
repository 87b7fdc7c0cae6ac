//! A real FleetLock server on a real store (SQLite in a temporary directory, or a fresh
//! PostgreSQL database), and a client that asks exactly as Zincati does.

#![allow(dead_code, reason = "each test binary uses a part")]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rota_core::{HistoryEvent, NodeName, Process};
use rota_fleetlock::{CommandPlatform, Config, Hosts, Ids, Metrics, NameIds, Server, Tls};
use rota_store::{HistoryFilter, PostgresStore, SqliteStore, Store, StoreExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Which real store a test runs on.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A store of `backend`, or `None` when PostgreSQL is skipped on purpose.
pub async fn store(backend: Backend, dir: &Path) -> Option<Arc<dyn Store>> {
    let store: Arc<dyn Store> = match backend {
        Backend::Sqlite => Arc::new(
            SqliteStore::open(&dir.join("rota.db"))
                .await
                .expect("open SQLite"),
        ),
        Backend::Postgres => {
            let url = rota_e2e::postgres::fresh_database().await?;
            Arc::new(PostgresStore::open(&url).await.expect("open PostgreSQL"))
        }
    };
    Some(store)
}

/// A server and what its hosts' commands leave behind.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub addr: SocketAddr,
    /// Where the commands keep their files: `<node>.drain` lets a drain end, `<node>.log`
    /// says what ran, `<node>.unhealthy` fails the health check.
    pub dir: PathBuf,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    ids: Arc<dyn Ids>,
    tokens: HashMap<String, String>,
    tls: Option<Tls>,
    listen: SocketAddr,
    cancel: CancellationToken,
    tmp: Option<tempfile::TempDir>,
}

pub struct Options {
    pub config: Config,
    pub ids: Arc<dyn Ids>,
    pub tokens: HashMap<String, String>,
    pub tls: Option<Tls>,
    /// Where the server listens (default 127.0.0.1, a free port).
    pub listen: SocketAddr,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            config: Config {
                health_interval: Duration::from_millis(100),
                ..Config::default()
            },
            ids: Arc::new(NameIds),
            tokens: HashMap::new(),
            tls: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

impl Options {
    /// The default options with `edit` made to their server's configuration.
    pub fn with(edit: impl FnOnce(&mut Config)) -> Options {
        let mut options = Options::default();
        edit(&mut options.config);
        options
    }
}

impl Fixture {
    pub async fn start(backend: Backend, options: Options) -> Option<Fixture> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(backend, tmp.path()).await?;
        Some(Fixture::serve(store, tmp, options).await)
    }

    /// A server on `store`, as a restart would start it.
    pub async fn serve(store: Arc<dyn Store>, tmp: tempfile::TempDir, options: Options) -> Fixture {
        let dir = tmp.path().to_path_buf();
        let cancel = CancellationToken::new();
        let platform = Arc::new(CommandPlatform {
            drain: Some(format!(
                "while [ ! -e '{d}'/\"$ROTA_NODE\".drain ]; do sleep 0.05; done; echo drain >> '{d}'/\"$ROTA_NODE\".log",
                d = dir.display()
            )),
            uncordon: Some(format!(
                "echo uncordon >> '{d}'/\"$ROTA_NODE\".log",
                d = dir.display()
            )),
            health: Some(format!(
                "test ! -e '{d}'/\"$ROTA_NODE\".unhealthy",
                d = dir.display()
            )),
        });
        let hosts = Hosts::new(
            store.clone(),
            platform,
            options.config.clone(),
            cancel.clone(),
        );
        hosts.resume().await.expect("resume");
        let metrics = hosts.metrics();
        let listener = TcpListener::bind(options.listen).await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // Clients connect over IPv4 loopback, also to a dual-stack listener on [::].
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let server = Arc::new(Server::new(
            hosts,
            options.ids.clone(),
            options.tokens.clone(),
        ));
        tokio::spawn(server.serve(listener, options.tls.clone(), cancel.clone()));
        Fixture {
            store,
            addr,
            dir,
            config: options.config,
            metrics,
            ids: options.ids,
            tokens: options.tokens,
            tls: options.tls,
            listen: options.listen,
            cancel,
            tmp: Some(tmp),
        }
    }

    /// Stops this server and starts another on the same store, as a restart does.
    pub async fn restart(mut self) -> Fixture {
        self.cancel.cancel();
        let tmp = self.tmp.take().expect("the fixture's directory");
        let options = Options {
            config: self.config.clone(),
            ids: self.ids.clone(),
            tokens: self.tokens.clone(),
            tls: self.tls.clone(),
            listen: self.listen,
        };
        Fixture::serve(self.store.clone(), tmp, options).await
    }

    pub fn base(&self) -> String {
        match self.tls {
            Some(_) => format!("https://localhost:{}/", self.addr.port()),
            None => format!("http://{}/", self.addr),
        }
    }

    pub fn client(&self, id: &str) -> Zincati {
        Zincati::new(&self.base(), id, "default", None)
    }

    /// Lets `node`'s drain end.
    pub fn let_drain(&self, node: &str) {
        std::fs::write(self.dir.join(format!("{node}.drain")), "").expect("drain file");
    }

    /// What the commands did to `node`, in order.
    pub fn log(&self, node: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(format!("{node}.log")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Everything the store holds that a request could have written: nodes and requests.
    pub async fn written(&self) -> (usize, usize) {
        let nodes = self.store.nodes().await.expect("nodes").len();
        let requests = self.store.all_requests().await.expect("requests").len();
        (nodes, requests)
    }

    pub async fn events(&self, node: &str) -> Vec<(Process, HistoryEvent)> {
        let filter = HistoryFilter {
            node: Some(NodeName::new(node).expect("node name")),
            ..HistoryFilter::default()
        };
        self.store
            .history(&filter)
            .await
            .expect("history")
            .into_iter()
            .map(|e| (e.process, e.event))
            .collect()
    }

    pub async fn record(&self, node: &str) -> rota_store::NodeRecord {
        self.store
            .node(&NodeName::new(node).expect("node name"))
            .await
            .expect("read")
            .expect("the node is known")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// An answer: the status, and the error's kind and value (empty on success).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub kind: String,
    pub value: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status == 200
    }
}

/// A FleetLock client that asks as Zincati does: POST, the protocol header, no content type,
/// and its client parameters as `serde_json::to_string_pretty` writes them.
pub struct Zincati {
    http: reqwest::Client,
    base: String,
    pub body: String,
}

impl Zincati {
    pub fn new(base: &str, id: &str, group: &str, from: Option<IpAddr>) -> Zincati {
        let http = reqwest::Client::builder()
            .local_address(from)
            .build()
            .expect("client");
        Zincati::with_client(base, id, group, http)
    }

    /// A client that connects with `http` (TLS settings, a client certificate).
    pub fn with_client(base: &str, id: &str, group: &str, http: reqwest::Client) -> Zincati {
        let body = serde_json::to_string_pretty(&serde_json::json!({
            "client_params": { "id": id, "group": group }
        }))
        .expect("body");
        Zincati {
            http,
            base: base.to_owned(),
            body,
        }
    }

    pub async fn pre_reboot(&self) -> Answer {
        self.send(
            "v1/pre-reboot",
            &[("fleet-lock-protocol", "true")],
            self.body.clone(),
        )
        .await
    }

    pub async fn steady_state(&self) -> Answer {
        self.send(
            "v1/steady-state",
            &[("fleet-lock-protocol", "true")],
            self.body.clone(),
        )
        .await
    }

    /// A `pre-reboot` that may fail to connect at all.
    pub async fn try_pre_reboot(&self) -> Result<u16, reqwest::Error> {
        let response = self
            .http
            .post(format!("{}v1/pre-reboot", self.base))
            .header("fleet-lock-protocol", "true")
            .body(self.body.clone())
            .send()
            .await?;
        Ok(response.status().as_u16())
    }

    /// Any request to `path` under the base, with these headers and body.
    pub async fn send(&self, path: &str, headers: &[(&str, &str)], body: String) -> Answer {
        let mut request = self.http.post(format!("{}{path}", self.base)).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        if status == 200 {
            return Answer {
                status,
                kind: String::new(),
                value: String::new(),
            };
        }
        let error: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("error body {text:?} is not JSON: {e}"));
        Answer {
            status,
            kind: error["kind"].as_str().expect("kind").to_owned(),
            value: error["value"].as_str().expect("value").to_owned(),
        }
    }

    /// Asks until granted, at most `limit` times `pause` apart; every refusal is returned.
    pub async fn until_granted(&self, limit: usize, pause: Duration) -> Vec<Answer> {
        let mut refusals = Vec::new();
        for _ in 0..limit {
            let answer = self.pre_reboot().await;
            if answer.ok() {
                return refusals;
            }
            refusals.push(answer);
            tokio::time::sleep(pause).await;
        }
        panic!(
            "never granted; last refusals: {:?}",
            refusals.iter().rev().take(3).collect::<Vec<_>>()
        );
    }
}

/// Waits until `check` holds, at most 30 s.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 30 s");
}

/// Generates each named test once per store: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await
                }
            )*
        }
    };
}

//! `rota agent` started before its store answers: a PostgreSQL, or an API server, behind a
//! proxy that refuses every connection until the test restores it, as a server still starting
//! (or restarting) does. The agent waits with growing pauses, says so in its log, and starts
//! once the store answers, instead of exiting into its supervisor's restart backoff.

mod common;
mod kube_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use common::{Agent, Host, server_of};
use kube::config::Kubeconfig;
use rota_core::NodeName;
use rota_e2e::postgres::fresh_database;
use rota_e2e::proxy::Proxy;
use rota_store::{PostgresStore, StoreExt};
use rota_store_kube::{KubeStore, KubeStoreConfig};

/// What the agent logs while it waits for its store.
const WAITING: &str = "the store is unavailable; opening it again";

/// Waits until `proxy` has refused `count` connections, with the agent still running.
async fn refused_while_running(proxy: &Proxy, agent: &mut Agent, count: u64) {
    let start = Instant::now();
    while proxy.refused() < count {
        if let Some(status) = agent.child.try_wait().expect("wait") {
            let stderr = agent.output_now();
            panic!("the agent exited ({status}) instead of waiting for its store:\n{stderr}");
        }
        assert!(
            start.elapsed() < kube_common::PATIENCE,
            "the agent did not try its store {count} times"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops `agent` with SIGTERM: what it logged.
fn stop(agent: Agent) -> String {
    agent.signal("TERM");
    String::from_utf8_lossy(&agent.output().stderr).into_owned()
}

// Two workers: the proxy forwards on one while the test waits for the agent on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_started_before_its_database_waits_for_it() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let server = server_of(&url);
    let proxy = Proxy::start(server).await.expect("a proxy");
    proxy.cut();
    let proxied = url.replace(&server.to_string(), &proxy.addr().to_string());

    let host = Host::new();
    let mut agent = host.agent(&["--store", &proxied]);
    refused_while_running(&proxy, &mut agent, 3).await;
    proxy.restore();

    let store = PostgresStore::open(&url).await.expect("open the database");
    let node = NodeName::new("node-a").expect("a node name");
    let start = Instant::now();
    while store.node(&node).await.expect("read the node").is_none() {
        assert!(
            start.elapsed() < kube_common::PATIENCE,
            "the agent never registered its node"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = stop(agent);
    assert!(log.contains(WAITING), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_started_before_its_api_server_waits_for_it() -> Result<()> {
    let Some((env, scope, nodes)) = kube_common::scope_with_nodes("store-start", 1).await? else {
        return Ok(());
    };
    rota_e2e::fleet::install_crd(scope.client()).await?;
    let config = env.config().await?;
    let server: SocketAddr = config
        .cluster_url
        .authority()
        .context("the API server's address")?
        .as_str()
        .parse()?;
    let proxy = Proxy::start(server).await?;
    proxy.cut();
    let mut kubeconfig = Kubeconfig::read_from(env.kubeconfig())?;
    for cluster in &mut kubeconfig.clusters {
        if let Some(cluster) = cluster.cluster.as_mut() {
            cluster.server = Some(format!("https://{}", proxy.addr()));
        }
    }
    let dir = tempfile::tempdir()?;
    let proxied = dir.path().join("kubeconfig");
    std::fs::write(&proxied, serde_json::to_vec(&kubeconfig)?)?;
    std::fs::create_dir_all(dir.path().join("root/run"))?;

    let host_root = dir.path().join("root");
    let mut agent = Agent {
        child: std::process::Command::new(kube_common::ROTA)
            .arg("agent")
            .args(["--store", "kube", "--node-actions", "kube"])
            .arg("--kubeconfig")
            .arg(&proxied)
            .arg("--host-root")
            .arg(&host_root)
            .args(["--node", &nodes[0], "--namespace", scope.namespace()])
            .args(["--start-jitter", "0s"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?,
    };
    refused_while_running(&proxy, &mut agent, 3).await;
    proxy.restore();

    let store = KubeStore::connect(
        scope.client().clone(),
        KubeStoreConfig {
            namespace: scope.namespace().to_owned(),
            ..KubeStoreConfig::default()
        },
    )
    .await?;
    let start = Instant::now();
    while kube_common::record(&store, &nodes[0]).await?.is_none() {
        ensure!(
            start.elapsed() < kube_common::PATIENCE,
            "the agent never registered its node"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = stop(agent);
    ensure!(
        log.contains("the API server is unavailable") || log.contains(WAITING),
        "{log}"
    );
    scope.cleanup().await
}

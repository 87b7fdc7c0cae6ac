//! `rota simulate --store kube` end to end against the real control plane of `testenv/`: kwok
//! nodes with a pod each, real cordon, eviction and uncordon, the Kubernetes store; only reboots
//! are simulated. Attaches to `ROTA_TESTENV_KUBECONFIG`, else starts a control plane; fails
//! without one unless `ROTA_E2E_SKIP=1`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

mod common;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Api;
use kube::api::ListParams;
use rota_core::NodeState;
use rota_e2e::proxy::{Proxy, outages};
use rota_e2e::testenv::TestEnv;
use rota_kube_api::RotaNode;
use rota_simulate::{KubeTarget, Options, StoreChoice, run};
use tokio_util::sync::CancellationToken;

/// A client of the test control plane, or `None` when the tests are skipped.
async fn test_client() -> Option<kube::Client> {
    let env = match TestEnv::get() {
        Ok(Some(env)) => env,
        Ok(None) => return None,
        Err(e) => panic!("{e:#}"),
    };
    let config = env.config().await.expect("the test kubeconfig");
    Some(rota_kube_client::client(config).expect("a client"))
}

/// The run's store: the test control plane, in `namespace`.
fn kube_store(client: &kube::Client, namespace: &str) -> StoreChoice {
    StoreChoice::Kube(KubeTarget {
        client: client.clone(),
        namespace: Some(namespace.to_owned()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rollout_reboots_every_node_once_never_more_than_k_at_once() {
    let Some(client) = test_client().await else {
        return;
    };
    let namespace = format!("rota-simulate-test-{}", std::process::id());
    let summary = run(
        common::options(kube_store(&client, &namespace), 6, 2),
        &CancellationToken::new(),
        |_, _| {},
    )
    .await
    .expect("simulation runs");
    assert_eq!(summary.store, "kube", "{summary:?}");
    common::assert_clean_rollout(&summary, 6, 2);

    assert_cleaned_up(&client, &namespace).await;
}

/// With a handle per agent, as on a real fleet, the run counts what the agents send: in the
/// idle phase nothing but the look each agent makes as it starts, with three watches each, and
/// in the rollout the writes of the windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_run_with_a_handle_per_agent_counts_what_its_agents_send() {
    let Some(client) = test_client().await else {
        return;
    };
    let namespace = format!("rota-simulate-handles-{}", std::process::id());
    let nodes = 4;
    let summary = run(
        Options {
            handle_per_agent: true,
            idle: Duration::from_secs(5),
            ..common::options(kube_store(&client, &namespace), nodes, 2)
        },
        &CancellationToken::new(),
        |_, _| {},
    )
    .await
    .expect("simulation runs");
    common::assert_clean_rollout(&summary, nodes, 2);
    let traffic = summary.traffic.as_ref().expect("the agents' traffic");
    let idle = traffic.idle.as_ref().expect("an idle phase");
    assert_eq!(traffic.idle_watches_per_agent, Some(2.0), "{traffic:?}");
    assert_eq!(idle.writes, 0, "an idle agent writes nothing: {idle:?}");
    // At most the first look of an agent whose watches were still listing when the phase began.
    assert!(idle.total <= 2 * nodes as u64, "{idle:?}");
    let rollout = &traffic.rollout;
    for write in ["UPDATE rotanodes", "UPDATE leases", "CREATE events"] {
        assert!(
            rollout.requests.contains_key(write),
            "{write} in the rollout: {rollout:?}"
        );
    }
    assert!(rollout.writes > 0 && rollout.total >= rollout.writes);
    assert_cleaned_up(&client, &namespace).await;
}

/// etcd's metrics URL of the test control plane: `ROTA_TESTENV_ETCD`, or the `env` file that
/// `testenv/up` writes beside the kubeconfig.
fn etcd_url(env: &TestEnv) -> String {
    if let Some(url) = std::env::var("ROTA_TESTENV_ETCD")
        .ok()
        .filter(|u| !u.is_empty())
    {
        return url;
    }
    let file = env.kubeconfig().with_file_name("env");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    text.lines()
        .find_map(|l| l.strip_prefix("ROTA_TESTENV_ETCD="))
        .unwrap_or_else(|| panic!("no ROTA_TESTENV_ETCD in {}", file.display()))
        .to_owned()
}

fn options_with_etcd(client: &kube::Client, namespace: &str, etcd: &str) -> Options {
    Options {
        handle_per_agent: true,
        idle: Duration::from_secs(3),
        etcd_metrics: Some(etcd.to_owned()),
        ..common::options(kube_store(client, namespace), 3, 2)
    }
}

/// With etcd's metrics URL, the run reports what etcd wrote, from etcd's own counters: a
/// baseline as long as the idle phase before any agent starts, the idle phase, and the
/// rollout, whose writes (RotaNodes, slot Leases, Events, the cordons) etcd appended to its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_run_with_etcd_metrics_reports_what_etcd_wrote_in_each_phase() {
    let Some(env) = TestEnv::get().unwrap_or_else(|e| panic!("{e:#}")) else {
        return;
    };
    let client = rota_kube_client::client(env.config().await.expect("the test kubeconfig"))
        .expect("a client");
    let namespace = format!("rota-simulate-etcd-{}", std::process::id());
    let options = options_with_etcd(&client, &namespace, &etcd_url(env));
    let summary = run(options, &CancellationToken::new(), |_, _| {})
        .await
        .expect("simulation runs");
    common::assert_clean_rollout(&summary, 3, 2);
    let etcd = summary.etcd.as_ref().expect("etcd's figures");
    assert!(
        etcd.baseline.seconds >= 2.9,
        "as long as the idle phase: {etcd:?}"
    );
    assert!(etcd.baseline.over_baseline_bytes.is_none(), "{etcd:?}");
    let idle = etcd.idle.as_ref().expect("an idle phase");
    assert!(idle.seconds >= 2.9, "{etcd:?}");
    assert!(idle.over_baseline_bytes.is_some(), "{etcd:?}");
    assert!(etcd.idle_over_baseline_per_node_hour.is_some(), "{etcd:?}");
    let rollout = &etcd.rollout;
    assert!(rollout.wal_bytes > 0, "{etcd:?}");
    assert!(rollout.puts.is_some_and(|puts| puts > 0), "{etcd:?}");
    assert!(rollout.over_baseline_bytes.is_some(), "{etcd:?}");
    assert_cleaned_up(&client, &namespace).await;
}

/// A URL that is not etcd's metrics is refused, naming the flag and the value, before the run
/// creates anything in the cluster: malformed, not answering, or answering with something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_run_refuses_an_etcd_metrics_url_that_is_not_etcds() {
    let Some(client) = test_client().await else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let other = format!("http://{}", listener.local_addr().expect("its address"));
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.read(&mut [0; 4096]);
            let body = "# HELP up Whether it is up.\nup 1\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let closed = {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        format!("http://{}", port.local_addr().expect("its address"))
    };
    let cases = [
        ("127.0.0.1:2379", "expected http(s)://HOST:PORT"),
        ("ftp://127.0.0.1:2379", "expected http(s)://HOST:PORT"),
        (closed.as_str(), "reading"),
        (other.as_str(), "is not etcd's metrics"),
    ];
    for (i, (url, reason)) in cases.into_iter().enumerate() {
        let namespace = format!("rota-simulate-bad-etcd-{}-{i}", std::process::id());
        let ended = run(
            options_with_etcd(&client, &namespace, url),
            &CancellationToken::new(),
            |_, _| {},
        )
        .await;
        let message = ended.expect_err("refused").to_string();
        assert!(
            message.starts_with(&format!("--etcd-metrics {url}: ")) && message.contains(reason),
            "{url}: {message}"
        );
        let ns = Api::<Namespace>::all(client.clone())
            .get_opt(&namespace)
            .await
            .expect("read the namespace");
        assert!(ns.is_none(), "{url}: namespace {namespace} was created");
    }
}

/// A run interrupted in the middle of its rollout (Ctrl-C or SIGTERM to `rota simulate`) stops
/// its agents and deletes what it created in the cluster, as its normal end does, and says it
/// was interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_kube_run_deletes_what_it_created() {
    let Some(client) = test_client().await else {
        return;
    };
    let namespace = format!("rota-interrupted-test-{}", std::process::id());
    let cancel = CancellationToken::new();
    let options = Options {
        // No node finishes before the interruption.
        maintenance_time: Duration::from_secs(120),
        ..common::options(kube_store(&client, &namespace), 4, 1)
    };
    // Interrupted once a node is out: its RotaNode shows the reboot.
    let rota_nodes: Api<RotaNode> = Api::all(client.clone());
    let by_run = ListParams::default().labels(&format!("rota.dev/namespace={namespace}"));
    let interrupt = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            // The run installs the CRD if the cluster lacks it: until then the list fails.
            let out = rota_nodes.list(&by_run).await.map(|l| l.items);
            if out.unwrap_or_default().iter().any(|n| {
                n.status
                    .as_ref()
                    .is_some_and(|s| s.state == NodeState::Rebooting)
            }) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no node rebooted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cancel.cancel();
    };
    let (ended, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(180), run(options, &cancel, |_, _| {})),
        interrupt
    );
    let ended = ended.expect("the run stopped when interrupted");
    assert!(
        matches!(ended, Err(rota_simulate::Error::Interrupted)),
        "{ended:?}"
    );
    assert_cleaned_up(&client, &namespace).await;
    let left = rota_nodes.list(&by_run).await.expect("list RotaNodes");
    assert!(
        left.items
            .iter()
            .all(|n| n.metadata.deletion_timestamp.is_some()),
        "RotaNodes left behind: {}",
        left.items.len()
    );
}

/// The API server goes away twice during a rollout (once the first node finished, and once
/// half had), for longer than a step takes, as a restart of the control plane would; every
/// connection to it ends. The agents and the harness reach it through a proxy that the test
/// cuts. They ride the outages out: every node reboots exactly once, never more than
/// `concurrency` at once, and none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rollout_rides_out_api_server_outages_and_reboots_every_node_once() {
    rollout_with_outages("rota-outage-test", Duration::from_secs(3), None).await;
}

/// The same, with outages of 5 s and sessions that expire after 2 s: the agents' sessions run
/// out during an outage, and each agent carries on under a new one afterwards (nobody took its
/// node over) instead of exiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rollout_rides_out_outages_longer_than_the_session_ttl() {
    rollout_with_outages(
        "rota-long-outage-test",
        Duration::from_secs(5),
        Some(Duration::from_secs(2)),
    )
    .await;
}

async fn rollout_with_outages(prefix: &str, length: Duration, session_ttl: Option<Duration>) {
    let env = match TestEnv::get() {
        Ok(Some(env)) => env,
        Ok(None) => return,
        Err(e) => panic!("{e:#}"),
    };
    let mut config = env.config().await.expect("the test kubeconfig");
    let server: SocketAddr = config
        .cluster_url
        .authority()
        .expect("the API server's address")
        .as_str()
        .parse()
        .expect("the API server listens on an IP address");
    let proxy = Arc::new(Proxy::start(server).await.expect("a proxy"));
    config.cluster_url = format!("https://{}", proxy.addr())
        .parse()
        .expect("the proxy's URL");
    let client = rota_kube_client::client(config).expect("a client");
    let nodes = 6;
    let namespace = format!("{prefix}-{}", std::process::id());
    let options = Options {
        // Windows longer than the harness's 1 s look at the store: the outages come while
        // nodes are still to go, not after the last one finished.
        maintenance_time: Duration::from_secs(2),
        session_ttl,
        ..common::options(kube_store(&client, &namespace), nodes, 2)
    };
    // The test keeps the proxy up until the run has cleaned up after itself.
    let (summary, cut) = common::disrupted_rollout(options, |done| {
        outages(proxy.clone(), vec![1, nodes / 2], length, done)
    })
    .await;
    common::assert_mid_rollout(&cut, nodes);
    common::assert_clean_rollout(&summary, nodes, 2);
    assert_cleaned_up(&client, &namespace).await;
    drop(proxy);
}

/// The run cleaned up after itself: its nodes are gone and its namespace is going.
async fn assert_cleaned_up(client: &kube::Client, namespace: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let left = nodes
        .list(&ListParams::default().labels(&format!("rota.dev/simulation={namespace}")))
        .await
        .expect("list nodes");
    assert!(
        left.items
            .iter()
            .all(|n| n.metadata.deletion_timestamp.is_some()),
        "simulated nodes left behind: {:?}",
        left.items
            .iter()
            .map(|n| &n.metadata.name)
            .collect::<Vec<_>>()
    );
    let ns = Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
        .expect("read the namespace");
    assert!(
        ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "namespace {namespace} left behind"
    );
}

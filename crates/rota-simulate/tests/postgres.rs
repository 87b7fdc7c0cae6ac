//! The simulator against a real PostgreSQL (the server of `ROTA_TEST_POSTGRES_URL`, which
//! `scripts/test` starts) whose connections are all ended mid-rollout, as a restart of the
//! server ends them, or which cannot be reached for a while.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rota_core::HistoryEvent;
mod common;

use rota_e2e::disrupt::at_thresholds;
use rota_e2e::postgres::{database_with_own_role, end_connections, execute, fresh_database};
use rota_e2e::proxy::{Proxy, outages};
use rota_simulate::{Options, StoreChoice, error_chain, run};
use rota_store::{HistoryFilter, PostgresStore, StoreExt, StoreUrl};
use tokio_util::sync::CancellationToken;

/// Two database restarts during a rollout (once the first node finished, and once half had):
/// the agents and the harness ride them out, every node reboots exactly once, and never more
/// than `concurrency` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_rides_out_database_restarts_and_reboots_every_node_once() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let nodes = 8;
    let options = common::options(sql_store(&url), nodes, 2);
    let (summary, ended) = common::disrupted_rollout(options, |done| {
        let url = url.clone();
        at_thresholds(vec![1, nodes / 2], done, move || {
            let url = url.clone();
            async move { end_connections(&url).await }
        })
    })
    .await;
    common::assert_mid_rollout(&ended, nodes);
    common::assert_clean_rollout(&summary, nodes, 2);
    assert_one_window_per_node(&url).await;
}

/// The database cannot be reached twice during a rollout (once the first node finished, and
/// once half had), for 3 s each: every open connection ends and new ones are refused, as when
/// the network to the server fails or the server is down. The agents and the harness reach it
/// through a proxy that the test cuts, and ride the outages out: every node reboots exactly
/// once, never more than `concurrency` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_rides_out_an_unreachable_database_and_reboots_every_node_once() {
    rollout_with_outages(Duration::from_secs(3), None).await;
}

/// The same, with outages of 5 s and sessions that expire after 2 s: every agent's session
/// runs out during an outage, and each carries on under a new one afterwards (nobody took its
/// node over) instead of exiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_rides_out_outages_longer_than_the_session_ttl() {
    rollout_with_outages(Duration::from_secs(5), Some(Duration::from_secs(2))).await;
}

/// With a handle per agent, the run reports what PostgreSQL itself counted for the agents:
/// each idle agent holds one connection and no more (LISTEN included), the idle agents'
/// transactions and statements per agent and second, and the rollout's, which its windows make
/// far more than the idle phase; the harness's own reads are counted apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_run_with_a_handle_per_agent_reports_the_servers_own_counts() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let nodes = 3;
    let options = Options {
        handle_per_agent: true,
        idle: Duration::from_secs(3),
        ..common::options(sql_store(&url), nodes, 2)
    };
    let summary = run(options, &CancellationToken::new(), |_, _| {})
        .await
        .expect("the rollout completes");
    common::assert_clean_rollout(&summary, nodes, 2);
    let postgres = summary.postgres.as_ref().expect("PostgreSQL's counts");
    assert!(
        url.ends_with(&format!("/{}", postgres.database)),
        "{postgres:?}"
    );
    assert_ne!(postgres.observer_database, postgres.database);
    let idle = postgres.idle.as_ref().expect("an idle phase");
    let agents = nodes as u64;
    assert_eq!(
        idle.connections_end, agents,
        "one connection per agent: {idle:?}"
    );
    assert!(idle.connections_peak <= agents, "never more: {idle:?}");
    assert_eq!(idle.harness_statements, 0, "{idle:?}");
    let rollout = &postgres.rollout;
    assert!(rollout.harness_statements > 0, "{rollout:?}");
    assert!(
        rollout.transactions > 10 * idle.transactions.max(1),
        "the windows' work: {postgres:?}"
    );
    match &postgres.statements_unavailable {
        None => {
            assert!(idle.statements_per_agent_second.is_some(), "{idle:?}");
            assert!(rollout.statements.is_some_and(|n| n > 0), "{rollout:?}");
        }
        Some(why) => {
            assert!(why.contains("pg_stat_statements"), "{why}");
            assert_eq!(rollout.statements, None, "{rollout:?}");
        }
    }
}

/// An agent that stops as it starts (here: its database role may not open a session) ends the
/// simulation with that agent's error, instead of leaving the harness waiting for every node's
/// first session forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_stops_before_the_rollout_ends_the_simulation_with_its_error() {
    let Some((_, url, _)) = database_with_own_role().await else {
        return;
    };
    PostgresStore::open(&url).await.expect("open");
    execute(
        &url,
        &["REVOKE INSERT ON sessions FROM PUBLIC, CURRENT_USER".to_string()],
    )
    .await;
    let options = common::options(sql_store(&url), 3, 1);
    let ended = tokio::time::timeout(
        Duration::from_secs(60),
        run(options, &CancellationToken::new(), |_, _| {}),
    )
    .await
    .expect("the simulation ended instead of waiting for the stopped agents");
    match ended {
        Err(rota_simulate::Error::Agent { node, source }) => {
            assert!(node.starts_with("sim-"), "{node}");
            let message = error_chain(&source);
            assert!(message.contains("permission denied"), "{message}");
        }
        other => panic!("expected an agent's error, got {other:?}"),
    }
}

async fn rollout_with_outages(length: Duration, session_ttl: Option<Duration>) {
    let Some(url) = fresh_database().await else {
        return;
    };
    let (proxy, proxied) = behind_a_proxy(&url).await;
    let proxy = Arc::new(proxy);
    let nodes = 8;
    let options = Options {
        session_ttl,
        ..common::options(sql_store(&proxied), nodes, 2)
    };
    let (summary, cut) = common::disrupted_rollout(options, |done| {
        outages(proxy.clone(), vec![1, nodes / 2], length, done)
    })
    .await;
    common::assert_mid_rollout(&cut, nodes);
    common::assert_clean_rollout(&summary, nodes, 2);
    drop(proxy);
    assert_one_window_per_node(&url).await;
}

/// The database is out of reach from the moment the harness sees the last node finish, for
/// 2 s: the summary, read right after, waits for it instead of failing the whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_waits_out_an_unreachable_database_at_the_end_of_the_rollout() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let (proxy, proxied) = behind_a_proxy(&url).await;
    let proxy = Arc::new(proxy);
    let cut = Arc::new(AtomicBool::new(false));
    let nodes = 3;
    let summary = run(
        Options {
            maintenance_time: Duration::from_millis(200),
            ..common::options(sql_store(&proxied), nodes, 2)
        },
        &CancellationToken::new(),
        {
            let (proxy, cut) = (proxy.clone(), cut.clone());
            move |completed, total| {
                if completed == total && !cut.swap(true, Ordering::SeqCst) {
                    proxy.cut();
                    let proxy = proxy.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        proxy.restore();
                    });
                }
            }
        },
    )
    .await
    .expect("the rollout completes and its summary is read");
    assert!(cut.load(Ordering::SeqCst), "the outage happened");
    assert!(proxy.refused() > 0, "the summary met the outage");
    common::assert_clean_rollout(&summary, nodes, 2);
    assert_one_window_per_node(&url).await;
}

/// The run's store: the database at `url`.
fn sql_store(url: &str) -> StoreChoice {
    StoreChoice::Url(StoreUrl::from_str(url).expect("the database's URL"))
}

/// A proxy in front of the server of `url`, and the URL that goes through it.
async fn behind_a_proxy(url: &str) -> (Proxy, String) {
    let (login, rest) = url.split_once('@').expect("a URL with a user");
    let (server, database) = rest.split_once('/').expect("a URL with a database");
    let server: SocketAddr = server.parse().expect("the server's IP address and port");
    let proxy = Proxy::start(server).await.expect("a proxy");
    let proxied = format!("{login}@{}/{database}", proxy.addr());
    (proxy, proxied)
}

/// Every node of the database at `url` has exactly one `started` and one `finished` entry.
async fn assert_one_window_per_node(url: &str) {
    let store = PostgresStore::open(url).await.expect("open");
    let history = store
        .history(&HistoryFilter::default())
        .await
        .expect("history");
    for node in store.nodes().await.expect("nodes") {
        let count = |event| {
            history
                .iter()
                .filter(|e| e.node == node.node && e.event == event)
                .count()
        };
        assert_eq!(
            (count(HistoryEvent::Started), count(HistoryEvent::Finished)),
            (1, 1),
            "node {}: {history:?}",
            node.node
        );
    }
}

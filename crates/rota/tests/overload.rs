//! A fleet that starts together, and a store it overloads, with separate `rota agent`
//! processes: the start's jitter (`--start-jitter`) sends nothing before its delay, ends at once
//! on SIGTERM and is skipped by a node back in its window; and a store that refuses the agents
//! for overload (PostgreSQL's class 53, the API server's 429) gets fewer and fewer attempts
//! from each of them, counted in their JSON logs and, on Kubernetes, by the API server itself.

mod api_overload;
mod common;
mod kube_common;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use api_overload::{KubeAgent, Overload, agent_client, agent_kubeconfig, flow_count, flow_schema};
use common::{Agent, Host, server_of};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use kube::api::Api;
use kube_common::PATIENCE;
use kube_common::chart::Chart;
use rota_core::{NodeName, NodeState};
use rota_e2e::host::touch;
use rota_e2e::postgres::{database_with_own_role, fresh_database};
use rota_e2e::proxy::Proxy;
use rota_e2e::testenv::wait_for;
use rota_kube_api::RotaNode;
use rota_store::{PostgresStore, StoreExt};
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde_json::{Value, json};

/// What an agent logs before it waits out its start's delay.
const WAITING: &str = "waiting before the first request to the store (--start-jitter), so that a fleet started together spreads out";
/// What an agent in its window logs instead.
const AT_ONCE: &str =
    "the node is in its maintenance window: starting at once, without --start-jitter's delay";
/// What an agent logs when SIGTERM came before it had its store.
const STOPPED_EARLY: &str = "stopped before the first contact with the store";
/// What an agent logs when its database refused it.
const DATABASE_REFUSED: &str = "the store is unavailable; opening it again";

/// The JSON lines of the log file at `path` (none while it does not exist).
fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The lines of `lines` whose message is `message`.
fn logged<'a>(lines: &'a [Value], message: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|line| line["message"] == message)
        .collect()
}

/// Waits until `ok` holds for the log at `path`; fails with the log after `within`.
async fn wait_log(path: &Path, what: &str, within: Duration, ok: impl Fn(&[Value]) -> bool) {
    let start = Instant::now();
    loop {
        let lines = log_lines(path);
        if ok(&lines) {
            return;
        }
        assert!(
            start.elapsed() < within,
            "{what}: not within {within:?}; the log:\n{}",
            std::fs::read_to_string(path).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops `agent` with SIGTERM and waits for its exit; it must exit by itself, with status 0.
fn terminate(agent: Agent) {
    agent.signal("TERM");
    let output = agent.output();
    assert!(output.status.success(), "{:?}", output.status);
}

/// A `Debug`-formatted duration from a log line, such as `1.5s`, `850ms` or `12µs`.
fn pause(line: &Value) -> Duration {
    let text = line["pause"].as_str().expect("a pause in the line");
    let (number, unit) = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|at| text.split_at(at))
        .expect("a unit");
    let number: f64 = number.parse().expect("a number");
    let seconds = match unit {
        "s" => number,
        "ms" => number / 1e3,
        "µs" => number / 1e6,
        "ns" => number / 1e9,
        other => panic!("unit {other} in {text}"),
    };
    Duration::from_secs_f64(seconds)
}

/// The shortest pause after the `n`-th failure in a row (from 0): rota's retry pauses double
/// from 1 s up to 8 s, and their randomness only lengthens them.
fn shortest_pause(n: usize) -> Duration {
    let first = rota_store::FIRST_RETRY_PAUSE;
    let doubled = first.saturating_mul(1 << n.min(16));
    doubled.min(rota_store::LONGEST_RETRY_PAUSE)
}

/// The most attempts an agent whose pauses are at least [`shortest_pause`] can make within
/// `elapsed` of its start: a storm (an attempt every few milliseconds) makes hundreds.
fn most_attempts(elapsed: Duration) -> usize {
    let mut attempts = 1;
    let mut at = Duration::ZERO;
    loop {
        at += shortest_pause(attempts - 1);
        if at > elapsed {
            return attempts;
        }
        attempts += 1;
    }
}

/// Asserts that the refusals an agent logged within `elapsed` of its start came after growing
/// pauses, and no more of them than those pauses allow.
fn assert_backed_off(node: &str, refusals: &[&Value], elapsed: Duration) {
    for (n, line) in refusals.iter().enumerate() {
        let waited = pause(line);
        assert!(
            waited >= shortest_pause(n),
            "{node}: pause {waited:?} after refusal {n} is shorter than {:?}",
            shortest_pause(n)
        );
    }
    assert!(
        refusals.len() <= most_attempts(elapsed),
        "{node}: {} refusals in {elapsed:?}, more than the {} that growing pauses allow",
        refusals.len(),
        most_attempts(elapsed)
    );
}

/// The database's name in a PostgreSQL URL (`…/name?options`).
fn database_name(url: &str) -> &str {
    let path = url.split('?').next().unwrap_or(url);
    path.rsplit('/').next().unwrap_or(path)
}

#[test]
fn growing_pauses_allow_few_attempts() {
    assert_eq!(most_attempts(Duration::ZERO), 1);
    assert_eq!(most_attempts(Duration::from_secs(3)), 3);
    // 1 + 2 + 4 + 8 + 8 = 23 s: six attempts, where one a second would be 24.
    assert_eq!(most_attempts(Duration::from_secs(23)), 6);
}

/// An agent on PostgreSQL with `--start-jitter 1000h` has not connected to its database once
/// it says it waits, and a SIGTERM ends it at once with status 0, before any contact: the
/// database holds no table of rota's.
#[tokio::test]
async fn an_agent_sends_nothing_during_its_start_jitter_and_stops_at_once() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let host = Host::new();
    let agent = host.agent_logging_to(
        "agent.log",
        &[
            "--store",
            &url,
            "--start-jitter",
            "1000h",
            "--log-format",
            "json",
        ],
    );
    let log = host.path("agent.log");
    wait_log(&log, "the start's wait", PATIENCE, |lines| {
        !logged(lines, WAITING).is_empty()
    })
    .await;
    let server = std::env::var("ROTA_TEST_POSTGRES_URL").expect("the test server");
    let admin = sqlx::PgPool::connect(&server).await.expect("connect");
    let connections: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
            .bind(database_name(&url))
            .fetch_one(&admin)
            .await
            .expect("count the connections");
    assert_eq!(
        connections, 0,
        "the agent connected during its start's wait"
    );

    terminate(agent);
    let lines = log_lines(&log);
    assert_eq!(logged(&lines, STOPPED_EARLY).len(), 1, "{lines:?}");
    let database = sqlx::PgPool::connect(&url).await.expect("connect");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables \
         WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
    )
    .fetch_one(&database)
    .await
    .expect("count the tables");
    assert_eq!(tables, 0, "the agent opened its store");
}

/// The host records that its node holds a slot; an agent that finds the record after the
/// node's reboot starts at once despite `--start-jitter 1000h` and finishes the window, the
/// record goes with the window, and the next start waits its delay.
#[tokio::test]
async fn an_agent_back_in_its_window_starts_at_once_and_one_out_of_it_waits() {
    let host = Host::new();
    let marker = host.root("var/lib/rota/in-window");
    let jittered = ["--start-jitter", "1000h", "--log-format", "json"];
    let agent = host.agent(&[]);
    host.wait_for("registered", |_| true).await;
    assert!(!marker.exists(), "an idle node is not in its window");
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    assert!(marker.exists(), "the host does not record the window");
    agent.kill();

    host.reboot_host("boot-2");
    let agent = host.agent_logging_to("back.log", &jittered);
    host.wait_for("the window's end", |r| {
        r.state == NodeState::Idle && r.slot.is_none()
    })
    .await;
    host.wait_until("the record's removal", || !marker.exists())
        .await;
    terminate(agent);
    let lines = log_lines(&host.path("back.log"));
    assert_eq!(logged(&lines, AT_ONCE).len(), 1, "{lines:?}");
    assert!(logged(&lines, WAITING).is_empty(), "{lines:?}");

    let agent = host.agent_logging_to("idle.log", &jittered);
    wait_log(
        &host.path("idle.log"),
        "the idle node's wait",
        PATIENCE,
        |lines| !logged(lines, WAITING).is_empty(),
    )
    .await;
    terminate(agent);
    assert_eq!(host.count("reboot"), 1);
}

/// Three agents started against a database whose role may open no connection (SQLSTATE 53300,
/// class 53: out of resources) each try again after growing pauses, as their logs say and as
/// the connections a proxy in front of each counts, and start once the limit is lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_ask_a_database_that_refuses_them_less_and_less_often() {
    let Some((admin_url, role_url, role)) = database_with_own_role().await else {
        return;
    };
    // The fleet's schema exists, made by its role, as in a fleet that restarts.
    drop(
        PostgresStore::open(&role_url)
            .await
            .expect("create the schema"),
    );
    let admin = sqlx::PgPool::connect(&admin_url).await.expect("connect");
    sqlx::query(&format!("ALTER ROLE {role} CONNECTION LIMIT 0"))
        .execute(&admin)
        .await
        .expect("limit the role");
    let first = Host::new();
    let hosts = [
        Host::sharing("node-b", &first),
        Host::sharing("node-c", &first),
        first,
    ];
    let server = server_of(&role_url);
    let mut agents = Vec::new();
    for host in &hosts {
        let proxy = Proxy::start(server).await.expect("a proxy");
        let url = role_url.replace(&server.to_string(), &proxy.addr().to_string());
        let agent = host.agent_logging_to("agent.log", &["--store", &url, "--log-format", "json"]);
        agents.push((agent, proxy, Instant::now()));
    }
    // Four refusals in a row take at least 1 + 2 + 4 = 7 s.
    for host in &hosts {
        wait_log(
            &host.path("agent.log"),
            "four refusals",
            PATIENCE,
            |lines| logged(lines, DATABASE_REFUSED).len() >= 4,
        )
        .await;
    }
    for (host, (_, proxy, started)) in hosts.iter().zip(&agents) {
        let lines = log_lines(&host.path("agent.log"));
        let refusals = logged(&lines, DATABASE_REFUSED);
        let connections = usize::try_from(proxy.forwarded()).expect("a count");
        let elapsed = started.elapsed();
        assert_backed_off(host.node.as_str(), &refusals, elapsed);
        assert!(
            (refusals.len()..=most_attempts(elapsed)).contains(&connections),
            "{}: {connections} connections for {} refusals in {elapsed:?}: growing pauses \
             allow one a refusal and at most {}",
            host.node,
            refusals.len(),
            most_attempts(elapsed)
        );
    }

    sqlx::query(&format!("ALTER ROLE {role} CONNECTION LIMIT -1"))
        .execute(&admin)
        .await
        .expect("lift the limit");
    let store = PostgresStore::open(&admin_url)
        .await
        .expect("open the store");
    for host in &hosts {
        let node: &NodeName = &host.node;
        let start = Instant::now();
        while store.node(node).await.expect("read the node").is_none() {
            assert!(
                start.elapsed() < PATIENCE,
                "{node} never started: {}",
                std::fs::read_to_string(host.path("agent.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for (agent, _, _) in agents {
        terminate(agent);
    }
}

/// What an agent logs when its store refused a pass of its loop.
const LOOP_REFUSED: &str = "the store is unavailable; retrying";
/// What an agent logs when the API server refused its start-up check.
const API_REFUSED: &str = "the API server is unavailable; checking the cluster again";
/// Three agents whose service account the API server's priority and fairness rejects with 429
/// try again after growing pauses, as their logs say and the API server's own count of the
/// requests it rejected confirms, and start once the rejections end. Rejected again in their
/// loop, with a reboot to record and their look at the procedures due, they pause as long
/// (before, a look already due ended every pause at once: 291 attempts in 4.5 s from one
/// agent), and record it once the rejections end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_ask_an_api_server_that_rejects_them_less_and_less_often() -> Result<()> {
    let Some((env, scope, nodes)) = kube_common::scope_with_nodes("overload", 3).await? else {
        return Ok(());
    };
    let chart = Chart::install(env, &scope, json!({})).await?;
    let admin = scope.client();
    let overload = Overload::start(env, &scope).await?;
    let mut kubeconfigs = Vec::new();
    for node in &nodes {
        kubeconfigs.push(agent_kubeconfig(env, &chart, node).await?);
    }
    // The agents' first request waits until the level rejects theirs: a client of their own
    // service account, without kube's retries, is refused with 429.
    let probe: Api<ConfigMap> = Api::namespaced(
        agent_client(env, kubeconfigs[0].path()).await?,
        chart.namespace(),
    );
    overload.impose(chart.namespace(), &probe).await?;
    let before = overload.rejected().await?;

    let agents = nodes
        .iter()
        .zip(&kubeconfigs)
        .map(|(node, kubeconfig)| {
            KubeAgent::start(node, kubeconfig.path(), chart.namespace(), "0s")
        })
        .collect::<Result<Vec<_>>>()?;
    for agent in &agents {
        wait_log(&agent.log(), "four rejections", PATIENCE, |lines| {
            logged(lines, API_REFUSED).len() >= 4
        })
        .await;
    }
    let mut refused = 0;
    for agent in &agents {
        let lines = log_lines(&agent.log());
        let refusals = logged(&lines, API_REFUSED);
        assert_backed_off(&agent.node, &refusals, agent.started.elapsed());
        refused += refusals.len();
    }
    // Each attempt of the start-up check sends one request while the API server turns it
    // away: the first list of a CRD goes alone, and the other CRDs' and the namespace's checks
    // follow once it answered (they went together before, 4 rejected requests an attempt).
    // The API server counts a rejection before the agent logs it, and each agent may have
    // made one more attempt since its log was read.
    let rejected = usize::try_from(overload.rejected().await? - before)?;
    ensure!(
        (refused..=refused + agents.len()).contains(&rejected),
        "the API server rejected {rejected} of the agents' requests; they logged {refused} \
         rejected attempts of 1 request each"
    );

    overload.lift().await?;
    let store = KubeStore::connect(
        admin.clone(),
        KubeStoreConfig {
            namespace: chart.namespace().into(),
            ..Default::default()
        },
    )
    .await?;
    for agent in &agents {
        let node = NodeName::new(&agent.node)?;
        let started = wait_for(
            &format!("the agent of {} to start", agent.node),
            PATIENCE,
            || async { Ok(store.node(&node).await?.map(|_| ())) },
        )
        .await;
        started.with_context(|| std::fs::read_to_string(agent.log()).unwrap_or_default())?;
    }

    // In their loop: rejected again while each has work to record (a reboot asked for), and
    // past the time to look at the procedures again (`--procedure-poll 5s`).
    overload.impose(chart.namespace(), &probe).await?;
    let rejected_before = overload.rejected().await?;
    let at = Instant::now();
    for agent in &agents {
        std::fs::write(agent.dir.path().join("root/run/reboot-needed"), b"")?;
    }
    for agent in &agents {
        wait_log(
            &agent.log(),
            "four rejections in the loop",
            PATIENCE,
            |lines| logged(lines, LOOP_REFUSED).len() >= 4,
        )
        .await;
    }
    let mut refused = 0;
    for agent in &agents {
        let lines = log_lines(&agent.log());
        let refusals = logged(&lines, LOOP_REFUSED);
        assert_backed_off(&agent.node, &refusals, at.elapsed());
        refused += refusals.len();
    }
    let rejected = overload.rejected().await? - rejected_before;
    ensure!(
        usize::try_from(rejected)? >= refused,
        "the API server rejected {rejected} requests; the agents logged {refused} rejections"
    );
    overload.lift().await?;
    for agent in &agents {
        let node = NodeName::new(&agent.node)?;
        let queued = wait_for(
            &format!("the agent of {} to record its reboot", agent.node),
            PATIENCE,
            || async {
                let record = store.node(&node).await?;
                Ok(record.filter(|r| r.state != NodeState::Idle).map(|_| ()))
            },
        )
        .await;
        queued.with_context(|| std::fs::read_to_string(agent.log()).unwrap_or_default())?;
    }
    for agent in agents {
        terminate(agent.agent);
        Api::<RotaNode>::all(admin.clone())
            .delete(&agent.node, &Default::default())
            .await?;
    }
    overload.end(&scope).await?;
    chart.uninstall()?;
    scope.cleanup().await
}

/// An agent on Kubernetes with `--start-jitter 1000h` has sent the API server no request once
/// it says it waits, by the API server's own count of its service account's requests (a flow
/// schema of its own, served as usual), and a SIGTERM ends it with status 0, still without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_kubernetes_sends_no_request_during_its_start_jitter() -> Result<()> {
    let Some((env, scope, nodes)) = kube_common::scope_with_nodes("jitter", 1).await? else {
        return Ok(());
    };
    let chart = Chart::install(env, &scope, json!({})).await?;
    let admin = scope.client();
    let kubeconfig = agent_kubeconfig(env, &chart, &nodes[0]).await?;
    let schema = format!("{}-counted", scope.id());
    let counted = flow_schema(&schema, "rota-agent", chart.namespace(), "workload-low")?;
    let schemas = Api::<FlowSchema>::all(admin.clone());
    schemas.create(&Default::default(), &counted).await?;
    // The count starts once the API server serves the agents' requests under that schema.
    let dispatched = "apiserver_flowcontrol_dispatched_requests_total";
    let probe: Api<ConfigMap> = Api::namespaced(
        agent_client(env, kubeconfig.path()).await?,
        chart.namespace(),
    );
    wait_for("the schema to count", PATIENCE, || async {
        let _ = probe.list(&Default::default()).await;
        Ok((flow_count(&admin, dispatched, &schema).await? > 0).then_some(()))
    })
    .await?;
    let before = flow_count(&admin, dispatched, &schema).await?;

    let agent = KubeAgent::start(&nodes[0], kubeconfig.path(), chart.namespace(), "1000h")?;
    wait_log(&agent.log(), "the start's wait", PATIENCE, |lines| {
        !logged(lines, WAITING).is_empty()
    })
    .await;
    let waiting = flow_count(&admin, dispatched, &schema).await?;
    ensure!(
        waiting == before,
        "{} requests while it waited",
        waiting - before
    );
    let log = agent.log();
    terminate(agent.agent);
    let lines = log_lines(&log);
    ensure!(logged(&lines, STOPPED_EARLY).len() == 1, "{lines:?}");
    let after = flow_count(&admin, dispatched, &schema).await?;
    ensure!(after == before, "{} requests in all", after - before);

    schemas.delete(&schema, &Default::default()).await?;
    chart.uninstall()?;
    scope.cleanup().await
}

//! The project's own fault-injection test (issue 29): a fleet of real `rota agent` processes on
//! one store, each asked for one reboot, while a seeded schedule SIGKILLs agents at random
//! moments and at aimed ones (restarted with `ROTA_CRASH_AT` at a crash point, see
//! `crates/rota/tests/crash_points.rs`) and, on PostgreSQL, crashes the server
//! (`scripts/postgres-crash`: `pg_ctl stop -m immediate` on a `--durable` server) and starts it
//! again. The node actions are shell commands that append to one monitor log, independent of
//! the agents' own records: from it the run checks that never more than K nodes were out of
//! service at once (from a drain to its uncordon) and that each node rebooted exactly once;
//! from the store, that every node ended idle, uncordoned and released with one `finished`.
//!
//! A short run is part of the test suite; `scripts/soak` runs many and prints
//! `runs, kills, store crashes, scheduler kills, violations` with each violation's seed. The Kubernetes half
//! is `soak_kube.rs`; what both share is `soak_common`.

mod common;
mod soak_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Agent, Host};
use rota_core::{HistoryEvent, NodeName, Process};
use rota_e2e::host::touch;
use rota_store::{HistoryFilter, PostgresStore, SqliteStore, Store, StoreExt};
use soak_common::{CONCURRENCY, NODES, Outcome, POINTS, Tally, all_done};

/// How long one run may take before it counts as stuck.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Which store a run uses.
#[derive(Clone, Copy, Debug)]
enum StoreKind {
    Sqlite,
    Postgres,
}

/// A throwaway durable PostgreSQL server of one run, stopped when dropped.
struct Server {
    url: String,
}

impl Server {
    fn start() -> Server {
        let output = Command::new(script("postgres-up"))
            .arg("--durable")
            .output()
            .expect("run scripts/postgres-up");
        assert!(output.status.success(), "postgres-up: {output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let url = stdout.lines().last().expect("a URL").to_owned();
        Server { url }
    }

    fn crash(&self) {
        let status = Command::new(script("postgres-crash"))
            .arg(&self.url)
            .status()
            .expect("run scripts/postgres-crash");
        assert!(status.success(), "postgres-crash {}", self.url);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(script("postgres-down"))
            .arg(&self.url)
            .status();
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name)
}

/// One node of the fleet: its host and its agent, and how often its machine rebooted.
struct Member {
    host: Host,
    agent: Option<Agent>,
    boots: u32,
}

impl Member {
    fn reboot_requested(&self) -> PathBuf {
        self.host.path("reboot-requested")
    }
}

/// The flags every agent of the run gets: its store, the concurrency, and node actions that
/// log to `monitor`.
fn flags(host: &Host, store: Option<&str>, monitor: &Path) -> Vec<String> {
    let node = &host.node;
    let log = |action: &str| format!("echo {node} {action} >> {}", monitor.display());
    let mut flags = vec![
        "--concurrency".to_owned(),
        CONCURRENCY.to_string(),
        "--drain-command".to_owned(),
        log("drain"),
        "--uncordon-command".to_owned(),
        log("uncordon"),
        "--reboot-command".to_owned(),
        format!(
            "{}; touch {}",
            log("reboot"),
            host.path("reboot-requested").display()
        ),
    ];
    if let Some(url) = store {
        flags.extend(["--store".to_owned(), url.to_owned()]);
    }
    flags
}

fn start(member: &Member, flags: &[String], point: Option<&str>) -> Agent {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = point.map(|p| ("ROTA_CRASH_AT", p)).into_iter().collect();
    member.host.agent_with_env(&flags, &env)
}

/// Never more than [`CONCURRENCY`] nodes between a drain and its uncordon, line by line.
fn check_monitor(monitor: &Path, violations: &mut Vec<String>) -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(monitor).unwrap_or_default();
    let mut out = std::collections::BTreeSet::new();
    let mut reboots = std::collections::BTreeMap::<String, usize>::new();
    for (number, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let (Some(node), Some(action)) = (words.next(), words.next()) else {
            violations.push(format!(
                "monitor line {} is malformed: {line:?}",
                number + 1
            ));
            continue;
        };
        match action {
            "drain" => {
                out.insert(node.to_owned());
            }
            "uncordon" => {
                out.remove(node);
            }
            "reboot" => *reboots.entry(node.to_owned()).or_default() += 1,
            _ => {}
        }
        if out.len() > CONCURRENCY {
            violations.push(format!(
                "{} nodes out of service at once at monitor line {}: {out:?}",
                out.len(),
                number + 1
            ));
        }
    }
    reboots.into_iter().collect()
}

async fn soak_run(seed: u64, kind: StoreKind) -> Outcome {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut outcome = Outcome::default();
    let server = matches!(kind, StoreKind::Postgres).then(Server::start);
    let url = server.as_ref().map(|s| s.url.clone());
    let first = Host::new();
    let monitor = first.path("monitor.log");
    let mut hosts: Vec<Host> = (1..NODES)
        .map(|i| Host::sharing(&format!("node-{i}"), &first))
        .collect();
    hosts.insert(0, first);
    let mut members: Vec<Member> = hosts
        .into_iter()
        .map(|host| Member {
            host,
            agent: None,
            boots: 0,
        })
        .collect();
    let store: Box<dyn Store> = match &url {
        Some(url) => Box::new(PostgresStore::open(url).await.expect("open the database")),
        None => Box::new(
            SqliteStore::open(&members[0].host.db)
                .await
                .expect("open the store"),
        ),
    };
    let all_flags: Vec<Vec<String>> = members
        .iter()
        .map(|m| flags(&m.host, url.as_deref(), &monitor))
        .collect();
    for (member, flags) in members.iter_mut().zip(&all_flags) {
        touch(&member.host.root("run/reboot-needed"));
        member.agent = Some(start(member, flags, None));
    }

    let began = Instant::now();
    let mut next_fault = Instant::now() + Duration::from_millis(rng.u64(0..300));
    // On PostgreSQL the first fault crashes the server: every run meets one.
    let mut crash_next = server.is_some();
    let mut records = Vec::new();
    while began.elapsed() < RUN_LIMIT {
        for (member, flags) in members.iter_mut().zip(&all_flags) {
            // An agent that aborted at its crash point comes back, as a supervisor restarts it.
            let exited = member
                .agent
                .as_mut()
                .is_some_and(|a| a.child.try_wait().ok().flatten().is_some());
            if exited {
                member.agent = Some(start(member, flags, None));
            }
            if member.reboot_requested().exists() {
                if let Some(agent) = member.agent.take() {
                    agent.kill();
                }
                std::fs::remove_file(member.reboot_requested()).expect("the reboot request");
                member.boots += 1;
                member
                    .host
                    .reboot_host(&format!("boot-{}", member.boots + 1));
                member.agent = Some(start(member, flags, None));
            }
        }
        records = match store.nodes().await {
            Ok(records) => records,
            // The database restarting: look again at the next round.
            Err(e) if e.is_unavailable() => Vec::new(),
            Err(e) => panic!("reading the fleet: {e}"),
        };
        if all_done(&records) && members.iter().all(|m| m.boots >= 1) {
            break;
        }
        if Instant::now() >= next_fault {
            next_fault = Instant::now() + Duration::from_millis(rng.u64(50..400));
            if let Some(server) = server.as_ref().filter(|_| crash_next || rng.u32(0..6) == 0) {
                crash_next = false;
                server.crash();
                outcome.store_crashes += 1;
            } else {
                let index = rng.usize(0..NODES);
                let member = &mut members[index];
                if let Some(agent) = member.agent.take() {
                    agent.kill();
                    outcome.kills += 1;
                }
                let point = (rng.u32(0..3) == 0).then(|| POINTS[rng.usize(0..POINTS.len())]);
                member.agent = Some(start(member, &all_flags[index], point));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !all_done(&records) {
        outcome.violations.push(format!(
            "not every node finished within {}s: {records:?}",
            RUN_LIMIT.as_secs()
        ));
    }
    let reboots = check_monitor(&monitor, &mut outcome.violations);
    for member in &mut members {
        if let Some(agent) = member.agent.take() {
            agent.kill();
        }
        let node = &member.host.node;
        if member.boots != 1 {
            outcome
                .violations
                .push(format!("{node} rebooted {} times", member.boots));
        }
        if !reboots
            .iter()
            .any(|(n, count)| n == node.as_str() && *count >= 1)
        {
            outcome
                .violations
                .push(format!("{node}'s reboot command never ran"));
        }
        let finished = finished_reboots(&*store, node).await;
        if finished != 1 {
            outcome
                .violations
                .push(format!("{node} has {finished} finished reboots in history"));
        }
    }
    outcome
}

async fn finished_reboots(store: &dyn Store, node: &NodeName) -> usize {
    store
        .history(&HistoryFilter {
            node: Some(node.clone()),
            process: Some(Process::Reboot),
            event: Some(HistoryEvent::Finished),
            ..HistoryFilter::default()
        })
        .await
        .expect("history")
        .len()
}

/// Runs `runs` seeded runs from `first_seed` on `kind`; prints one line per run and a summary.
async fn soak(kind: StoreKind, first_seed: u64, runs: u64) -> Vec<(u64, String)> {
    let mut tally = Tally::default();
    for seed in first_seed..first_seed + runs {
        let began = Instant::now();
        let outcome = soak_run(seed, kind).await;
        tally.add(&format!("{kind:?}"), seed, outcome, began.elapsed());
    }
    tally.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_on_sqlite_finds_no_violation() {
    assert_eq!(soak(StoreKind::Sqlite, 1, 3).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_on_postgres_with_server_crashes_finds_no_violation() {
    assert_eq!(soak(StoreKind::Postgres, 1, 2).await, []);
}

/// `scripts/soak`: `ROTA_SOAK_STORE` (`sqlite` or `postgres`), `ROTA_SOAK_RUNS` and
/// `ROTA_SOAK_FIRST_SEED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run through scripts/soak"]
async fn soak_from_the_environment() {
    let kind = match std::env::var("ROTA_SOAK_STORE").as_deref() {
        Ok("postgres") => StoreKind::Postgres,
        Ok("sqlite") | Err(_) => StoreKind::Sqlite,
        Ok(other) => panic!("ROTA_SOAK_STORE={other}: expected sqlite or postgres"),
    };
    let (first, runs) = soak_common::seeds_from_the_environment();
    assert_eq!(soak(kind, first, runs).await, []);
}

//! The real `rota simulate` binary on the embedded default store.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The run's own directories under `dir` (the store's, and the hosts' where there is no tmpfs).
fn runs_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read the temporary directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("rota-simulate-"))
        .collect()
}

/// Ctrl-C (SIGINT) stops a run in the middle: the agents stop, the run deletes its store and
/// says it was interrupted, and exits with a failure, instead of dying with its files left
/// behind (or, with `--store kube`, its Nodes in the cluster).
#[test]
fn ctrl_c_stops_a_run_and_deletes_what_it_made() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let child = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args([
            "simulate",
            "--nodes",
            "3",
            "--concurrency",
            "1",
            "--maintenance-time",
            "60s",
        ])
        .env("TMPDIR", tmp.path())
        .env_remove("ROTA_STORE")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rota simulate");
    // The store exists once the run is under way (the signal handler is installed before).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !runs_in(tmp.path())
        .iter()
        .any(|run| tmp.path().join(run).join("rota.db").exists())
    {
        assert!(Instant::now() < deadline, "no store after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    let status = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -INT");
    let output = child.wait_with_output().expect("wait for rota simulate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{:?}: {stderr}",
        output.status
    );
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(runs_in(tmp.path()), Vec::<String>::new(), "{stderr}");
}

/// An idle phase is there to count what the agents' own handles send: asked for without them,
/// the run is refused before it starts, naming both flags.
#[test]
fn an_idle_phase_without_a_handle_per_agent_is_refused() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args([
            "simulate",
            "--nodes",
            "2",
            "--concurrency",
            "1",
            "--idle",
            "5s",
        ])
        .env("TMPDIR", tmp.path())
        .env_remove("ROTA_STORE")
        .output()
        .expect("run rota simulate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--idle 5s needs --handle-per-agent"),
        "{stderr}"
    );
    assert_eq!(
        runs_in(tmp.path()),
        Vec::<String>::new(),
        "nothing was made"
    );
}

/// On the embedded default, a handle per agent means an SQLite connection per agent: the
/// rollout completes as with a shared one, and there is no traffic to report.
#[test]
fn a_handle_per_agent_on_sqlite_reboots_every_node_once() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args([
            "simulate",
            "--nodes",
            "6",
            "--concurrency",
            "2",
            "--maintenance-time",
            "200ms",
            "--handle-per-agent",
            "--json",
        ])
        .env("TMPDIR", tmp.path())
        .env_remove("ROTA_STORE")
        .output()
        .expect("run rota simulate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(summary["completed"], 6, "{summary}");
    assert_eq!(summary["reboots"], 6, "{summary}");
    assert_eq!(summary["max_concurrent"], 2, "{summary}");
    assert!(summary.get("traffic").is_none(), "{summary}");
}

/// Only a Kubernetes store writes to etcd: `--etcd-metrics` with any other store is refused
/// before the run starts, naming the flag, its value and `--store kube`.
#[test]
fn etcd_metrics_without_a_kubernetes_store_is_refused() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args([
            "simulate",
            "--nodes",
            "2",
            "--concurrency",
            "1",
            "--handle-per-agent",
            "--etcd-metrics",
            "http://127.0.0.1:2379",
        ])
        .env("TMPDIR", tmp.path())
        .env_remove("ROTA_STORE")
        .output()
        .expect("run rota simulate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--etcd-metrics http://127.0.0.1:2379 needs --store kube"),
        "{stderr}"
    );
    assert_eq!(
        runs_in(tmp.path()),
        Vec::<String>::new(),
        "nothing was made"
    );
}

/// `rota simulate` once, on the SQLite store `db`, 8 nodes `concurrency` at a time, with `extra`
/// flags: its JSON summary.
fn simulate_on(db: &Path, concurrency: &str, extra: &[&str]) -> serde_json::Value {
    let store = format!("sqlite://{}", db.display());
    let output = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["simulate", "--store", &store, "--nodes", "8"])
        .args(["--concurrency", concurrency])
        .args(["--maintenance-time", "1s", "--json"])
        .args(extra)
        .env_remove("ROTA_STORE")
        .output()
        .expect("run rota simulate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// `rota plan`'s forecast against the rollout that then happens: a first rollout records how
/// long a window takes; in the next ones, the forecast made once every node asked for its turn
/// has every window, in the order they opened, and every window ends within the stated margin
/// of its forecast: a quarter of the forecast's span, and at least a second (what the agents'
/// handoffs on a loaded machine may add to four windows in a row).
#[test]
fn a_plan_forecasts_the_order_and_the_end_of_the_rollout_that_happens() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let db = tmp.path().join("rota.db");
    simulate_on(&db, "2", &[]);
    // Four rounds of two windows of about a second each.
    let summary = simulate_on(&db, "2", &["--plan"]);
    kept_to_the_forecast(&summary, 3_000..6_000);
    // A new rollout by exponential batches of a concurrency of 4: one, two, four, then the
    // last one, four rounds again. Before the fix the SQL store's waiters slept through the
    // widening, and the rollout took eight seconds against the forecast's four.
    let resumed = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["resume", "--store", &format!("sqlite://{}", db.display())])
        .output()
        .expect("run rota resume");
    assert!(resumed.status.success(), "{resumed:?}");
    let summary = simulate_on(&db, "4", &["--plan", "--batches", "exponential"]);
    kept_to_the_forecast(&summary, 3_000..6_000);
    assert_eq!(summary["max_concurrent"], 4, "{summary}");
}

/// The forecast of `summary` (`rota simulate --plan`) had every window, in the order they
/// opened, a span within `span`, and every window's end within a quarter of the span (at least
/// a second) of its forecast.
fn kept_to_the_forecast(summary: &serde_json::Value, span: std::ops::Range<i64>) {
    let plan = &summary["plan"];
    assert_eq!(plan["windows"], 8, "{summary}");
    assert_eq!(plan["order_kept"], true, "{summary}");
    let forecast = plan["forecast_span_ms"].as_i64().expect("a span");
    assert!(span.contains(&forecast), "{summary}");
    let margin = (forecast / 4).max(1_000);
    let error = plan["finish_error_max_ms"].as_i64().expect("an error");
    assert!(
        error <= margin,
        "a window ended {error} ms from its forecast: {summary}"
    );
}

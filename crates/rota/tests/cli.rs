//! The real `rota` binary against a real SQLite store, populated through the `Store` API the
//! way an agent would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use rota_core::{BackoffPolicy, NodeName, NodeState, Process};
use rota_store::conformance::open_window;
use rota_store::{Session, SqliteStore, Store, StoreExt, Transition, WindowChange, now_millis};
use serde_json::Value;

const TTL: Duration = Duration::from_secs(300);

fn node(name: &str) -> NodeName {
    NodeName::new(name).expect("valid node name")
}

/// Requests a reboot, enters the queue at `queued_at`, and returns the session.
async fn enqueue(store: &dyn Store, name: &str, queued_at: i64) -> Session {
    let s = store.open_session(&node(name), TTL).await.expect("session");
    store
        .add_request(&s, &Process::Reboot, "test")
        .await
        .expect("add request");
    store
        .transition(
            &s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(queued_at),
            }),
        )
        .await
        .expect("enqueue");
    s
}

/// Takes a slot and opens the window: the node is draining.
async fn start(store: &dyn Store, s: &Session) -> u32 {
    let slot = store
        .try_acquire_slot(s)
        .await
        .expect("acquire")
        .slot()
        .expect("a free slot");
    open_window(store, s).await;
    slot
}

/// Drains and fails the maintenance, keeping the slot (fail closed).
async fn fail_closed(store: &dyn Store, s: &Session) {
    store
        .transition(
            s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    store
        .transition(
            s,
            Transition::new(NodeState::Maintaining, NodeState::Failed).window(WindowChange::Fail {
                cause: "script exited 3".into(),
                policy: BackoffPolicy {
                    initial: Duration::from_secs(600),
                    maximum: Duration::from_secs(3600),
                    exponent: 2.0,
                },
                keep_slot: true,
            }),
        )
        .await
        .expect("fail");
}

/// A fleet with concurrency 3: node-3 failed on slot 0, node-1 draining on slot 1, node-4
/// failed on slot 2, node-2 queued without a slot.
async fn fleet(dir: &Path) -> PathBuf {
    let path = dir.join("rota.db");
    let store = SqliteStore::open(&path).await.expect("open store");
    store.set_concurrency(3).await.expect("concurrency");
    let now = now_millis();
    let n3 = enqueue(&store, "node-3", now - 4000).await;
    let n1 = enqueue(&store, "node-1", now - 3000).await;
    let n4 = enqueue(&store, "node-4", now - 2000).await;
    assert_eq!(start(&store, &n3).await, 0);
    assert_eq!(start(&store, &n1).await, 1);
    assert_eq!(start(&store, &n4).await, 2);
    fail_closed(&store, &n3).await;
    fail_closed(&store, &n4).await;
    enqueue(&store, "node-2", now - 1000).await;
    path
}

fn store_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

fn rota(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(args)
        .env_remove("ROTA_STORE")
        .env_remove("RUST_LOG")
        .output()
        .expect("run rota")
}

/// Runs `rota ARGS --store URL`, expecting success; returns stdout.
fn ok(path: &Path, args: &[&str]) -> String {
    let url = store_url(path);
    let mut all = args.to_vec();
    all.extend(["--store", &url]);
    let out = rota(&all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rota {all:?} failed: {stderr}");
    assert!(stderr.is_empty(), "rota {all:?} wrote to stderr: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs rota expecting failure with `code`; returns the single line it wrote to stderr.
fn fails(args: &[&str], code: i32) -> String {
    let out = rota(args);
    assert_eq!(out.status.code(), Some(code), "rota {args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "rota {args:?} wrote to stdout");
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    assert_eq!(
        stderr.lines().count(),
        1,
        "rota {args:?}: not one line: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

fn json(text: &str) -> Vec<Value> {
    serde_json::from_str::<Value>(text)
        .expect("valid JSON")
        .as_array()
        .expect("a JSON array")
        .clone()
}

fn status(path: &Path) -> Vec<Value> {
    json(&ok(path, &["status", "-o", "json"]))
}

fn find<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["node"] == name)
        .unwrap_or_else(|| panic!("{name} in {rows:?}"))
}

#[tokio::test]
async fn status_shows_every_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;

    let rows = status(&db);
    let names: Vec<&str> = rows.iter().filter_map(|r| r["node"].as_str()).collect();
    assert_eq!(names, ["node-1", "node-2", "node-3", "node-4"]);

    let failed = find(&rows, "node-3");
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["holds_slot"], true);
    assert_eq!(failed["slot"], 0);
    assert_eq!(failed["process"], "reboot");
    assert_eq!(failed["queue"], 1);
    let backoff = failed["backoff"].as_str().expect("in backoff");
    assert!(backoff.ends_with('Z'), "{backoff}");
    assert!(failed["since"].as_str().is_some_and(|s| s.ends_with('Z')));

    let draining = find(&rows, "node-1");
    assert_eq!(draining["state"], "draining");
    assert_eq!(draining["holds_slot"], true);
    assert_eq!(draining["slot"], 1);
    assert_eq!(draining["backoff"], Value::Null);

    let queued = find(&rows, "node-2");
    assert_eq!(queued["state"], "queued");
    assert_eq!(queued["holds_slot"], false);
    assert_eq!(queued["slot"], Value::Null);
    assert_eq!(queued["queue"], 1);

    let table = ok(&db, &["status"]);
    assert!(
        table.starts_with(
            "concurrency 3, 3 of 3 slots held (node-3 slot 0, node-1 slot 1, node-4 slot 2)\n"
        ),
        "{table}"
    );
    assert!(table.contains("NODE"), "{table}");
    assert!(table.contains("failed"), "{table}");
    assert!(table.contains(" ago"), "{table}");
}

#[tokio::test]
async fn history_lists_and_filters_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;

    let all = json(&ok(&db, &["history", "-o", "json"]));
    let events: Vec<(&str, &str)> = all
        .iter()
        .filter_map(|e| Some((e["node"].as_str()?, e["event"].as_str()?)))
        .collect();
    assert_eq!(
        events,
        [
            ("node-3", "started"),
            ("node-1", "started"),
            ("node-4", "started"),
            ("node-3", "failed"),
            ("node-4", "failed"),
        ]
    );
    let first = &all[0];
    assert_eq!(first["process"], "reboot");
    assert_eq!(first["slot"], 0);
    assert_eq!(first["released"], false);
    assert!(first["at"].as_str().is_some_and(|at| at.ends_with('Z')));

    let failed = json(&ok(
        &db,
        &["history", "node-3", "--event", "failed", "-o", "json"],
    ));
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["cause"], "script exited 3");

    assert_eq!(
        json(&ok(&db, &["history", "--since", "1h", "-o", "json"])).len(),
        5
    );
    assert!(json(&ok(&db, &["history", "--until", "1h", "-o", "json"])).is_empty());
    assert!(
        json(&ok(
            &db,
            &["history", "--since", "2999-01-01T00:00:00Z", "-o", "json"]
        ))
        .is_empty()
    );
    assert!(json(&ok(&db, &["history", "--process", "mop/fw", "-o", "json"])).is_empty());

    let table = ok(&db, &["history", "node-3"]);
    assert!(table.contains("script exited 3"), "{table}");
    assert_eq!(table.lines().count(), 3, "header and two entries: {table}");
}

/// The `data-node` of each lane of the SVG timeline at `path`, which must parse as SVG.
fn svg_lanes(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the SVG file was written");
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    root.descendants()
        .filter(|n| n.attribute("class") == Some("lane"))
        .filter_map(|n| n.attribute("data-node").map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn history_svg_draws_one_lane_per_node_of_the_filtered_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;

    let all = dir.path().join("all.svg");
    let table = ok(
        &db,
        &["history", "--svg", all.to_str().expect("utf-8 path")],
    );
    assert!(
        table.contains("script exited 3"),
        "the table is still printed: {table}"
    );
    let mut lanes = svg_lanes(&all);
    lanes.sort();
    // node-2 is only queued: no history, but its step draws its wait.
    assert_eq!(lanes, ["node-1", "node-2", "node-3", "node-4"]);
    let drawn = std::fs::read_to_string(&all).expect("the SVG file was written");
    for kind in ["wait", "drain", "maintenance"] {
        assert!(
            drawn.contains(&format!("class=\"segment {kind}")),
            "the steps draw {kind}: {drawn}"
        );
    }

    let one = dir.path().join("node-3.svg");
    ok(
        &db,
        &[
            "history",
            "node-3",
            "--svg",
            one.to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(svg_lanes(&one), ["node-3"]);

    // The page beside the SVG: the timeline inline, and the failure's cause in its table.
    let page = dir.path().join("all.html");
    ok(
        &db,
        &[
            "history",
            "--svg",
            all.to_str().expect("utf-8 path"),
            "--html",
            page.to_str().expect("utf-8 path"),
        ],
    );
    let html = std::fs::read_to_string(&page).expect("the HTML file was written");
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert_eq!(html.matches("<svg").count(), 1);
    assert!(html.contains("script exited 3"), "{html}");
}

/// `--steps`: every state each node entered, how long it stayed, and where the time went;
/// filtered by node, as a table and as JSON.
#[tokio::test]
async fn history_steps_show_each_state_and_where_the_time_went() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;

    let report: Value =
        serde_json::from_str(&ok(&db, &["history", "--steps", "-o", "json"])).expect("JSON");
    let steps = report["steps"].as_array().expect("steps");
    let of = |node: &str| -> Vec<&str> {
        steps
            .iter()
            .filter(|s| s["node"] == node)
            .filter_map(|s| s["state"].as_str())
            .collect()
    };
    assert_eq!(
        of("node-3"),
        ["queued", "draining", "maintaining", "failed"]
    );
    assert_eq!(of("node-1"), ["queued", "draining"]);
    assert_eq!(of("node-2"), ["queued"]);
    let last = steps
        .iter()
        .rfind(|s| s["node"] == "node-2")
        .expect("node-2's step");
    assert_eq!(last["ongoing"], true, "node-2 still waits: {last}");
    let summary: Vec<&str> = report["summary"]
        .as_array()
        .expect("summary")
        .iter()
        .filter_map(|p| p["step"].as_str())
        .collect();
    assert_eq!(summary, ["wait", "drain", "maintenance"]);
    let wait = &report["summary"][0];
    assert_eq!(wait["count"], 3, "three nodes got their slot: {wait}");
    assert!(
        wait["p50_ms"].as_i64() <= wait["p99_ms"].as_i64()
            && wait["slowest"].as_array().is_some_and(|s| !s.is_empty()),
        "{wait}"
    );

    let one: Value =
        serde_json::from_str(&ok(&db, &["history", "node-1", "--steps", "-o", "json"]))
            .expect("JSON");
    assert!(
        one["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .all(|s| s["node"] == "node-1")
    );
    let table = ok(&db, &["history", "--steps"]);
    assert!(table.contains("where the time went"), "{table}");
    assert!(table.contains("ongoing"), "{table}");
}

/// A report path that cannot be written is refused before the store is opened: here the
/// store does not exist, and the error is the path's, not the store's.
#[test]
fn unwritable_report_paths_are_refused_before_the_store_is_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store_url(&dir.path().join("never-opened.db"));
    let missing = dir.path().join("no/such/dir/t.out");
    let missing = missing.to_str().expect("utf-8 path");
    let a_dir = dir.path().to_str().expect("utf-8 path");
    for (flag, path, why) in [
        ("--svg", missing, "does not exist"),
        ("--html", missing, "does not exist"),
        ("--html", a_dir, "is a directory"),
    ] {
        let err = fails(&["history", flag, path, "--store", &url], 1);
        assert!(
            err.contains(&format!("{flag} {path}:")) && err.contains(why),
            "{err}"
        );
        assert!(
            !err.contains("never-opened.db"),
            "the store was opened: {err}"
        );
    }
    let same = dir.path().join("t.out");
    let same = same.to_str().expect("utf-8 path");
    let err = fails(
        &["history", "--svg", same, "--html", same, "--store", &url],
        1,
    );
    assert!(err.contains("--svg and --html"), "{err}");
}

#[tokio::test]
async fn unlock_releases_a_failed_nodes_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;

    let said = ok(&db, &["unlock", "node-3", "--reason", "replaced the disk"]);
    assert!(
        said.starts_with("unlocked node-3 (was failed): slot 0 released"),
        "{said}"
    );

    let rows = status(&db);
    let unlocked = find(&rows, "node-3");
    assert_eq!(unlocked["state"], "idle");
    assert_eq!(unlocked["holds_slot"], false);
    assert_eq!(unlocked["slot"], Value::Null);
    assert_eq!(unlocked["queue"], 0);

    let canceled = json(&ok(
        &db,
        &["history", "node-3", "--event", "canceled", "-o", "json"],
    ));
    assert_eq!(canceled.len(), 1, "{canceled:?}");
    assert_eq!(canceled[0]["released"], true);
    assert_eq!(canceled[0]["slot"], 0);
    assert!(
        canceled[0]["cause"]
            .as_str()
            .is_some_and(|c| c.contains("replaced the disk")),
        "{canceled:?}"
    );

    // Nothing left to unlock: the store's refusal comes through.
    let url = store_url(&db);
    let err = fails(
        &["unlock", "node-3", "--reason", "again", "--store", &url],
        1,
    );
    assert!(err.contains("node-3 is idle"), "{err}");
    let err = fails(&["unlock", "nobody", "--reason", "x", "--store", &url], 1);
    assert!(err.contains("node nobody is not known"), "{err}");
}

#[tokio::test]
async fn retry_resumes_a_failed_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;

    let said = ok(&db, &["retry", "node-4"]);
    assert!(
        said.contains("node-4: now maintaining, keeps slot 2"),
        "{said}"
    );
    let rows = status(&db);
    let retried = find(&rows, "node-4");
    assert_eq!(retried["state"], "maintaining");
    assert_eq!(retried["slot"], 2);

    let url = store_url(&db);
    let err = fails(&["retry", "node-1", "--store", &url], 1);
    assert!(err.contains("node-1 is draining"), "{err}");
}

/// Every operator command records who did it and why, once it is done, and `rota history`
/// shows them among the history's entries; a command that changed nothing records nothing.
#[tokio::test]
async fn operator_commands_are_audited_with_who_and_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;
    let script = dir.path().join("kernel.sh");
    std::fs::write(&script, "true\n").expect("script");
    let script = script.display().to_string();

    ok(&db, &["pause", "--reason", "change freeze"]);
    ok(&db, &["resume", "--reason", "freeze over"]);
    ok(&db, &["unlock", "node-3", "--reason", "replaced the disk"]);
    ok(&db, &["retry", "node-4", "--reason", "fixed the mirror"]);
    ok(
        &db,
        &["request", "node-3", "--reboot", "--reason", "kernel CVE"],
    );
    // Already requested: nothing changed, nothing recorded.
    ok(&db, &["request", "node-3", "--reboot"]);
    ok(
        &db,
        &["cancel", "node-3", "--reboot", "--reason", "wrong node"],
    );
    ok(&db, &["cancel", "node-3", "--reboot"]);
    let submit = ["mop", "submit", "--name", "kernel", "--script", &script];
    ok(&db, &submit);
    ok(&db, &submit);

    let by = format!(
        "{}@{}",
        whoami::fallible::username().expect("a user name"),
        whoami::fallible::hostname().expect("a host name")
    );
    let rows = json(&ok(&db, &["history", "-o", "json"]));
    let audited: Vec<(String, Value, Value, Value)> = rows
        .iter()
        .filter(|r| !r["by"].is_null())
        .map(|r| {
            assert_eq!(r["by"], by.as_str(), "{r}");
            (
                r["event"].as_str().expect("an event").to_owned(),
                r["node"].clone(),
                r["process"].clone(),
                r["cause"].clone(),
            )
        })
        .collect();
    let expected = [
        ("pause", None, None, Some("change freeze")),
        ("resume", None, None, Some("freeze over")),
        (
            "unlock",
            Some("node-3"),
            Some("reboot"),
            Some("replaced the disk"),
        ),
        (
            "retry",
            Some("node-4"),
            Some("reboot"),
            Some("fixed the mirror"),
        ),
        (
            "request",
            Some("node-3"),
            Some("reboot"),
            Some("kernel CVE"),
        ),
        ("cancel", Some("node-3"), Some("reboot"), Some("wrong node")),
        ("submit", None, Some("mop/kernel"), None),
    ]
    .map(|(event, node, process, cause)| {
        let text = |v: Option<&str>| v.map_or(Value::Null, Value::from);
        (event.to_owned(), text(node), text(process), text(cause))
    });
    assert_eq!(audited, expected);
    // The agents' entries carry no operator.
    assert!(
        rows.iter()
            .any(|r| r["event"] == "canceled" && r["by"].is_null()),
        "{rows:?}"
    );

    let table = ok(&db, &["history", "node-4"]);
    assert!(
        table.lines().next().is_some_and(|h| h.ends_with("BY")),
        "{table}"
    );
    let retried = table
        .lines()
        .find(|l| l.contains(" retry "))
        .unwrap_or_else(|| panic!("a retry line in {table}"));
    assert!(
        retried.contains("fixed the mirror") && retried.ends_with(&by),
        "{retried}"
    );
    // An event filter asks for the history's events only.
    let failed = json(&ok(&db, &["history", "--event", "failed", "-o", "json"]));
    assert!(failed.iter().all(|r| r["event"] == "failed"), "{failed:?}");
}

#[tokio::test]
async fn the_store_comes_from_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fleet(dir.path()).await;
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["status", "-o", "json"])
        .env("ROTA_STORE", store_url(&db))
        .output()
        .expect("run rota");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json(&String::from_utf8_lossy(&out.stdout)).len(), 4);
}

#[test]
fn bad_input_is_one_line_naming_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["status", "--store", "mysql://x"], "mysql://x"),
        (&["history", "--event", "exploded"], "exploded"),
        (&["history", "--since", "yesterdayish"], "yesterdayish"),
        (
            &["history", "--until", "2024-13-45T00:00:00Z"],
            "2024-13-45",
        ),
        (&["history", "--process", "mop/Bad"], "mop/Bad"),
        (&["history", "-o", "yaml"], "yaml"),
        (&["unlock", "bad_name!", "--reason", "x"], "bad_name!"),
        (&["unlock", "n", "--reason", ""], "--reason"),
        (&["unlock", "n"], "--reason"),
        (&["pause"], "--reason"),
        (&["pause", "--reason", " "], "--reason"),
        (&["retry", "n", "--reason", ""], "--reason"),
        (&["retry", "node_"], "node_"),
        (&["explode"], "explode"),
    ];
    for (args, named) in cases {
        let err = fails(args, 2);
        assert!(err.contains(named), "rota {args:?}: {err}");
    }
    let err = fails(&["history", "--since", "yesterdayish"], 2);
    assert!(err.contains("--since") && err.contains("RFC 3339"), "{err}");
}

#[test]
fn a_missing_store_is_not_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nothing-here.db");
    let url = store_url(&path);
    let err = fails(&["status", "--store", &url], 1);
    assert!(
        err.contains("nothing-here.db") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!path.exists());
}

/// `rota plan` on a store that holds no nodes, on a missing file and on a database nobody
/// answers for: one line saying so, and a non-zero exit, with nothing created.
#[tokio::test]
async fn a_plan_of_an_empty_or_unreachable_store_says_so_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty.db");
    drop(SqliteStore::open(&empty).await.expect("open store"));
    let url = store_url(&empty);
    let err = fails(&["plan", "--store", &url], 1);
    assert!(
        err.contains(&url) && err.contains("holds no nodes"),
        "{err}"
    );
    let missing = dir.path().join("nothing-here.db");
    let err = fails(&["plan", "--store", &store_url(&missing)], 1);
    assert!(err.contains("nothing-here.db"), "{err}");
    assert!(!missing.exists());
    // Port 1 on the loopback: nothing listens there.
    let unreachable = "postgres://rota@127.0.0.1:1/rota";
    let err = fails(&["plan", "--store", unreachable], 1);
    assert!(err.contains("127.0.0.1:1"), "{err}");
    // A store with a waiting node plans it.
    let planned = ok(&fleet(dir.path()).await, &["plan", "-o", "json"]);
    let planned: Value = serde_json::from_str(&planned).expect("json");
    assert!(
        planned["windows"].as_array().is_some_and(|w| !w.is_empty()),
        "{planned}"
    );
}

#[test]
fn help_works() {
    let out = rota(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["status", "history", "unlock", "retry"] {
        assert!(help.contains(command), "{help}");
    }
    let out = rota(&["history", "--help"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--since <TIME>"));
}

/// Installed as `kubectl-rota`, rota is kubectl's plugin and talks to the cluster by default.
#[test]
fn as_kubectl_rota_the_store_is_the_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("kubectl-rota");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rota"), &plugin).expect("symlink");
    let missing = dir.path().join("no-kubeconfig");
    let output = std::process::Command::new(&plugin)
        .args(["status", "--kubeconfig"])
        .arg(&missing)
        .env_remove("ROTA_STORE")
        .output()
        .expect("kubectl-rota");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--kubeconfig") && stderr.contains("no-kubeconfig"),
        "the plugin went to the cluster: {stderr}"
    );
    let output = std::process::Command::new(&plugin)
        .args(["status", "--store"])
        .arg(format!("sqlite://{}", dir.path().join("none.db").display()))
        .output()
        .expect("kubectl-rota");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("none.db"),
        "an explicit store wins: {stderr}"
    );
}

/// Starts `rota bench` on `url` with `sessions` sessions for a second per workload, its
/// output piped.
fn start_bench(url: &str, sessions: u32) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["bench", "--store", url, "--seconds", "1", "--sessions"])
        .arg(sessions.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rota bench")
}

/// A bench leaves its store as it found it: every window closed and every slot free, so that a
/// second bench on the same store runs (it used to wait forever for the slots the first left
/// held).
#[test]
fn a_second_bench_on_the_same_store_runs_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store_url(&dir.path().join("bench.db"));
    for run in ["first", "second"] {
        let mut bench = start_bench(&url, 4);
        let start = std::time::Instant::now();
        while bench.try_wait().expect("try_wait").is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = bench.kill();
                panic!("the {run} bench did not end within 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let output = bench.wait_with_output().expect("bench output");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{run} bench: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(stdout.contains("appends/s"), "{run} bench: {stdout}");
    }
}

/// `rota bench … | head -n 1`: the reader goes away after the first line while the bench still
/// has lines to print, which must end the output, not the process with a panic.
#[test]
fn a_reader_that_goes_away_ends_the_output_not_the_bench() {
    use std::io::{BufRead, BufReader, Read};

    let dir = tempfile::tempdir().expect("tempdir");
    let url = store_url(&dir.path().join("bench.db"));
    let mut bench = start_bench(&url, 2);
    let stdout = bench.stdout.take().expect("piped stdout");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("first line");
    assert!(first.starts_with("store "), "{first}");
    // The pipe's reading end is closed here, before the workloads' lines are printed.
    let status = bench.wait().expect("wait for rota bench");
    let mut stderr = String::new();
    bench
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status:?}: {stderr}");
}

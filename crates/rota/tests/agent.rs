//! `rota agent` as a real process on a real SQLite store and real files, for what needs the
//! process: kills in the middle of a window, a frozen process, exit codes and stderr, shell
//! command node actions, the command line and the operator commands beside a running agent.
//! The rest of the agent's lifecycle is tested in-process in `crates/rota-agent/tests/`. Node
//! actions are shell commands that append to a log, so each test can count them.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Host, ROTA, assert_refused};

use rota_core::NodeState;
use rota_e2e::host::{PATIENCE, take_the_only_slot, touch};

#[tokio::test]
async fn an_agent_killed_during_the_drain_drains_again_and_reboots_once() {
    let host = Host::new();
    let log = host.path("actions.log");
    let slow_drain = format!("echo drain >> {}; sleep 60", log.display());
    let agent = host.agent(&["--drain-command", &slow_drain]);
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the drain", || host.count("drain") == 1)
        .await;
    assert_eq!(
        host.record().await.map(|r| r.state),
        Some(NodeState::Draining)
    );
    agent.kill();

    let agent = host.agent(&[]);
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    assert_eq!(
        host.count("drain"),
        2,
        "the drain is repeated after a restart"
    );
    agent.kill();
    host.reboot_host("boot-2");
    let _agent = host.agent(&[]);
    host.wait_for("finished", |r| {
        r.state == NodeState::Idle && r.slot.is_none()
    })
    .await;
    assert_eq!(host.count("reboot"), 1);
    assert_eq!(host.count("uncordon"), 1);
}

#[tokio::test]
async fn an_agent_killed_during_verification_finishes_after_restart() {
    let host = Host::new();
    let log = host.path("actions.log");
    let slow_health = format!("echo health >> {}; sleep 60", log.display());
    let agent = host.agent(&[]);
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    agent.kill();
    host.reboot_host("boot-2");
    let agent = host.agent(&["--health-command", &slow_health]);
    host.wait_for("verifying", |r| r.state == NodeState::Verifying)
        .await;
    host.wait_until("the health check", || host.count("health") == 1)
        .await;
    agent.kill();
    let _agent = host.agent(&[]);
    host.wait_for("finished", |r| {
        r.state == NodeState::Idle && r.slot.is_none()
    })
    .await;
    assert_eq!(
        host.count("reboot"),
        1,
        "exactly one reboot for one request"
    );
    assert_eq!(host.count("uncordon"), 1);
}

#[tokio::test]
async fn a_failing_reboot_command_fails_closed_at_once() {
    let host = Host::new();
    let _agent = host.agent(&["--reboot-command", "echo no >&2; exit 7"]);
    host.wait_for("registered", |_| true).await;
    touch(&host.root("run/reboot-needed"));
    let record = host
        .wait_for("failed", |r| r.state == NodeState::Failed)
        .await;
    assert_eq!(record.slot, Some(0));
    assert!(
        record
            .last_result
            .as_deref()
            .is_some_and(|r| r.contains("exit status: 7")),
        "{record:?}"
    );
}

#[tokio::test]
async fn a_second_agent_for_the_same_node_supersedes_the_first() {
    let host = Host::new();
    // An idle agent learns of its successor at its next renewal: a third of its idle TTL.
    let first = host.agent(&["--idle-session-ttl", "3s"]);
    host.wait_for("registered", |_| true).await;
    let _second = host.agent(&["--session-ttl", "3s"]);
    let mut first = first;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = first.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(start.elapsed() < PATIENCE, "the first agent never stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "a superseded agent exits with an error");
    let mut stderr = String::new();
    use std::io::Read;
    if let Some(mut pipe) = first.child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("stderr");
    }
    assert!(
        stderr.contains("another agent took over node node-a"),
        "{stderr}"
    );
}

/// An agent that could not renew its session for longer than `--session-ttl` (frozen here; a
/// store out of reach, a suspended VM) finds its session expired. Nobody took the node over,
/// so it opens a new session and carries on, as a restart would, instead of exiting.
#[tokio::test]
async fn an_agent_whose_session_expired_while_it_was_frozen_carries_on() {
    let host = Host::new();
    // Idle, as here, its session runs for the idle TTL.
    let mut agent = host.agent(&["--session-ttl", "1s", "--idle-session-ttl", "1s"]);
    host.wait_for("registered", |_| true).await;
    agent.signal("STOP");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    agent.signal("CONT");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        agent.child.try_wait().expect("try_wait").is_none(),
        "the agent exited after its session expired"
    );

    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    agent.child.kill().expect("kill -9");
    let stderr = agent.output().stderr;
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(
        stderr.contains("the session expired") && !stderr.contains("another agent took over"),
        "{stderr}"
    );
    host.reboot_host("boot-2");
    let _agent = host.agent(&["--session-ttl", "1s"]);
    host.wait_for("finished", |r| {
        r.state == NodeState::Idle && r.last_result.as_deref() == Some("finished")
    })
    .await;
    assert_eq!(host.log(), ["drain", "reboot", "health", "uncordon"]);
}

#[test]
fn bad_input_is_refused_with_one_clear_line() {
    let host = Host::new();
    let store = host.store_url();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--node".into(), "bad name!".into()], "bad name!"),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--drain-timeout".into(),
                "forever".into(),
            ],
            "forever",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--concurrency".into(),
                "0".into(),
            ],
            "0",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--backoff-exponent".into(),
                "fast".into(),
            ],
            "fast",
        ),
        (
            vec!["--node".into(), "n".into(), "--drain-force".into()],
            "--drain-force needs --node-actions kube",
        ),
        (
            vec!["--node".into(), "n".into(), "--health-pdbs".into()],
            "--health-pdbs needs --node-actions kube",
        ),
        (
            vec!["--node".into(), "n".into(), "--annotate-nodes".into()],
            "--annotate-nodes needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--cordon-label".into(),
                "kured=rebooting".into(),
            ],
            "--cordon-label needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--cordon-label".into(),
                "ok=1,bad key=x".into(),
            ],
            "invalid node label \"bad key=x\"",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--node-actions".into(),
                "kube".into(),
                "--uncordon-label".into(),
                "kured=done".into(),
                "--uncordon-label".into(),
                "kured=ready".into(),
            ],
            "--uncordon-label gives the label kured twice",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--prefer-no-schedule-taint".into(),
                "rota.dev/pending".into(),
            ],
            "--prefer-no-schedule-taint needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--reboot-sentinel-command".into(),
                " ".into(),
            ],
            "the command is empty",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--drain-skip-wait-for-delete-timeout".into(),
                "5m".into(),
            ],
            "--drain-skip-wait-for-delete-timeout needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--drain-pod-selector".into(),
                "app=web".into(),
            ],
            "--drain-pod-selector needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--node-actions".into(),
                "kube".into(),
                "--drain-pod-selector".into(),
                "tier in (web".into(),
            ],
            "--drain-pod-selector \"tier in (web\": unbalanced parentheses",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--drain-wait-completed-selector".into(),
                "app=ci-runner".into(),
            ],
            "--drain-wait-completed-selector needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--drain-wait-completed-timeout".into(),
                "3h".into(),
            ],
            "--drain-wait-completed-timeout needs --node-actions kube",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--node-actions".into(),
                "kube".into(),
                "--drain-wait-completed-selector".into(),
                "app in (ci".into(),
            ],
            "invalid value 'app in (ci' for '--drain-wait-completed-selector <SELECTOR>': \
             unbalanced parentheses; expected a label selector such as `app=ci-runner`",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--node-actions".into(),
                "kube".into(),
                "--drain-wait-completed-timeout".into(),
                "0s".into(),
            ],
            "invalid value '0s' for '--drain-wait-completed-timeout <DURATION>'",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--prefer-no-schedule-taint".into(),
                "Rota.dev/pending".into(),
            ],
            "invalid taint key \"Rota.dev/pending\"",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--release-delay".into(),
                "a while".into(),
            ],
            "a while",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--reboot-method".into(),
                "kexec".into(),
            ],
            "invalid value 'kexec' for '--reboot-method <METHOD>'",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--drain-delay".into(),
                "soon".into(),
            ],
            "invalid value 'soon' for '--drain-delay <DURATION>'",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--reboot-delay".into(),
                "5 fortnights".into(),
            ],
            "invalid value '5 fortnights' for '--reboot-delay <DURATION>'",
        ),
        (
            vec![
                "--node".into(),
                "n".into(),
                "--host-root".into(),
                host.path("missing").display().to_string(),
            ],
            "missing",
        ),
    ];
    for (args, named) in cases {
        let output = Command::new(ROTA)
            .arg("agent")
            .args(["--store", &store])
            .args(&args)
            .output()
            .expect("run");
        assert_refused(&output, &args, named);
    }

    // A regular file where the sentinel directory should be.
    std::fs::remove_dir_all(host.root("run")).expect("rm");
    touch(&host.root("run"));
    let output = Command::new(ROTA)
        .args(["agent", "--store", &store, "--node", "n"])
        .arg("--host-root")
        .arg(host.path("root"))
        .arg("--boot-id-file")
        .arg(host.path("boot_id"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("not a directory"), "{stderr}");
}

#[tokio::test]
async fn a_paused_fleet_takes_no_slot_until_resumed() {
    let host = Host::new();
    host.store().await;
    let said = host.rota_ok(&["pause", "--reason", "kernel CVE triage"]);
    assert!(said.contains("fleet paused since"), "{said}");
    let _agent = host.agent(&[]);
    touch(&host.root("run/reboot-needed"));
    host.wait_for("queued", |r| r.state == NodeState::Queued)
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let record = host.record().await.expect("record");
    assert_eq!(record.state, NodeState::Queued, "paused: {record:?}");
    assert_eq!(record.slot, None);
    assert_eq!(host.count("drain"), 0);
    let status = host.rota_ok(&["status"]);
    assert!(
        status.contains("PAUSED since") && status.contains("kernel CVE triage"),
        "{status}"
    );
    let said = host.rota_ok(&["resume"]);
    assert!(said.contains("fleet resumed"), "{said}");
    host.wait_until("the reboot", || host.count("reboot") == 1)
        .await;
    assert_eq!(host.rota_ok(&["resume"]), "the fleet was not paused\n");
}

#[tokio::test]
async fn log_format_json_writes_one_json_object_per_line() {
    use std::io::{BufRead, Read};

    let host = Host::new();
    let mut agent = host.agent(&["--log-format", "json"]);
    let mut stderr = std::io::BufReader::new(agent.child.stderr.take().expect("piped stderr"));
    // Stopped once it said it started: a SIGTERM right after its session is written, before
    // the session's opening returned, ends the agent before that line (a clean stop, but no
    // line to check).
    let mut text = String::new();
    while !text.contains("agent started") {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).expect("read stderr");
        assert!(read > 0, "the agent ended before it started: {text}");
        text.push_str(&line);
    }
    assert!(agent.terminate().success(), "SIGTERM is a clean shutdown");
    stderr.read_to_string(&mut text).expect("read stderr");

    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    let started = lines
        .iter()
        .find(|l| l["message"] == "agent started")
        .unwrap_or_else(|| panic!("no start line in {text}"));
    assert_eq!(started["level"], "INFO");
    assert_eq!(started["node"], "node-a");
    assert_eq!(started["boot_id"], "boot-1");
    assert!(started["timestamp"].is_string(), "{started}");
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "SIGTERM: shutting down"),
        "{text}"
    );
}

#[tokio::test]
async fn status_watch_shows_the_rollout_live() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let host = Host::new();
    let store = host.store().await;
    take_the_only_slot(&store, &host.node, "/run/reboot-needed").await;
    let mut watch = Command::new(ROTA)
        .args([
            "status",
            "--watch",
            "--interval",
            "100ms",
            "--store",
            &host.store_url(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("rota status --watch");
    let stdout = watch.stdout.take().expect("piped stdout");
    let mut frames = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        if line.starts_with("rollout:") {
            assert_eq!(
                line,
                "rollout: 0 of 1 nodes done, ETA unknown (no finished window in history yet)"
            );
            frames += 1;
            if frames == 2 {
                break;
            }
        }
    }
    assert_eq!(frames, 2, "it refreshes");
    watch.kill().expect("stop the watch");
    watch.wait().expect("reap");
}

#[tokio::test]
async fn an_operator_request_reboots_the_node_and_a_cancel_withdraws_it() {
    let host = Host::new();
    let _agent = host.agent(&[]);
    host.wait_for("registered", |_| true).await;
    let refused = host.rota(&["request", "node-a"]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "a request names what it asks for"
    );
    let refused = host.rota(&["request", "node-a", "--procedure", "Bad_Name"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Bad_Name"));
    let said = host.rota(&["request", "node-a", "--reboot"]);
    assert!(said.status.success(), "{said:?}");
    assert!(String::from_utf8_lossy(&said.stdout).contains("requested reboot on node-a"));
    host.wait_for("rebooting", |r| r.state == NodeState::Rebooting)
        .await;
    let said = host.rota(&["cancel", "node-a", "--reboot"]);
    assert!(
        String::from_utf8_lossy(&said.stdout).contains("no pending reboot request"),
        "work in a window is not canceled: {said:?}"
    );
}

//! `rota agent` killed after every write it persists in a reboot window and a procedure's window:
//! the crash points of the tests' build (`ROTA_CRASH_AT`, see
//! `crates/rota-agent/src/crash_points.rs`) abort the process right there, as a SIGKILL would.
//! A restarted agent must finish the window with exactly one reboot of the machine (or one run
//! of the procedure's script), leave the node idle, uncordoned and released, and record one
//! `finished`, whatever write the kill came after.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::{Agent, Host};
use rota_core::{HistoryEvent, NodeState, Process};
use rota_e2e::host::touch;

/// The signal `std::process::abort` raises.
const SIGABRT: i32 = 6;

/// Where the killed agent was in its window: before the machine rebooted, or after.
#[derive(Clone, Copy, PartialEq)]
enum Boot {
    First,
    Second,
}

/// The host's reboot marker, under the agent's default `--state-dir`.
fn reboot_marker(host: &Host) -> std::path::PathBuf {
    host.root("var/lib/rota/reboot-started")
}

/// The reboot command: it logs `reboot` with the node's actions, and the boot it ran on.
fn reboot_command(host: &Host) -> String {
    format!(
        "echo reboot >> {log}; cat {boot} >> {boots}",
        log = host.path("actions.log").display(),
        boot = host.path("boot_id").display(),
        boots = host.path("reboot-boots.log").display(),
    )
}

/// Waits for `agent`, armed at `point`, to abort there.
fn assert_aborts(agent: Agent, point: &str) {
    let output = agent.output();
    assert_eq!(
        output.status.signal(),
        Some(SIGABRT),
        "the agent armed at {point} did not abort there: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits until the reboot command has run to its end on this boot (the agent's marker says
/// so), then does what the machine does: the agent dies and the host comes back on `boot-2`.
async fn reboot_once_commanded(host: &Host, agent: Agent) {
    host.wait_until("the reboot command", || {
        host.count("reboot") >= 1 && reboot_marker(host).exists()
    })
    .await;
    agent.kill();
    host.reboot_host("boot-2");
}

/// One window with the agent killed at `point`, reached on `boot`; `commands` is how often the
/// reboot command must have run (twice only where the kill came between its start and the
/// marker that says it ran).
async fn killed_at(point: &str, boot: Boot, commands: usize) {
    let host = Host::new();
    let reboot = reboot_command(&host);
    let flags = ["--reboot-command", reboot.as_str()];
    let armed = [("ROTA_CRASH_AT", point)];
    touch(&host.root("run/reboot-needed"));

    let agent = host.agent_with_env(&flags, &armed);
    let agent = match boot {
        Boot::First => {
            assert_aborts(agent, point);
            let agent = host.agent(&flags);
            reboot_once_commanded(&host, agent).await;
            host.agent(&flags)
        }
        Boot::Second => {
            reboot_once_commanded(&host, agent).await;
            assert_aborts(host.agent_with_env(&flags, &armed), point);
            host.agent(&flags)
        }
    };
    let record = host
        .wait_for("idle with its window finished", |r| {
            r.state == NodeState::Idle && r.slot.is_none()
        })
        .await;
    assert_eq!(
        record.last_result.as_deref(),
        Some("finished"),
        "{record:?}"
    );
    assert!(!record.cordoned_by_rota, "left cordoned: {record:?}");
    assert_eq!(
        host.log().last().map(String::as_str),
        Some("uncordon"),
        "the window ends uncordoned"
    );
    assert_eq!(
        host.history().await,
        [
            (Process::Reboot, HistoryEvent::Started),
            (Process::Reboot, HistoryEvent::Finished)
        ],
        "one window, finished once"
    );
    let boots = std::fs::read_to_string(host.path("reboot-boots.log")).expect("reboot boots");
    assert_eq!(
        boots.lines().collect::<Vec<_>>(),
        vec!["boot-1"; commands],
        "the reboot command runs only on the boot it is to end"
    );
    // Still up, and still idle a moment later: nothing repeats.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(host.record().await.map(|r| r.state), Some(NodeState::Idle));
    assert_eq!(host.count("reboot"), commands);
    agent.kill();
}

#[tokio::test]
async fn killed_after_queueing() {
    killed_at("after-write:idle->queued", Boot::First, 1).await;
}

#[tokio::test]
async fn killed_after_taking_the_slot() {
    killed_at("after-write:queued->draining", Boot::First, 1).await;
}

#[tokio::test]
async fn killed_after_the_drain() {
    killed_at("after-write:draining->maintaining", Boot::First, 1).await;
}

#[tokio::test]
async fn killed_after_recording_the_reboot() {
    killed_at("after-write:maintaining->rebooting", Boot::First, 1).await;
}

/// The hole the fault-injection campaign found: the reboot recorded, the command not yet
/// started. A marker written before the command made the restarted agent wait out
/// `--reboot-timeout` for a reboot that never happened.
#[tokio::test]
async fn killed_right_before_the_reboot_command() {
    killed_at("before-reboot-command", Boot::First, 1).await;
}

#[tokio::test]
async fn killed_after_the_reboot_command_before_its_marker() {
    killed_at("after-reboot-command", Boot::First, 2).await;
}

#[tokio::test]
async fn killed_after_the_reboot_marker() {
    killed_at("after-reboot-marker", Boot::First, 1).await;
}

#[tokio::test]
async fn killed_after_the_new_boot_is_recorded() {
    killed_at("after-write:rebooting->verifying", Boot::Second, 1).await;
}

#[tokio::test]
async fn killed_after_the_release() {
    killed_at("after-write:verifying->idle", Boot::Second, 1).await;
}

/// One procedure's window with the agent killed at `point`: the script, which outlives the
/// agent that started it, runs exactly once, and the window finishes.
async fn procedure_killed_at(point: &str) {
    let host = Host::new();
    let ran = host.path("ran.log");
    let script = host.path("patch.sh");
    std::fs::write(
        &script,
        format!("echo ran >> {}; sleep 0.3\n", ran.display()),
    )
    .expect("the script");
    let script = script.display().to_string();
    // The fleet's store exists before an operator submits to it.
    host.store().await;
    host.rota_ok(&["mop", "submit", "--name", "patch", "--script", &script]);
    let flags = ["--procedure-poll", "100ms"];
    assert_aborts(
        host.agent_with_env(&flags, &[("ROTA_CRASH_AT", point)]),
        point,
    );
    let agent = host.agent(&flags);
    let record = host
        .wait_for("idle with its window finished", |r| {
            r.state == NodeState::Idle && r.slot.is_none() && r.last_result.is_some()
        })
        .await;
    assert_eq!(
        record.last_result.as_deref(),
        Some("finished"),
        "{record:?}"
    );
    assert!(!record.cordoned_by_rota, "left cordoned: {record:?}");
    let patch = Process::Mop("patch".to_owned());
    assert_eq!(
        host.history().await,
        [
            (patch.clone(), HistoryEvent::Started),
            (patch.clone(), HistoryEvent::Finished),
            (patch, HistoryEvent::Released)
        ],
        "one window, its procedure finished once and its slot released once"
    );
    let runs = std::fs::read_to_string(&ran).expect("the script ran");
    assert_eq!(runs.lines().count(), 1, "the script runs exactly once");
    assert_eq!(host.count("reboot"), 0);
    agent.kill();
}

#[tokio::test]
async fn a_procedure_killed_after_taking_the_slot() {
    procedure_killed_at("after-write:queued->draining").await;
}

#[tokio::test]
async fn a_procedure_killed_after_the_drain() {
    procedure_killed_at("after-write:draining->maintaining").await;
}

#[tokio::test]
async fn a_procedure_killed_after_its_script_started() {
    procedure_killed_at("after-procedure-start").await;
}

#[tokio::test]
async fn a_procedure_killed_after_its_end_was_recorded() {
    procedure_killed_at("after-procedure-recorded").await;
}

#[tokio::test]
async fn a_procedure_killed_after_its_window_was_verified() {
    procedure_killed_at("after-write:maintaining->verifying").await;
}

#[tokio::test]
async fn a_procedure_killed_after_the_release() {
    procedure_killed_at("after-write:verifying->idle").await;
}

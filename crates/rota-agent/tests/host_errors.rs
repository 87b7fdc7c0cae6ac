//! Agents that cannot read or write the host's files, in-process on a real SQLite store and real
//! filesystems: a host root without `var/`, a read-only state directory and a full one (small
//! tmpfs mounts, which need root, as the tests run). The window fails closed with the cause in
//! history, `/readyz` hears the cause, and the agent stays up; a reboot whose marker cannot be
//! written still happens once.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::host::{Host, RunningAgent};
use rota_agent::AgentConfig;
use rota_core::{HistoryEvent, NodeState, ProcedureSpec, Process};
use rota_e2e::host::touch;
use rota_observer::AgentObserver;

/// A tmpfs mounted over a directory for one test, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs with `options` (`ro`, `size=…`) at `path`, created first.
    fn mount(path: &Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(path).expect("the mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "rota-test"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs -o {options} at {} (the tests run as root)",
            path.display()
        );
        Tmpfs {
            path: path.to_owned(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// What the agent told about its accesses to the host's files, in order.
#[derive(Default)]
struct HostErrors(Mutex<Vec<Option<String>>>);

impl HostErrors {
    fn told(&self) -> Vec<Option<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl AgentObserver for HostErrors {
    fn host_error(&self, cause: Option<&str>) {
        let mut told = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if told.last().map(Option::as_deref) != Some(cause) {
            told.push(cause.map(str::to_owned));
        }
    }
}

/// The agent's state directory under its default `--state-dir`.
fn state_dir(host: &Host) -> PathBuf {
    host.root("var/lib/rota")
}

/// Submits a procedure, starts an agent that looks for it often, and waits until its window
/// failed: the node `failed`, with its slot and the cause in history. Returns the cause, the
/// agent (still running) and what it told its observer.
async fn procedure_fails(
    host: &Host,
    configure: impl FnOnce(&mut AgentConfig),
) -> (String, RunningAgent, Arc<HostErrors>) {
    let log = host.path("scripts.log");
    let spec = ProcedureSpec::new("patch", format!("echo ran >> {}", log.display()));
    host.submit(&spec).await;
    let errors = Arc::new(HostErrors::default());
    let agent = host
        .agent_observed(
            |c| {
                c.procedure_poll = std::time::Duration::from_millis(100);
                configure(c);
            },
            Some(errors.clone()),
        )
        .await;
    let record = host
        .wait_for("failed", |r| r.state == NodeState::Failed)
        .await;
    assert!(record.slot.is_some(), "fails closed: {record:?}");
    assert!(record.cordoned_by_rota, "fails closed: {record:?}");
    let failed = host.entries(HistoryEvent::Failed).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        failed[0].process,
        Process::Mop("patch".parse().expect("a name"))
    );
    let cause = failed[0].cause.clone().expect("a cause");
    assert!(!log.exists(), "the script never ran");
    (cause, agent, errors)
}

/// The agent is still up (its stop is the graceful one) and told its observer `cause`.
async fn still_up(agent: RunningAgent, errors: &HostErrors, cause: &str) {
    assert!(
        errors.told().iter().any(|c| c.as_deref() == Some(cause)),
        "{:?}",
        errors.told()
    );
    agent
        .stop()
        .await
        .expect("the agent stayed up and stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_root_without_var_fails_the_procedures_window_and_the_agent_stays_up() {
    let host = Host::new().await;
    std::fs::remove_dir_all(host.root("var")).expect("remove var/");
    // Its own state elsewhere, as `--state-dir` may put it: nothing creates `var/` on the way.
    let (cause, agent, errors) =
        procedure_fails(&host, |c| c.state_dir = "/rota-state".into()).await;
    assert!(cause.contains("var/"), "{cause}");
    assert!(cause.contains("No such file or directory"), "{cause}");
    still_up(agent, &errors, &cause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_state_directory_fails_the_procedures_window_and_the_agent_stays_up() {
    let host = Host::new().await;
    let _state = Tmpfs::mount(&state_dir(&host), "ro");
    let (cause, agent, errors) = procedure_fails(&host, |_| {}).await;
    assert!(cause.contains("Read-only file system"), "{cause}");
    still_up(agent, &errors, &cause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_directory_fails_the_procedures_window_and_the_agent_stays_up() {
    let host = Host::new().await;
    let state = state_dir(&host);
    let _state = Tmpfs::mount(&state, "size=64k");
    // Fill it: the write that fails is the last one, which the filesystem refuses.
    let filler = std::fs::write(state.join("filler"), vec![0u8; 128 * 1024]);
    assert!(filler.is_err(), "the tmpfs took more than its size");
    let (cause, agent, errors) = procedure_fails(&host, |_| {}).await;
    assert!(cause.contains("No space left on device"), "{cause}");
    still_up(agent, &errors, &cause).await;
}

/// The reboot marker only spares a restarted agent a second run of the reboot command: one
/// that cannot be written (a read-only state directory) does not stop the reboot or the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_marker_that_cannot_be_written_does_not_stop_the_reboot() {
    let host = Host::new().await;
    let _state = Tmpfs::mount(&state_dir(&host), "ro");
    let agent = host.agent().await;
    touch(&host.root("run/reboot-needed"));
    host.wait_until("the reboot command", || host.count("reboot") == 1)
        .await;
    host.wait_for("rebooting", |r| r.state == NodeState::Rebooting)
        .await;
    agent.stop().await.expect("the agent stays up");
    host.reboot_host("boot-2");
    let _agent = host.agent().await;
    let record = host
        .wait_for("idle after the reboot", |r| {
            r.state == NodeState::Idle && r.last_result.as_deref() == Some("finished")
        })
        .await;
    assert_eq!(record.slot, None);
    assert_eq!(host.count("reboot"), 1);
}

/// The stale procedure markers an agent removes at start cannot be read (here the marker
/// directory is a file): the agent starts anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_that_cannot_be_read_at_start_do_not_stop_the_agent() {
    let host = Host::new().await;
    touch(&host.root("markers"));
    let agent = host.agent_with(|c| c.marker_dir = "/markers".into()).await;
    host.wait_for("registered", |r| r.state == NodeState::Idle)
        .await;
    agent
        .stop()
        .await
        .expect("the agent started and stops cleanly");
}

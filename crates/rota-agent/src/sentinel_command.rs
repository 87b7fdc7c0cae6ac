//! kured's `--reboot-sentinel-command`: a command whose success says that the node needs a
//! reboot, for systems that leave no file behind (on RHEL and its kin, `needs-restarting -r`
//! fails when a reboot is needed, hence `! needs-restarting -r`).
//!
//! Its verdict is kept as a file that the agent watches as one more reboot sentinel: created
//! when the command first says "needed", removed when it says "not needed". So the rules of
//! sentinel files hold for it too: a pending request is withdrawn when the verdict is, and a
//! verdict older than the node's last reboot was answered by that reboot and asks for nothing,
//! so a command that still says "needed" after the reboot cannot reboot the node in a loop;
//! only a new "needed" after a "not needed" asks again.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rota_core::NodeName;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The file, under the agent's state directory, that holds the command's "needed".
pub(crate) const VERDICT_FILE: &str = "reboot-required-by-command";

/// The longest a run of the command may take before it counts as no answer.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// A command to run every `interval`; exit status 0 means the node needs a reboot.
#[derive(Clone, Debug)]
pub struct SentinelCommand {
    pub command: String,
    pub interval: Duration,
}

/// Runs `sentinel` every interval until `cancel`, keeping `verdict` (a path this process can
/// reach) in line with its answer. A run that fails to start, or does not finish in time,
/// leaves the verdict as it was.
pub(crate) async fn follow(
    sentinel: SentinelCommand,
    verdict: PathBuf,
    exec_prefix: Vec<String>,
    node: NodeName,
    cancel: CancellationToken,
) {
    loop {
        match ask(&sentinel.command, &exec_prefix, &node).await {
            Ok(needed) => record(&verdict, needed, &node),
            Err(reason) => {
                warn!(node = %node, command = sentinel.command, reason, "the reboot sentinel command gave no answer; keeping its last verdict");
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(sentinel.interval) => {}
        }
    }
}

/// Whether the command says a reboot is needed.
async fn ask(command: &str, exec_prefix: &[String], node: &NodeName) -> Result<bool, String> {
    let mut words = exec_prefix
        .iter()
        .map(String::as_str)
        .chain(["sh", "-c", command]);
    let program = words.next().unwrap_or("sh");
    let mut child = Command::new(program)
        .args(words)
        .env("ROTA_NODE", node.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    match tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await {
        Ok(Ok(status)) => Ok(status.success()),
        Ok(Err(e)) => Err(format!("cannot wait for it: {e}")),
        Err(_) => Err(format!("still running after {COMMAND_TIMEOUT:?}")),
    }
}

fn record(verdict: &Path, needed: bool, node: &NodeName) {
    let present = verdict.exists();
    let written = match (needed, present) {
        (true, false) => verdict
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(verdict, b"")),
        (false, true) => std::fs::remove_file(verdict),
        _ => return,
    };
    match written {
        Ok(()) => info!(node = %node, needed, "the reboot sentinel command changed its verdict"),
        Err(e) => {
            warn!(node = %node, path = %verdict.display(), error = %e, "cannot keep the reboot sentinel command's verdict");
        }
    }
}

//! Shell commands as node actions (`sh -c`), the pieces both a standalone host's
//! [`CommandActions`](crate::CommandActions) and a cluster's node actions run their commands
//! with. Each command sees `ROTA_NODE`; a failure names the command, its exit status and the
//! tail of its stderr.

use std::process::Stdio;

use rota_core::NodeName;
use tokio::process::Command;
use tokio::sync::oneshot;

use crate::actions::RebootHandle;
use crate::error::ActionError;

const OUTPUT_TAIL: usize = 2000;

fn command(script: &str, node: Option<&NodeName>) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(script).stdin(Stdio::null());
    if let Some(node) = node {
        command.env("ROTA_NODE", node.as_str());
    }
    command.kill_on_drop(true);
    command
}

/// The last part of a command's output, for error messages and history causes.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().rev().nth(OUTPUT_TAIL) {
        Some((cut, _)) => format!("…{}", &text[cut..]),
        None => text.to_string(),
    }
}

/// Runs `script` to its end as the node action `action`; an exit other than success is that
/// action's failure.
pub async fn run_command(
    action: &'static str,
    script: &str,
    node: Option<&NodeName>,
) -> Result<(), ActionError> {
    let output = command(script, node)
        .output()
        .await
        .map_err(|e| ActionError {
            action,
            detail: format!("could not start `{script}`: {e}"),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let mut detail = format!("`{script}` exited with {}", output.status);
    let stderr = tail(&output.stderr);
    if !stderr.is_empty() {
        detail.push_str(": ");
        detail.push_str(&stderr);
    }
    Err(ActionError { action, detail })
}

/// Starts the reboot command `script` and returns at once with the handle its exit resolves.
/// Unlike the other commands it is not killed if the agent stops first: a reboot, once
/// started, runs to its end.
pub fn spawn_reboot(script: &str, node: Option<&NodeName>) -> Result<RebootHandle, ActionError> {
    let (done, handle) = oneshot::channel();
    let mut child = command(script, node)
        .kill_on_drop(false)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ActionError {
            action: "reboot",
            detail: format!("could not start `{script}`: {e}"),
        })?;
    let script = script.to_owned();
    tokio::spawn(async move {
        let result = match child.wait().await {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(ActionError {
                action: "reboot",
                detail: format!("`{script}` exited with {status}"),
            }),
            Err(e) => Err(ActionError {
                action: "reboot",
                detail: format!("waiting for `{script}`: {e}"),
            }),
        };
        let _ = done.send(result);
    });
    Ok(handle)
}

//! What an agent does to its node. The agent decides *when*; a [`NodeActions`] decides *how*:
//! shell commands for a standalone host, the Kubernetes API in a cluster, or the simulator's
//! stand-ins in `rota simulate`.

use std::collections::BTreeMap;
use std::process::Stdio;

use async_trait::async_trait;
use rota_core::NodeName;
use tokio::process::Command;
use tokio::sync::oneshot;

use crate::error::ActionError;

/// Resolves when the reboot command exits: `Ok` if it exited successfully. A successful exit
/// does not mean the node rebooted; only a new boot id says that.
pub type RebootHandle = oneshot::Receiver<Result<(), ActionError>>;

#[async_trait]
pub trait NodeActions: Send + Sync {
    /// Whether someone already cordoned the node (rota then leaves the cordon in place).
    async fn is_cordoned(&self) -> Result<bool, ActionError>;
    /// Cordons the node and evicts its workloads. Must be idempotent: it is repeated after a
    /// restart in the middle of a drain.
    async fn drain(&self) -> Result<(), ActionError>;
    async fn uncordon(&self) -> Result<(), ActionError>;
    /// Starts the reboot as a child process and returns at once; the agent stays alive.
    async fn reboot(&self) -> Result<RebootHandle, ActionError>;
    async fn health(&self) -> Result<(), ActionError>;
    /// The node's labels as its platform knows them (a Kubernetes Node's), for procedures'
    /// node selectors; a standalone host has none beyond its configuration.
    async fn labels(&self) -> Result<BTreeMap<String, String>, ActionError> {
        Ok(BTreeMap::new())
    }
    /// Marks the node as waiting for maintenance (`pending`), or not, so that new workloads
    /// prefer other nodes and are not moved twice (in Kubernetes, a `PreferNoSchedule` taint);
    /// idempotent. Where nothing schedules onto the node there is nothing to mark.
    async fn mark_pending(&self, _pending: bool) -> Result<(), ActionError> {
        Ok(())
    }
}

/// Node actions as shell commands (`sh -c`), for standalone hosts. A missing command is a
/// step that has nothing to do on this host and succeeds. Each command sees `ROTA_NODE`.
#[derive(Clone, Debug, Default)]
pub struct CommandActions {
    pub node: Option<NodeName>,
    pub drain: Option<String>,
    pub uncordon: Option<String>,
    pub reboot: Option<String>,
    pub health: Option<String>,
}

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

async fn run(
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

#[async_trait]
impl NodeActions for CommandActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        match &self.drain {
            Some(script) => run("drain", script, self.node.as_ref()).await,
            None => Ok(()),
        }
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        match &self.uncordon {
            Some(script) => run("uncordon", script, self.node.as_ref()).await,
            None => Ok(()),
        }
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        let (done, handle) = oneshot::channel();
        let Some(script) = self.reboot.clone() else {
            let _ = done.send(Err(ActionError {
                action: "reboot",
                detail: "no reboot command is configured".into(),
            }));
            return Ok(handle);
        };
        let mut child = command(&script, self.node.as_ref())
            .kill_on_drop(false)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ActionError {
                action: "reboot",
                detail: format!("could not start `{script}`: {e}"),
            })?;
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

    async fn health(&self) -> Result<(), ActionError> {
        match &self.health {
            Some(script) => run("health check", script, self.node.as_ref()).await,
            None => Ok(()),
        }
    }
}

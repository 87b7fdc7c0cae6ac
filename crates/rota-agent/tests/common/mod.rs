//! What the agent's integration tests share.

pub mod host;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use rota_actions::{ActionError, NodeActions, RebootHandle};
use rota_agent::AgentConfig;
use rota_core::NodeName;
use rota_observer::{AgentObserver, StoreWrite};
use rota_store::Result;

/// An agent's configuration for `node` on a host under `dir`: `dir/host` as the host root,
/// with a `/run` and the boot id `boot-1`.
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub fn host_config(dir: &std::path::Path, node: &NodeName) -> AgentConfig {
    let root = dir.join("host");
    std::fs::create_dir_all(root.join("run")).expect("/run");
    std::fs::write(root.join("boot_id"), "boot-1\n").expect("a boot id");
    let mut config = AgentConfig::new(node.clone());
    config.boot_id_file = root.join("boot_id");
    config.host_root = root;
    config
}

/// Node actions for agents that never get as far as a reboot: they count the cordon reads.
#[allow(dead_code, reason = "not every test binary uses every helper")]
#[derive(Default)]
pub struct CountingActions {
    pub cordon_reads: AtomicUsize,
}

#[async_trait]
impl NodeActions for CountingActions {
    async fn is_cordoned(&self) -> Result<bool, ActionError> {
        self.cordon_reads.fetch_add(1, Ordering::SeqCst);
        Ok(false)
    }

    async fn drain(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn uncordon(&self) -> Result<(), ActionError> {
        Ok(())
    }

    async fn reboot(&self) -> Result<RebootHandle, ActionError> {
        Err(ActionError {
            action: "reboot",
            detail: "not in this test".into(),
        })
    }

    async fn health(&self) -> Result<(), ActionError> {
        Ok(())
    }
}

/// Remembers every write the agent sends to the store (`fence`, `transition a->b`,
/// `fenced_transition a->b`), in order, through the agent's observer hook.
#[allow(dead_code, reason = "not every test binary uses every helper")]
#[derive(Default)]
pub struct WriteLog {
    writes: Mutex<Vec<String>>,
}

#[allow(dead_code, reason = "not every test binary uses every helper")]
impl WriteLog {
    pub fn writes(&self) -> Vec<String> {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl AgentObserver for WriteLog {
    fn store_write(&self, write: StoreWrite) {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(write.to_string());
    }
}

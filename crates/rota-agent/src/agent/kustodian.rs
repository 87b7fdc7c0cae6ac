//! kustodian's file protocol: the maintenance sentinel, the in-progress marker, and the
//! script that signals it is done by removing it.

use tracing::info;

use super::{Agent, Running};
use crate::error::{Error, Result};

impl Agent {
    /// Whether kustodian's maintenance is about to start: its host script asked for it and
    /// `/var/maintenance-in-progress` is not announced yet (once it is, the script runs and is
    /// left to finish).
    pub(super) fn kustodian_starting(&self, running: &Running) -> bool {
        let required = self.config.host_path(&self.config.maintenance_required);
        let in_progress = self.config.host_path(&self.config.maintenance_in_progress);
        let pending = running
            .sentinels
            .borrow()
            .get(&required)
            .is_some_and(|s| s.present.is_some());
        pending && !in_progress.exists()
    }

    /// kustodian's protocol: announce `/var/maintenance-in-progress` once drained, and consider
    /// the maintenance done when the host script has removed `/var/maintenance-required`.
    pub(super) async fn kustodian_done(&self, running: &Running) -> Result<bool> {
        let in_progress = self.config.host_path(&self.config.maintenance_in_progress);
        let required = self.config.host_path(&self.config.maintenance_required);
        let pending = running
            .sentinels
            .borrow()
            .get(&required)
            .is_some_and(|s| s.present.is_some());
        if pending {
            if !in_progress.exists() {
                self.prove_slot(running).await?;
                std::fs::write(&in_progress, b"").map_err(|source| Error::HostFile {
                    what: "creating",
                    path: in_progress.clone(),
                    source,
                })?;
                info!(node = %self.config.node, path = %in_progress.display(), "maintenance in progress");
            }
            return Ok(false);
        }
        match std::fs::remove_file(&in_progress) {
            Ok(()) => info!(node = %self.config.node, "maintenance done"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::HostFile {
                    what: "removing",
                    path: in_progress,
                    source,
                });
            }
        }
        Ok(true)
    }
}

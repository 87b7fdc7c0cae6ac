//! The host's own record that this boot's reboot command ran to its end: `<state-dir>/reboot-started`,
//! holding the boot id and the reboot's start as the store recorded it.
//!
//! The store records `rebooting` before the command starts, so that only a new boot id can
//! prove a reboot. An agent that stops between that write and the command's end (killed, or
//! its store call failed after the write had landed) finds `rebooting` with the old boot id
//! when it starts again, and must tell "the command ran, the machine is going down" from "the
//! command never ran", or it waits the whole reboot timeout for a reboot nobody started and
//! then fails closed holding its slot. The marker is written (and synced) only once the
//! command has exited successfully: without it, the agent runs the command again. Running a
//! reboot command twice in one boot is harmless; not running it at all is not.

use std::io::Write;
use std::path::{Path, PathBuf};

use rota_store::Millis;

use crate::error::{Error, Result};

const FILE: &str = "reboot-started";

pub struct RebootMarker {
    path: PathBuf,
}

impl RebootMarker {
    /// The marker under the agent's state directory (as reachable from this process).
    pub fn new(state_dir: &Path) -> RebootMarker {
        RebootMarker {
            path: state_dir.join(FILE),
        }
    }

    fn line(boot_id: &str, started_at: Millis) -> String {
        format!("{boot_id} {started_at}\n")
    }

    /// Records, durably, that the command of the reboot the store recorded at `started_at` ran
    /// to its end on boot `boot_id`.
    pub fn record(&self, boot_id: &str, started_at: Millis) -> Result<()> {
        let error = |what| {
            let path = self.path.clone();
            move |source| Error::HostFile { what, path, source }
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(error("creating the directory of"))?;
        }
        let mut file = std::fs::File::create(&self.path).map_err(error("creating"))?;
        file.write_all(Self::line(boot_id, started_at).as_bytes())
            .map_err(error("writing"))?;
        file.sync_all().map_err(error("syncing"))
    }

    /// Whether the command of the reboot the store recorded at `started_at` ran to its end on
    /// boot `boot_id`. No marker, or one naming another reboot (or torn by a crash while it
    /// was written), means it may not have: the marker is synced only after the command ended.
    pub fn started(&self, boot_id: &str, started_at: Millis) -> Result<bool> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(text == Self::line(boot_id, started_at)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(Error::HostFile {
                what: "reading",
                path: self.path.clone(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_names_one_reboot_of_one_boot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = RebootMarker::new(&dir.path().join("state"));
        assert!(!marker.started("boot-1", 1000).expect("read"), "no marker");
        marker.record("boot-1", 1000).expect("record");
        assert!(marker.started("boot-1", 1000).expect("read"));
        assert!(
            !marker.started("boot-1", 2000).expect("read"),
            "a later reboot"
        );
        assert!(
            !marker.started("boot-2", 1000).expect("read"),
            "another boot"
        );
    }
}

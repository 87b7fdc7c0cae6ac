//! The host's own record that its node is in its maintenance window: `<state-dir>/in-window`,
//! present while the node holds a slot (from the slot's grant until its release, through the
//! drain, the maintenance, the reboot and the verification, and while it failed closed).
//!
//! It tells a starting agent, before it asks its store anything, whether the node is coming
//! back in the middle of its window (above all after its own reboot): such an agent starts at
//! once, while every other start waits a random part of `--start-jitter` so that a fleet
//! started together spreads its first requests. The agent keeps it as its store says: written
//! once a pass of its loop finds the node holding a slot, removed once one finds it without one. It is
//! a hint, never proof: a marker lost (an unwritable state directory, a crash between the
//! slot's write and the marker's) costs a node in its window one jittered start, and a marker
//! left behind costs one start without the delay.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const FILE: &str = "in-window";

pub struct WindowMarker {
    path: PathBuf,
}

impl WindowMarker {
    /// The marker under the agent's state directory (as reachable from this process).
    pub fn new(state_dir: &Path) -> WindowMarker {
        WindowMarker {
            path: state_dir.join(FILE),
        }
    }

    /// Where the marker is, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the host records its node in its window. A marker that cannot be looked at
    /// counts as present: of the two mistakes, a start without the delay is the cheap one.
    pub fn present(&self) -> bool {
        self.path.try_exists().unwrap_or(true)
    }

    /// Records whether the node holds a slot.
    pub(crate) fn set(&self, in_window: bool) -> Result<()> {
        let error = |what| {
            let path = self.path.clone();
            move |source| Error::HostFile { what, path, source }
        };
        if in_window {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir).map_err(error("creating the directory of"))?;
            }
            std::fs::write(&self.path, b"").map_err(error("creating"))
        } else {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(error("removing")(e)),
                _ => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_follows_the_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = WindowMarker::new(&dir.path().join("state"));
        assert!(!marker.present(), "no state directory yet");
        marker.set(false).expect("nothing to remove");
        marker.set(true).expect("record");
        assert!(marker.present());
        marker.set(true).expect("again");
        marker.set(false).expect("remove");
        assert!(!marker.present());
    }
}

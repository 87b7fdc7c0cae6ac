//! One node's machine: its boot, the cordon on its Node, the reboot sentinel, the reboot
//! marker, and a reboot on its way.

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Host {
    /// The boot id, counting boots: the model starts in boot 0.
    pub boot: u8,
    /// The reboot sentinel (kured's `/var/run/reboot-required`): there from the start; on a
    /// tmpfs, so a reboot removes it.
    pub sentinel: bool,
    /// The Node is cordoned. The Node object keeps it across agent restarts and reboots.
    pub cordoned: bool,
    /// The boot that the reboot marker names (`<state-dir>/reboot-started`,
    /// crates/rota-agent/src/reboot_marker.rs). The state directory is on disk, so the marker
    /// outlives a reboot, but it then names another boot, which reads as no marker.
    pub marker: Option<u8>,
    /// A reboot command has done its work in this boot: the machine is going down.
    pub reboot_due: bool,
}

impl Host {
    pub fn new() -> Host {
        Host {
            boot: 0,
            sentinel: true,
            cordoned: false,
            marker: None,
            reboot_due: false,
        }
    }

    /// The boot id as the agent reads it (`/proc/sys/kernel/random/boot_id`) and records it.
    pub fn boot_id(&self) -> String {
        format!("boot-{}", self.boot)
    }

    /// Whether the marker names this boot (`RebootMarker::started`).
    pub fn marked(&self) -> bool {
        self.marker == Some(self.boot)
    }

    /// The machine goes down and comes back with a new boot id: the sentinel and the reboot
    /// that was due are gone; the cordon and the marker stay.
    pub fn reboot(&mut self) {
        self.boot += 1;
        self.sentinel = false;
        self.reboot_due = false;
    }
}

//! The store as rota's stores keep it (`crates/rota-store`): one record per node, written by a
//! compare-and-swap on its state, and `K` slots, each taken by a compare-and-swap on its holder.

use rota_core::{Lifecycle, Step, WindowChange};

/// A request's state in the store (`rota_store::RequestState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// Waits for the next window.
    Pending,
    /// Part of the open window.
    Active,
    /// Its window finished.
    Done,
    /// An operator canceled its window.
    Canceled,
}

/// One node's record (`rota_store::NodeRecord`): all that a restarted agent knows of its node,
/// besides what it finds on the host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub lifecycle: Lifecycle,
    /// The boot the reboot was recorded from (`NodeRecord::boot_id`).
    pub boot_id: Option<u8>,
    /// The node's one request, a reboot's, once recorded.
    pub request: Option<Request>,
}

/// What a write adds to the step the core decided: what `Agent::commit_with` adds
/// (crates/rota-agent/src/agent/commit.rs), as far as the model keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum With {
    Nothing,
    /// The request found on the host is recorded in the same write (`Transition::requests`).
    Request,
    /// The reboot's boot id (`NodeFields::boot_id`).
    BootId(u8),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    /// Node `n`'s record.
    pub records: Vec<Record>,
    /// Slot `i`'s holder, a node, or `None` while it is free.
    pub slots: Vec<Option<u8>>,
}

impl Store {
    /// `nodes` idle nodes with nothing recorded, and `slots` free slots.
    pub fn new(nodes: u8, slots: u8) -> Store {
        let record = Record {
            lifecycle: Lifecycle::idle(),
            boot_id: None,
            request: None,
        };
        Store {
            records: vec![record; usize::from(nodes)],
            slots: vec![None; usize::from(slots)],
        }
    }

    pub fn record(&self, node: u8) -> &Record {
        &self.records[usize::from(node)]
    }

    pub fn holds_slot(&self, node: u8) -> bool {
        self.slots.contains(&Some(node))
    }

    /// The lowest free slot, the one the SQL stores pick (`acquire_slot`).
    pub fn free_slot(&self) -> Option<u8> {
        let slot = self.slots.iter().position(Option::is_none)?;
        u8::try_from(slot).ok()
    }

    /// The compare-and-swap that takes `slot` for `node` if it is still free, as a Lease is
    /// taken by its resourceVersion (`crates/rota-store-kube`). A failed one changes nothing;
    /// the agent reads again. Comparing the holder rather than a version lets a slot taken and
    /// given back in between pass: it is as free as it was when read.
    pub fn take_slot(&mut self, slot: u8, node: u8) {
        let holder = &mut self.slots[usize::from(slot)];
        if holder.is_none() {
            *holder = Some(node);
        }
    }

    /// [`Flaw::BlindSlotWrite`](crate::system::Flaw::BlindSlotWrite): the slot read free is
    /// written without the comparison.
    pub fn overwrite_slot(&mut self, slot: u8, node: u8) {
        self.slots[usize::from(slot)] = Some(node);
    }

    /// Writes `step`, the step the core decided, as `update_node` and `apply_window` do
    /// (`crates/rota-store/src/sqlite/writes/windows.rs`): the record's lifecycle, the window
    /// change on its request, the slot given back when the change releases it, then what the
    /// write adds. The write compares the record's state with `step.from`; only its own agent
    /// writes a node's record in this model (no operator, and a killed agent writes nothing),
    /// and it reads the record afresh at every action, so the comparison holds by construction,
    /// and is asserted.
    pub fn transition(&mut self, node: u8, step: &Step, with: With) {
        let record = &mut self.records[usize::from(node)];
        assert_eq!(
            record.lifecycle.state, step.from,
            "node {node}: a write from a state the record is not in"
        );
        record.lifecycle = step.next;
        let moved = match &step.window {
            WindowChange::None | WindowChange::Queue { .. } => None,
            WindowChange::Open | WindowChange::Join => Some((Request::Pending, Request::Active)),
            WindowChange::Finish => Some((Request::Active, Request::Done)),
            WindowChange::Fail {
                keep_slot: true, ..
            } => None,
            WindowChange::Fail {
                keep_slot: false, ..
            }
            | WindowChange::Postpone { .. } => Some((Request::Active, Request::Pending)),
            WindowChange::Cancel { .. } => Some((Request::Active, Request::Canceled)),
        };
        if let Some((from, to)) = moved
            && record.request == Some(from)
        {
            record.request = Some(to);
        }
        match with {
            With::Nothing => {}
            // An open request of the same process is kept; a finished one is followed by a new one.
            With::Request => {
                if !matches!(record.request, Some(Request::Pending | Request::Active)) {
                    record.request = Some(Request::Pending);
                }
            }
            With::BootId(boot) => record.boot_id = Some(boot),
        }
        if step.window.releases_slot() {
            for holder in &mut self.slots {
                if *holder == Some(node) {
                    *holder = None;
                }
            }
        }
    }
}

//! The store as rota's stores keep it (`crates/rota-store`): one record per node, written by a
//! compare-and-swap on its state, and `K` slots, each taken by a compare-and-swap on its holder.
//!
//! What a write does to a node's record is rota-core's own rule, [`NodeOverview::apply`]: the
//! model keeps each node's `NodeOverview` and persists what `apply` answers, as a store does.
//! Who may take which slot is rota-core's [`schedule`]; the model keeps only the slots' holders
//! and the compare-and-swap that takes one.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use rota_core::{
    BackoffRecord, Blocked, Held, Lifecycle, Limits, NodeName, NodeOverview, NodeRecord, NodeState,
    RequestRecord, RequestState, Transition, Turn, Waiter, Write, schedule,
};

/// The model has no time: every write and every read of the queue happens at this instant.
pub const NOW: i64 = 0;

/// Node `node`'s name in the store.
pub fn name(node: u8) -> NodeName {
    NodeName::new(format!("n{node}")).expect("a valid node name")
}

/// One node's record (`rota_core::NodeOverview`): all that a restarted agent knows of its node,
/// besides what it finds on the host; and the requests its writes closed, which the store keeps
/// beside it (`NodeOverview` holds the open ones only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The row, the open requests and the backoffs. The row's `slot` is always `None` here:
    /// the slots are the store's [`Store::slots`], joined in when the record is read
    /// ([`Store::overview`]), as `rows.rs` reads `slots.slot`.
    overview: NodeOverview,
    /// The requests closed so far (done or canceled), oldest first.
    closed: Vec<RequestRecord>,
    /// The hash of the two, computed once per write: the checker hashes every state it
    /// generates, and most actions write no record.
    digest: u64,
}

impl Record {
    fn new(overview: NodeOverview, closed: Vec<RequestRecord>) -> Record {
        let digest = digest(&overview, &closed);
        Record {
            overview,
            closed,
            digest,
        }
    }

    pub fn lifecycle(&self) -> Lifecycle {
        self.overview.record.lifecycle()
    }

    pub fn state(&self) -> NodeState {
        self.overview.record.state
    }

    /// The boot the reboot was recorded from (`NodeRecord::boot_id`).
    pub fn boot_id(&self) -> Option<&str> {
        self.overview.record.boot_id.as_deref()
    }

    /// Whether a request is still open (pending or active).
    pub fn open_request(&self) -> bool {
        self.overview
            .open_requests
            .iter()
            .any(|request| request.state.is_open())
    }

    /// The state of the node's newest request, open or closed, once one was recorded.
    pub fn request(&self) -> Option<RequestState> {
        self.overview
            .open_requests
            .iter()
            .chain(&self.closed)
            .max_by_key(|request| request.id)
            .map(|request| request.state)
    }
}

impl Hash for Record {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.digest.hash(h);
    }
}

/// The hash of a record: `NodeOverview` is not `Hash`, and the checker needs it. Every field is
/// hashed: the destructuring names them all, so that a field added to the record cannot be left
/// out unnoticed.
fn digest(overview: &NodeOverview, closed: &[RequestRecord]) -> u64 {
    let h = &mut DefaultHasher::new();
    let NodeOverview {
        record,
        open_requests,
        backoffs,
    } = overview;
    let NodeRecord {
        node,
        state,
        since,
        process,
        slot,
        pre_cordoned,
        cordoned_by_rota,
        boot_id,
        reboot_started_at,
        reboot_deadline,
        last_reboot_at,
        queued_at,
        last_result,
        last_result_at,
        blocked,
        group,
    } = record;
    (
        node,
        state,
        since,
        process,
        slot,
        pre_cordoned,
        cordoned_by_rota,
    )
        .hash(h);
    (boot_id, reboot_started_at, reboot_deadline, last_reboot_at).hash(h);
    (queued_at, last_result, last_result_at, group).hash(h);
    blocked
        .as_ref()
        .map(|Blocked { reason, since }| (reason, since))
        .hash(h);
    for requests in [open_requests.as_slice(), closed] {
        requests.len().hash(h);
        for request in requests {
            let RequestRecord {
                id,
                node,
                process,
                source,
                created_at,
                state,
            } = request;
            (id, node, process, source, created_at, state.as_str()).hash(h);
        }
    }
    backoffs.len().hash(h);
    for backoff in backoffs {
        let BackoffRecord {
            node,
            process,
            until,
            last_interval,
            cause,
        } = backoff;
        (node, process, until, last_interval, cause).hash(h);
    }
    h.finish()
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    /// Node `n`'s record, shared between the states that did not write it: a state is cloned
    /// for every action, and an action writes one record at most.
    pub records: Vec<Arc<Record>>,
    /// Slot `i`'s holder, a node, or `None` while it is free.
    pub slots: Vec<Option<u8>>,
}

impl Store {
    /// `nodes` idle nodes with nothing recorded, and `slots` free slots.
    pub fn new(nodes: u8, slots: u8) -> Store {
        Store {
            records: (0..nodes)
                .map(|node| {
                    let record = NodeRecord::new(name(node), NodeState::Idle, NOW);
                    Arc::new(Record::new(NodeOverview::of(record), Vec::new()))
                })
                .collect(),
            slots: vec![None; usize::from(slots)],
        }
    }

    pub fn record(&self, node: u8) -> &Record {
        &self.records[usize::from(node)]
    }

    /// The slot `node` holds, if any.
    pub fn slot_of(&self, node: u8) -> Option<u8> {
        let slot = self.slots.iter().position(|holder| *holder == Some(node))?;
        u8::try_from(slot).ok()
    }

    pub fn holds_slot(&self, node: u8) -> bool {
        self.slot_of(node).is_some()
    }

    /// Node `node`'s record as a store reads it: its slot joined in.
    pub fn overview(&self, node: u8) -> NodeOverview {
        let mut overview = self.record(node).overview.clone();
        overview.record.slot = self.slot_of(node).map(u32::from);
        overview
    }

    /// The slot that `node`, queued and holding none, may take now: [`schedule`]'s answer,
    /// with the slots held and their number, `K`, as the fleet's concurrency.
    ///
    /// The queue it decides on is `node` alone. The model leaves the queue's order out (it has
    /// no time, so no places to order by): any queued node may try for a free slot, and the
    /// checker explores every order in which they try. With every queued node in the queue,
    /// all in one place, `schedule` would order them by name and grant `n0` before `n1`
    /// always: one fixed order, which real places (the times the nodes became eligible) do not
    /// give, and the checker would try no other. Asked about itself alone, the rule decides for
    /// each node whether it may take a slot now (queued, eligible, unblocked, its session
    /// alive: sessions are not modelled) and which one (the lowest free); the order is the
    /// checker's.
    pub fn turn(&self, node: u8) -> Option<u8> {
        let record = &self.record(node).overview.record;
        let waiter = Waiter {
            node: record.node.clone(),
            place: record
                .queued_at
                .expect("a queued node has its place in the queue"),
            blocked: record.blocked.is_some(),
            alive: true,
            group: None,
        };
        let held: Vec<Held> = (0u32..)
            .zip(&self.slots)
            .filter(|(_, holder)| holder.is_some())
            .map(|(slot, _)| Held { slot, group: None })
            .collect();
        let concurrency = u32::try_from(self.slots.len()).expect("K fits");
        let schedule = schedule(&[waiter], &held, &Limits::fleet(concurrency), NOW);
        match schedule.turn(&record.node) {
            Some(Turn::Granted(slot)) => Some(u8::try_from(slot).expect("a slot below K")),
            Some(Turn::Wait { .. }) => None,
            None => panic!("node {node}: schedule forgot a waiter"),
        }
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

    /// [`Flaw::BlindSlotWrite`](crate::agent::Flaw::BlindSlotWrite): the slot read free is
    /// written without the comparison.
    pub fn overwrite_slot(&mut self, slot: u8, node: u8) {
        self.slots[usize::from(slot)] = Some(node);
    }

    /// Writes `transition`, as a store does: reads the node's record (its slot joined in), lets
    /// [`NodeOverview::apply`] decide, and persists its answer: the record after the write, the
    /// requests it closed, the requests it creates (with their ids), and the slot given back
    /// when the record after the write holds none. The model keeps no history.
    ///
    /// `apply` compares the record's state with `transition.from`. Only its own agent writes a
    /// node's record in this model (no operator, and a killed agent writes nothing), and it
    /// reads the record afresh at every action, so the comparison holds by construction: a
    /// refused write is a bug of the model, and panics.
    pub fn transition(&mut self, node: u8, transition: Transition) {
        let before = self.overview(node);
        let applied = before
            .apply(&Write::Transition(transition), NOW)
            .unwrap_or_else(|e| panic!("node {node}: {e}"));
        if before.record.slot.is_some() && applied.after.record.slot.is_none() {
            for holder in &mut self.slots {
                if *holder == Some(node) {
                    *holder = None;
                }
            }
        }
        let record = self.record(node);
        let mut after = applied.after;
        after.record.slot = None;
        let mut closed = record.closed.clone();
        closed.extend(applied.closed);
        // The ids only order one node's requests here, so that a state does not depend on
        // which node asked first.
        let last = after
            .open_requests
            .iter()
            .chain(&closed)
            .map(|request| request.id)
            .max()
            .unwrap_or(0);
        for (id, new) in (last + 1..).zip(applied.opened) {
            after.open_requests.push(RequestRecord {
                id,
                node: name(node),
                process: new.process,
                source: new.source,
                created_at: new.created_at,
                state: RequestState::Pending,
            });
        }
        self.records[usize::from(node)] = Arc::new(Record::new(after, closed));
    }
}

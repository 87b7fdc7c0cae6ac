//! What a scheduler's read allows it to decide: the grants of rota-core's `schedule`, and the
//! withdrawals.

use rota_core::{Held, Limits, NodeName, Waiter, schedule};

use crate::cluster::{Lease, RotaNode, Status};
use crate::scheduler::{Kind, Op};

/// The model has no time: every node was queued at this instant, and `schedule` runs at it.
const NOW: i64 = 0;

/// The operations a read of `nodes` and `leases` allows: the grants of `schedule`, and the
/// withdrawals of every Lease naming a node not in a window of it.
pub fn decisions(nodes: &[RotaNode], leases: &[Lease]) -> Vec<Op> {
    let named = |node| leases.iter().any(|lease| lease.holder == Some(node));
    let waiters: Vec<u8> = (0u8..)
        .zip(nodes)
        .filter(|(node, rota_node)| {
            rota_node.status == Status::Queued && rota_node.grant.is_none() && !named(*node)
        })
        .map(|(node, _)| node)
        .collect();
    let queue: Vec<Waiter> = waiters
        .iter()
        .map(|&node| Waiter {
            node: name(node),
            place: NOW,
            blocked: false,
            alive: true,
            group: None,
        })
        .collect();
    let held: Vec<Held> = (0u32..)
        .zip(leases)
        .filter(|(_, lease)| lease.holder.is_some())
        .map(|(slot, _)| Held { slot, group: None })
        .collect();
    let concurrency = u32::try_from(leases.len()).expect("K fits");
    let grants = schedule(&queue, &held, &Limits::fleet(concurrency), NOW).grants;
    let grants = grants.into_iter().map(|grant| {
        let waiter = queue.iter().position(|w| w.node == grant.node);
        Op {
            kind: Kind::Grant,
            node: waiters[waiter.expect("a grant to a waiter")],
            slot: u8::try_from(grant.slot).expect("a slot below K"),
        }
    });
    let withdrawals = (0u8..).zip(leases).filter_map(|(slot, lease)| {
        let node = lease.holder?;
        let read = nodes[usize::from(node)];
        let timeout = read.status == Status::Queued && read.grant == Some(slot);
        (!read.in_window_of(slot)).then_some(Op {
            kind: Kind::Withdraw { timeout },
            node,
            slot,
        })
    });
    grants.chain(withdrawals).collect()
}

/// Node `node`'s name, by which `schedule` orders nodes queued at the same instant.
fn name(node: u8) -> NodeName {
    NodeName::new(format!("n{node}")).expect("a valid node name")
}

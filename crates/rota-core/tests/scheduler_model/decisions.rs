//! What a scheduler's read allows it to decide: rota-core's `grants::decide`, on the model's
//! objects.

use rota_core::grants::{Granted, LeaseView, NodeView, Operation, Withdrawal, decide};
use rota_core::{Limits, NodeName};

use crate::cluster::{Lease, RotaNode, Status};
use crate::scheduler::{Kind, Op};
use crate::system::{Groups, Rota};

/// The model has no time: every node was queued, and every grant written, at this instant,
/// and `decide` runs at it with no take-up time, so that a scheduler may withdraw a grant not
/// taken up whenever it reads one.
const NOW: i64 = 0;

/// The operations a read of `nodes` and `leases` allows: every one `decide` makes on it.
pub fn decisions(model: &Rota, nodes: &[RotaNode], leases: &[Lease]) -> Vec<Op> {
    let views: Vec<NodeView> = (0u8..)
        .zip(nodes)
        .map(|(node, read)| NodeView {
            node: name(node),
            queued: (read.status == Status::Queued).then_some(NOW),
            blocked: false,
            alive: true,
            group: model.groups.map(|_| Groups::of(node).to_owned()),
            grant: read.grant.map(|slot| Granted {
                slot: u32::from(slot),
                at: NOW,
            }),
            taken_up: read.status == Status::Window,
            since: NOW,
        })
        .collect();
    let leases: Vec<LeaseView> = (0u32..)
        .zip(leases)
        .map(|(slot, lease)| LeaseView {
            slot,
            holder: lease.holder.map(name),
            acquired_at: NOW,
        })
        .collect();
    let concurrency = u32::try_from(leases.len()).expect("K fits");
    let index = |node: &NodeName| {
        let node = views.iter().position(|v| &v.node == node);
        u8::try_from(node.expect("a node of the model")).expect("N fits")
    };
    let slot = |slot: u32| u8::try_from(slot).expect("a slot below K");
    let limits = model
        .groups
        .map_or_else(|| Limits::fleet(concurrency), |g| g.limits(concurrency));
    decide(&views, &leases, &limits, NOW, 0)
        .into_iter()
        .map(|operation| match operation {
            Operation::Grant { node, slot: s } => Op {
                kind: Kind::Grant,
                node: index(&node),
                slot: slot(s),
            },
            Operation::Withdraw { node, slot: s, why } => Op {
                kind: Kind::Withdraw {
                    timeout: why == Withdrawal::NotTakenUp,
                },
                node: index(&node),
                slot: slot(s),
            },
        })
        .collect()
}

/// Node `node`'s name, by which `schedule` orders nodes queued at the same instant.
fn name(node: u8) -> NodeName {
    NodeName::new(format!("n{node}")).expect("a valid node name")
}

//! What the checker checks in every reachable state, and what it checks of the runs.

use stateright::Property;

use crate::cluster::Status;
use crate::system::{Groups, Leaders, Rota, State};

/// The safety property (docs/design.md §4, invariant 1).
pub const AT_MOST_K: &str = "never more than K nodes out";
/// Fencing (invariant 2): the Lease is the slot, so no Lease, no disruption.
pub const LEASED: &str = "a node is out only while the Lease its grant names names it";
/// Liveness, with one leader at a time ([`Leaders::Failover`]). stateright judges it by the
/// runs' last states and does not see cycles, so the test also checks that the state graph
/// has none (`acyclic.rs`): then every run ends, and there is no endless run it could miss.
/// Nothing undoes a finished fleet, so it does not matter either that stateright follows
/// only the first run to reach each state.
pub const FINISHES: &str = "every node finishes";
/// Liveness with both schedulers acting at once ([`Leaders::Both`]), as reachability only:
/// there two schedulers can undo each other's half-done grants without end (one takes a Lease,
/// the other reclaims it before the grant is written, and again), and a grant can be withdrawn
/// before its live agent takes it up, again and again. Only fairness ends those cycles, which
/// stateright lacks; leader election is what ends the first in rota.
pub const CAN_FINISH: &str = "every node can finish";

/// Groups ([`Groups::OneEach`]): never two nodes of one group out at once.
pub const GROUP_LIMIT: &str = "never more of a group out than its limit";
/// Groups in turn ([`Groups::InTurn`]): never nodes of two groups out at once.
pub const IN_TURN: &str = "never two groups out at once";

/// The groups of the nodes out.
fn out_groups(model: &Rota, state: &State) -> Vec<&'static str> {
    (0..model.nodes)
        .filter(|node| state.hosts[usize::from(*node)].out)
        .map(Groups::of)
        .collect()
}

pub fn all(leaders: Leaders, groups: Option<Groups>) -> Vec<Property<Rota>> {
    let mut properties = vec![
        Property::always(AT_MOST_K, |model: &Rota, state: &State| {
            let out = state.hosts.iter().filter(|host| host.out).count();
            out <= usize::from(model.slots)
        }),
        Property::always(LEASED, |model: &Rota, state: &State| {
            (0..model.nodes).all(|node| {
                let n = usize::from(node);
                let leased = state.nodes[n]
                    .grant
                    .is_some_and(|slot| state.leases[usize::from(slot)].holder == Some(node));
                !state.hosts[n].out || leased
            })
        }),
    ];
    properties.push(match leaders {
        Leaders::Failover | Leaders::One => Property::eventually(FINISHES, finished),
        Leaders::Both => Property::sometimes(CAN_FINISH, finished),
    });
    match groups {
        Some(Groups::OneEach) => {
            properties.push(Property::always(
                GROUP_LIMIT,
                |model: &Rota, state: &State| {
                    let out = out_groups(model, state);
                    ["a", "b"]
                        .iter()
                        .all(|g| out.iter().filter(|o| *o == g).count() <= 1)
                },
            ));
        }
        Some(Groups::InTurn) => {
            properties.push(Property::always(IN_TURN, |model: &Rota, state: &State| {
                out_groups(model, state)
                    .windows(2)
                    .all(|pair| pair[0] == pair[1])
            }));
        }
        None => {}
    }
    properties
}

/// Every node idle, its work done, back in service, and named by no Lease.
fn finished(model: &Rota, state: &State) -> bool {
    (0..model.nodes).all(|node| {
        let n = usize::from(node);
        let host = state.hosts[n];
        state.nodes[n].status == Status::Idle
            && host.done
            && !host.out
            && state.leases.iter().all(|lease| lease.holder != Some(node))
    })
}

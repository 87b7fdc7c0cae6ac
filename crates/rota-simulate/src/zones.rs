//! `rota simulate --zones`: the nodes spread over zones, each zone a slot group, and the
//! fewest rounds of windows any coordinator needs under the zones' limits.

use std::collections::BTreeMap;

use rota_core::schedule::Limits;

/// The label whose value is a simulated node's zone, which its agent takes as its slot group.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Nodes spread over `count` zones in turn (node `i` in `zone-<i mod count>`), with the groups'
/// rules every agent configures.
#[derive(Clone, Debug)]
pub struct Zones {
    pub count: u32,
    pub rules: rota_core::GroupRules,
}

impl Zones {
    /// The zone of the `index`-th node.
    pub fn of(&self, index: usize) -> String {
        format!("zone-{}", index % self.count.max(1) as usize)
    }

    /// How many nodes of `nodes` each zone holds, by zone.
    pub(crate) fn sizes(&self, nodes: usize) -> BTreeMap<String, usize> {
        let mut sizes = BTreeMap::new();
        for i in 0..nodes {
            *sizes.entry(self.of(i)).or_insert(0) += 1;
        }
        sizes
    }
}

/// The fewest rounds of windows any coordinator needs for `nodes` under `concurrency` and the
/// zones' rules, every window as long as the others: `ceil(nodes / concurrency)` without
/// zones; with them, no fewer than the fullest zone needs at its own limit, and with zones in
/// turn, each zone's rounds one after the other.
pub fn ideal_rounds(nodes: usize, concurrency: u32, zones: Option<&Zones>) -> usize {
    let fleet = nodes.div_ceil(concurrency.max(1) as usize);
    let Some(zones) = zones else {
        return fleet;
    };
    let limits = zones.rules.limits(Limits::fleet(concurrency));
    let rounds = zones.sizes(nodes).into_iter().map(|(zone, size)| {
        let width = limits
            .of_group(&zone)
            .map_or(concurrency, |limit| limit.min(concurrency));
        match width {
            0 => usize::MAX,
            width => size.div_ceil(width as usize),
        }
    });
    if zones.rules.in_turn {
        rounds.fold(0, usize::saturating_add)
    } else {
        rounds.fold(fleet, usize::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(count: u32, rules: &str) -> Zones {
        Zones {
            count,
            rules: rules.parse().expect("rules"),
        }
    }

    #[test]
    fn the_ideal_counts_the_fullest_zone_at_its_limit_and_zones_in_turn_one_after_another() {
        // (nodes, concurrency, zones, rounds)
        let cases = [
            (60, 6, None, 10),
            (60, 6, Some(zones(3, "*=2")), 10),
            (60, 6, Some(zones(3, "*=1")), 20),
            (60, 6, Some(zones(3, "*=2;zone-0=1")), 20),
            (10, 4, Some(zones(3, "*=2")), 3),
            (6, 2, Some(zones(3, "in-turn")), 3),
            (12, 4, Some(zones(3, "*=1;in-turn")), 12),
            (60, 6, Some(zones(3, "zone-1=0")), usize::MAX),
        ];
        for (nodes, concurrency, zones, rounds) in cases {
            assert_eq!(
                ideal_rounds(nodes, concurrency, zones.as_ref()),
                rounds,
                "{nodes} nodes, concurrency {concurrency}, {zones:?}"
            );
        }
    }

    #[test]
    fn nodes_go_to_the_zones_in_turn() {
        let zones = zones(3, "");
        let of: Vec<String> = (0..4).map(|i| zones.of(i)).collect();
        assert_eq!(of, ["zone-0", "zone-1", "zone-2", "zone-0"]);
        assert_eq!(
            zones.sizes(10),
            BTreeMap::from([
                ("zone-0".to_owned(), 4),
                ("zone-1".to_owned(), 3),
                ("zone-2".to_owned(), 3)
            ])
        );
    }
}

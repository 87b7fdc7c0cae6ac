//! What the simulator's tests of disrupted rollouts check afterwards.

use std::fmt::Debug;

use rota_simulate::Summary;

/// Every node rebooted exactly once and none failed, never more than `concurrency` at once.
pub fn assert_clean_rollout(summary: &Summary, nodes: usize, concurrency: usize) {
    assert_eq!(
        (summary.completed, summary.failed),
        (nodes, 0),
        "{summary:?}"
    );
    assert_eq!(
        usize::try_from(summary.reboots).ok(),
        Some(nodes),
        "one reboot per node: {summary:?}"
    );
    assert!(summary.max_concurrent <= concurrency, "{summary:?}");
}

/// Both disruptions happened while nodes were still to go, and each hit something (connections
/// ended or refused).
pub fn assert_mid_rollout<T: Debug + Default + PartialOrd>(done: &[(usize, T)], nodes: usize) {
    assert_eq!(done.len(), 2, "both disruptions happened: {done:?}");
    assert!(
        done.iter()
            .all(|(completed, hit)| *completed < nodes && *hit > T::default()),
        "each came mid-rollout and hit connections: {done:?}"
    );
}

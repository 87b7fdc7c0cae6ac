//! Kubernetes mode end to end, procedures on real agents: one real `rota agent` process per
//! kwok node on the real control plane of `testenv/`, with simulated reboots (see
//! `rota_e2e::fleet`). Procedures are cluster-scoped: names and node lists keep parallel tests
//! apart, and each test deletes its own.

use anyhow::Result;
use rota_core::{HistoryEvent, Process};
use rota_e2e::fleet::Fleet;
use rota_store::Store;

mod kube_common;

use kube_common::{
    assert_rebooted_once, count, delete_procedures, history, one_slot_fleet, scope_with_nodes,
    unschedulable, wait_finished,
};

/// Procedures on real agents: two procedures for two nodes, one slot. Each node runs both in
/// priority order inside one window (one drain, one release), the one asking for a reboot
/// gets exactly one, and neither runs twice.
#[tokio::test]
async fn procedures_run_once_per_node_in_priority_order_in_one_window() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-procedures", 2).await? else {
        return Ok(());
    };
    let fleet = one_slot_fleet(env, &scope, &nodes, &["--procedure-poll", "300ms"]).await;
    let store = fleet.store().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("procedures.log");
    let names: Vec<rota_core::NodeName> = nodes
        .iter()
        .map(|n| Fleet::node_name(n))
        .collect::<Result<_>>()?;
    // Procedures are cluster-scoped: names and node lists keep parallel tests apart.
    let (low, high) = (
        format!("{}-low", scope.id()),
        format!("{}-high", scope.id()),
    );
    for (name, priority, reboot) in [(&low, "90", true), (&high, "10", false)] {
        let mut spec = rota_core::ProcedureSpec::new(
            name.clone(),
            format!("echo \"$ROTA_NODE {name}\" >> {}\n", log.display()),
        );
        spec.priority = priority.parse()?;
        spec.reboot = reboot;
        spec.nodes = names.clone();
        store.submit_procedure(&spec).await?;
    }
    fleet.start_all()?;
    for node in &nodes {
        wait_finished(&fleet, &store, node, 1).await;
    }
    let lines = std::fs::read_to_string(&log)?;
    for node in &nodes {
        let ran: Vec<&str> = lines
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{node} ")))
            .collect();
        assert_eq!(ran, [high.as_str(), low.as_str()], "{node} in {lines}");
        let entries = history(&store, node).await?;
        for name in [&low, &high] {
            let process = Process::mop(name.clone())?;
            assert_eq!(
                count(&entries, &process, HistoryEvent::Finished),
                1,
                "{entries:?}"
            );
        }
        let windows = entries.iter().filter(|e| e.released).count();
        assert_eq!(
            windows, 1,
            "{node}: one window for all its work: {entries:?}"
        );
        assert_rebooted_once(&fleet, &store, node).await?;
        assert!(!unschedulable(&scope, node).await?, "{node} left cordoned");
    }
    fleet.shutdown().await?;
    delete_procedures(&scope, &[&low, &high]).await?;
    scope.cleanup().await
}

//! Kubernetes mode end to end, agents killed in the middle of a window: one real `rota agent`
//! process per kwok node on the real control plane of `testenv/`, with simulated reboots (see
//! `rota_e2e::fleet`). An agent killed while it drains, before its node reboots or while it
//! verifies comes back to the same state, and never reboots twice. Each test has its own
//! namespace and node names, so the tests can share one control plane and run in parallel.
//!
//! Pods are bound to their nodes without a controller, so the agents drain with `--drain-force`.

use std::time::Duration;

use anyhow::Result;
use rota_core::NodeState;

mod kube_common;

use kube_common::{
    PATIENCE, args, create_pdb, existing_record, finish, fleet, one_slot_fleet, pods_on,
    scope_with_nodes, set_min_available, start, unschedulable, wait, wait_rebooted_once,
    wait_state,
};

#[tokio::test]
async fn an_agent_killed_during_the_drain_resumes_it() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-kill-drain", 1).await? else {
        return Ok(());
    };
    let node = &nodes[0];
    pods_on(&scope, "held", &nodes).await?;
    create_pdb(&scope, "held", Some(1), None, 0).await?;

    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    wait_state(&fleet, &store, node, NodeState::Draining).await;
    wait(&fleet, "the node cordoned", || async {
        Ok(unschedulable(&scope, node).await?.then_some(()))
    })
    .await;
    fleet.crash_and_restart(node)?;
    // The restarted agent drains again, and the budget still refuses: nothing moves on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = existing_record(&store, node).await?;
    assert_eq!(now.state, NodeState::Draining, "{now:?}");
    assert!(unschedulable(&scope, node).await?);
    assert_eq!(fleet.reboot_commands(node)?, 0);

    set_min_available(&scope, "held", 0).await?;
    wait_rebooted_once(&fleet, &store, &scope, node).await?;
    scope.wait_pod_gone("held-0", PATIENCE).await?;
    finish(fleet, scope).await
}

#[tokio::test]
async fn an_agent_killed_before_the_reboot_happens_never_reboots_twice() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-kill-reboot", 1).await? else {
        return Ok(());
    };
    let node = &nodes[0];
    let fleet = one_slot_fleet(env, &scope, &nodes, &[]).await;
    let store = start(&fleet).await?;
    fleet.hold_reboots(node, true)?;
    fleet.request_reboot(node)?;
    wait_state(&fleet, &store, node, NodeState::Rebooting).await;
    wait(&fleet, "the reboot command", || async {
        Ok((fleet.reboot_commands(node)? == 1).then_some(()))
    })
    .await;

    fleet.crash_and_restart(node)?;
    // Give the restarted agent time to (wrongly) reboot again; the boot id is still the old one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(fleet.is_running(node)?, "the restarted agent exited");
    assert_eq!(fleet.reboot_commands(node)?, 1);
    let now = existing_record(&store, node).await?;
    assert_eq!(now.state, NodeState::Rebooting, "{now:?}");
    assert!(unschedulable(&scope, node).await?);

    fleet.hold_reboots(node, false)?;
    wait_rebooted_once(&fleet, &store, &scope, node).await?;
    finish(fleet, scope).await
}

#[tokio::test]
async fn an_agent_killed_during_verification_verifies_again() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("kube-kill-verify", 1).await? else {
        return Ok(());
    };
    let node = &nodes[0];
    let dir = tempfile::tempdir()?;
    let checks = dir.path().join("health.log");
    let health = format!("echo check >> '{}'; sleep 3", checks.display());
    let fleet = fleet(
        env,
        &scope,
        &nodes,
        args(&[
            "--concurrency",
            "1",
            "--drain-force",
            "--health-interval",
            "200ms",
            "--health-command",
            &health,
        ]),
    )
    .await;
    let store = start(&fleet).await?;
    fleet.request_reboot(node)?;
    let health_checks = || {
        std::fs::read_to_string(&checks)
            .unwrap_or_default()
            .lines()
            .count()
    };
    wait(&fleet, "the first health check", || async {
        Ok((health_checks() > 0).then_some(()))
    })
    .await;
    // The first check runs alongside the write that starts the verification: on a busy
    // machine it logs before that write lands. The check takes three seconds.
    wait_state(&fleet, &store, node, NodeState::Verifying).await;
    fleet.crash_and_restart(node)?;
    wait_rebooted_once(&fleet, &store, &scope, node).await?;
    assert!(
        health_checks() >= 2,
        "the restarted agent verified again before finishing"
    );
    finish(fleet, scope).await
}

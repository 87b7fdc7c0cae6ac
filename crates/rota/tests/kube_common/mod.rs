//! What the end-to-end tests of Kubernetes mode share: the control plane, a fleet of real
//! `rota agent` processes on kwok nodes, and waiting with the agents' logs at hand.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Node;
use rota_e2e::fleet::{Fleet, FleetOptions};
use rota_e2e::testenv::{self, Scope, TestEnv};
use rota_store::NodeRecord;
use rota_store::ReadStore;
use rota_store_kube::KubeStore;

pub const ROTA: &str = env!("CARGO_BIN_EXE_rota");
/// How long any one thing may take to happen. Generous: the machine is small and shared.
pub const PATIENCE: Duration = Duration::from_secs(240);

/// The environment, or `None` when `ROTA_E2E_SKIP=1`; panics (the test fails) otherwise when
/// no control plane can be had.
pub fn env() -> Option<&'static TestEnv> {
    match TestEnv::get() {
        Ok(env) => env,
        Err(e) => panic!("{e:#}"),
    }
}

pub fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A fleet of agents on `nodes`, with `args` for every agent.
pub async fn fleet(env: &TestEnv, scope: &Scope, nodes: &[String], args: Vec<String>) -> Fleet {
    Fleet::new(
        env,
        scope,
        nodes,
        FleetOptions {
            binary: ROTA.into(),
            args,
        },
        &BTreeMap::new(),
    )
    .await
    .expect("prepare the fleet")
}

/// [`fleet`] of agents that take one slot at a time and drain the tests' bare pods
/// (`--concurrency 1 --drain-force`), with `extra` arguments.
pub async fn one_slot_fleet(
    env: &TestEnv,
    scope: &Scope,
    nodes: &[String],
    extra: &[&str],
) -> Fleet {
    let mut list = vec!["--concurrency", "1", "--drain-force"];
    list.extend_from_slice(extra);
    fleet(env, scope, nodes, args(&list)).await
}

/// Waits for `check`, and on failure panics with the agents' recent logs.
pub async fn wait<T, F, Fut>(fleet: &Fleet, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    wait_within(fleet, what, PATIENCE, check).await
}

/// [`wait`] with a bound of its own, for a test whose point is how soon something happens.
pub async fn wait_within<T, F, Fut>(fleet: &Fleet, what: &str, within: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    match testenv::wait_for(what, within, check).await {
        Ok(v) => v,
        Err(e) => panic!(
            "{e:#}\nsupervisor errors: {:?}\n{}",
            fleet.supervisor_errors(),
            fleet.logs(40)
        ),
    }
}

pub async fn record(store: &KubeStore, node: &str) -> Result<Option<NodeRecord>> {
    Ok(store.node(&Fleet::node_name(node)?).await?)
}

pub async fn unschedulable(scope: &Scope, node: &str) -> Result<bool> {
    let node: Node = scope.nodes().get(node).await?;
    Ok(node.spec.and_then(|s| s.unschedulable).unwrap_or(false))
}

/// Waits until every agent has opened its session (its RotaNode exists).
/// Starts every agent of `fleet` and waits until each has opened its session; returns the
/// fleet's store.
pub async fn start(fleet: &Fleet) -> Result<KubeStore> {
    let store = fleet.store().await?;
    fleet.start_all()?;
    wait_started(fleet, &store).await;
    Ok(store)
}

pub async fn wait_started(fleet: &Fleet, store: &KubeStore) {
    for node in fleet.nodes() {
        wait(fleet, &format!("the agent of {node} to start"), || async {
            Ok(record(store, &node).await?.map(|_| ()))
        })
        .await;
    }
}

//! What the end-to-end tests of Kubernetes mode share: the control plane, a fleet of real
//! `rota agent` processes on kwok nodes, waiting with the agents' logs at hand, and what the
//! agents' tests check and set up: the nodes' history, their state, budgets and pods; the
//! chart, applied as users apply it (`chart`); and rota's processes with their service
//! accounts' tokens, and a FleetLock client (`fleetlock`).
#![allow(
    dead_code,
    reason = "each test binary uses its own part of the helpers"
)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rota_core::{HistoryEvent, NodeState, Process};
use rota_e2e::fleet::{Fleet, FleetOptions};
use rota_e2e::testenv::{self, Scope, TestEnv, app_labels};
use rota_store::{HistoryEntry, HistoryFilter, NodeRecord, StoreExt};
use rota_store_kube::KubeStore;

pub mod chart;
pub mod fleetlock;

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
            reboot_hook: None,
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
            fleet.logs(400)
        ),
    }
}

pub async fn record(store: &KubeStore, node: &str) -> Result<Option<NodeRecord>> {
    Ok(store.node(&Fleet::node_name(node)?).await?)
}

/// The node's record, which must exist.
pub async fn existing_record(store: &KubeStore, node: &str) -> Result<NodeRecord> {
    record(store, node).await?.context("no record")
}

pub async fn unschedulable(scope: &Scope, node: &str) -> Result<bool> {
    let node: Node = scope.nodes().get(node).await?;
    Ok(node.spec.and_then(|s| s.unschedulable).unwrap_or(false))
}

/// Starts every agent of `fleet` and waits until each has opened its session; returns the
/// fleet's store.
pub async fn start(fleet: &Fleet) -> Result<KubeStore> {
    let store = fleet.store().await?;
    fleet.start_all()?;
    wait_started(fleet, &store).await;
    Ok(store)
}

/// Waits until every agent has opened its session (its RotaNode exists).
pub async fn wait_started(fleet: &Fleet, store: &KubeStore) {
    for node in fleet.nodes() {
        wait(fleet, &format!("the agent of {node} to start"), || async {
            Ok(record(store, &node).await?.map(|_| ()))
        })
        .await;
    }
}

pub async fn history(store: &KubeStore, node: &str) -> Result<Vec<HistoryEntry>> {
    Ok(store
        .history(&HistoryFilter {
            node: Some(Fleet::node_name(node)?),
            ..HistoryFilter::default()
        })
        .await?)
}

pub fn count(entries: &[HistoryEntry], process: &Process, event: HistoryEvent) -> usize {
    entries
        .iter()
        .filter(|e| &e.process == process && e.event == event)
        .count()
}

pub async fn wait_state(
    fleet: &Fleet,
    store: &KubeStore,
    node: &str,
    state: NodeState,
) -> NodeRecord {
    wait(fleet, &format!("{node} to be {state}"), || async {
        Ok(record(store, node).await?.filter(|r| r.state == state))
    })
    .await
}

/// Whether the node is idle without a slot: the RotaNode goes idle a moment before the Lease
/// is given back (two objects, the release last), so a finished window is both.
pub async fn idle_without_a_slot(store: &KubeStore, node: &str) -> Result<bool> {
    Ok(record(store, node)
        .await?
        .is_some_and(|r| r.state == NodeState::Idle && r.slot.is_none()))
}

/// Waits until `node` is idle with `finished` reboots in its history.
pub async fn wait_finished(fleet: &Fleet, store: &KubeStore, node: &str, finished: usize) {
    wait(
        fleet,
        &format!("{node} to finish {finished} reboot(s)"),
        || async {
            let idle = idle_without_a_slot(store, node).await?;
            let done = count(
                &history(store, node).await?,
                &Process::Reboot,
                HistoryEvent::Finished,
            );
            Ok((idle && done >= finished).then_some(()))
        },
    )
    .await;
}

/// Asserts what every successful reboot leaves: one reboot command, one new boot, one
/// `finished` reboot in history and nothing failed.
pub async fn assert_rebooted_once(fleet: &Fleet, store: &KubeStore, node: &str) -> Result<()> {
    let entries = history(store, node).await?;
    let finished = count(&entries, &Process::Reboot, HistoryEvent::Finished);
    ensure!(
        finished == 1,
        "{node}: {finished} finished reboots in {entries:?}"
    );
    let failed = count(&entries, &Process::Reboot, HistoryEvent::Failed);
    ensure!(failed == 0, "{node}: failed entries in {entries:?}");
    let commands = fleet.reboot_commands(node)?;
    ensure!(
        commands == 1,
        "{node}: the reboot command ran {commands} times"
    );
    let boots = fleet.boots(node)?;
    ensure!(
        boots == 2,
        "{node}: {boots} boots, expected the first and one more"
    );
    let record = existing_record(store, node).await?;
    ensure!(
        record.state == NodeState::Idle && record.slot.is_none(),
        "{node} did not end idle without a slot: {record:?}"
    );
    Ok(())
}

/// Waits until `node` has finished its one reboot, and asserts what that leaves: what
/// [`assert_rebooted_once`] asserts, and the node uncordoned.
pub async fn wait_rebooted_once(
    fleet: &Fleet,
    store: &KubeStore,
    scope: &Scope,
    node: &str,
) -> Result<()> {
    wait_finished(fleet, store, node, 1).await;
    assert_rebooted_once(fleet, store, node).await?;
    assert!(!unschedulable(scope, node).await?, "{node} left cordoned");
    Ok(())
}

/// Shuts the fleet down, then removes what the test made.
pub async fn finish(fleet: Fleet, scope: Scope) -> Result<()> {
    fleet.shutdown().await?;
    scope.cleanup().await
}

/// Deletes the procedures `names` (cluster-scoped, so not removed with the test's namespace).
pub async fn delete_procedures(scope: &Scope, names: &[&str]) -> Result<()> {
    let api: kube::Api<rota_kube_api::Procedure> = kube::Api::all(scope.client());
    for name in names {
        api.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// A PodDisruptionBudget on the pods labelled `app`, and waits until the disruption
/// controller reports `allowed` disruptions for it.
pub async fn create_pdb(
    scope: &Scope,
    app: &str,
    min_available: Option<i32>,
    max_unavailable: Option<i32>,
    allowed: i32,
) -> Result<()> {
    let pdbs = scope.api::<PodDisruptionBudget>();
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(app.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: min_available.map(IntOrString::Int),
            max_unavailable: max_unavailable.map(IntOrString::Int),
            selector: Some(LabelSelector {
                match_labels: Some(app_labels(app)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };
    pdbs.create(&PostParams::default(), &pdb).await?;
    scope.wait_pdb(app, allowed, PATIENCE).await?;
    Ok(())
}

/// Sets the `minAvailable` of the PodDisruptionBudget `name`.
pub async fn set_min_available(scope: &Scope, name: &str, min_available: i32) -> Result<()> {
    scope
        .api::<PodDisruptionBudget>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "minAvailable": min_available } })),
        )
        .await?;
    Ok(())
}

/// One bare pod per node, `<app>-<i>`, all labelled `app`; waits until they run.
pub async fn pods_on(scope: &Scope, app: &str, nodes: &[String]) -> Result<()> {
    for (i, node) in nodes.iter().enumerate() {
        scope
            .create_pod_on(&format!("{app}-{i}"), node, &app_labels(app))
            .await?;
    }
    for i in 0..nodes.len() {
        scope
            .wait_pod_running(&format!("{app}-{i}"), PATIENCE)
            .await?;
    }
    Ok(())
}

/// A test's own namespace with `count` ready kwok nodes; `None` when the tests are skipped.
pub async fn scope_with_nodes(
    prefix: &str,
    count: usize,
) -> Result<Option<(&'static TestEnv, Scope, Vec<String>)>> {
    let Some(env) = env() else {
        return Ok(None);
    };
    let scope = env.scope(prefix).await?;
    let nodes = scope.create_ready_nodes(count).await?;
    Ok(Some((env, scope, nodes)))
}

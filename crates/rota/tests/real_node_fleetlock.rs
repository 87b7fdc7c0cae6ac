//! `rota fleetlock --store kube` with the one real node of `testenv/node-up` as a Fedora CoreOS
//! host. Its kubelet reports this machine's machine id, its boot id and its InternalIP (the
//! address of the node's bridge); the FleetLock client sends Zincati's requests from that
//! address. The drain evicts a real container under a PodDisruptionBudget, which the kubelet
//! stops. The reboot cannot be real: the test writes a new boot id into the Node's status, as
//! the kubelet reports one after a reboot, and the host's steady-state follows at once (the
//! kubelet writes its own boot id back at its next status update, within 10 s).

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::fleetlock::{HOST_LABEL, set_boot_id};
use rota_e2e::real_node::RealNode;
use rota_e2e::testenv::{Scope, pod_is_running, wait_for};
use rota_store::StoreExt;
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde_json::json;

mod kube_common;

use kube_common::fleetlock::{Answer, RotaProcess, Zincati};
use kube_common::{PATIENCE, count, history, set_min_available, unschedulable};

const PAUSE: Duration = Duration::from_millis(500);

async fn label(scope: &Scope, node: &str, value: Option<&str>) -> Result<()> {
    let patch = json!({ "metadata": { "labels": { HOST_LABEL: value } } });
    scope
        .nodes()
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("labelling node {node}"))?;
    Ok(())
}

fn waiting(answer: &Answer) -> Result<()> {
    ensure!(
        !answer.success() && ["waiting_for_slot", "draining"].contains(&answer.kind.as_str()),
        "not a refusal while the host waits for its turn: {answer:?}"
    );
    Ok(())
}

/// A busybox container on the real node that stops at once on SIGTERM, under a budget that
/// allows no disruption.
async fn workload(scope: &Scope, real: &RealNode, node: &str) -> Result<()> {
    let labels = json!({ "app": "fcos-workload" });
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "fcos-workload", "labels": labels },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "work",
                "image": real.busybox_image()?,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            }],
        },
    }))?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": "fcos-workload" },
        "spec": { "minAvailable": 1, "selector": { "matchLabels": labels } },
    }))?;
    scope.pods().create(&PostParams::default(), &pod).await?;
    scope
        .api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await?;
    scope.wait_pod_running("fcos-workload", PATIENCE).await?;
    scope.wait_pdb("fcos-workload", 0, PATIENCE).await?;
    Ok(())
}

/// The host's whole turn, with the scheduler and the server as processes.
async fn turn(real: &RealNode, scope: &Scope, node: &str) -> Result<()> {
    let object: Node = scope.nodes().get(node).await?;
    let status = object.status.context("a Node without status")?;
    let machine_id = status.node_info.context("no node info")?.machine_id;
    let id = rota_fleetlock::zincati_id(&machine_id).context("no Zincati id")?;
    let address: IpAddr = status
        .addresses
        .into_iter()
        .flatten()
        .find(|a| a.type_ == "InternalIP")
        .context("no InternalIP")?
        .address
        .parse()?;
    workload(scope, real, node).await?;
    let namespace = scope.namespace();
    let scheduler = RotaProcess::start(
        real.kubeconfig(),
        &[
            "scheduler".into(),
            format!("--namespace={namespace}"),
            "--identity=fleetlock-real".into(),
            "--lease-duration=4s".into(),
            "--take-up=5s".into(),
        ],
    )?;
    // The Node's lifecycle conditions are left to the other tests of the shared node.
    let server = RotaProcess::start(
        real.kubeconfig(),
        &[
            "fleetlock".into(),
            "--store=kube".into(),
            format!("--namespace={namespace}"),
            // On the node's address, which Zincati's requests leave from too (a connection
            // from it to the loopback would be a martian's).
            format!("--listen={address}:0"),
            "--health-interval=1s".into(),
            "--drain-force".into(),
            "--node-conditions=false".into(),
        ],
    )?;
    let logs = || format!("{}\n{}", server.log(), scheduler.log());
    let zincati = Zincati::new(server.serving().await?, &id, address)?;
    let store = KubeStore::connect(
        scope.client(),
        KubeStoreConfig {
            namespace: namespace.to_owned(),
            ..KubeStoreConfig::default()
        },
    )
    .await?;

    let started = zincati.steady_state().await?;
    ensure!(started.ok(), "{started:?}");
    let draining = std::cell::Cell::new(0);
    wait_for(
        "the host to be refused while it is drained",
        PATIENCE,
        || async {
            let answer = zincati.pre_reboot().await?;
            waiting(&answer)?;
            if answer.kind == "draining" {
                draining.set(draining.get() + 1);
            }
            tokio::time::sleep(PAUSE).await;
            Ok((draining.get() >= 3).then_some(()))
        },
    )
    .await
    .with_context(logs)?;
    ensure!(unschedulable(scope, node).await?, "not cordoned");
    let held = scope.pods().get("fcos-workload").await?;
    ensure!(
        pod_is_running(&held),
        "the budget did not hold the workload"
    );

    set_min_available(scope, "fcos-workload", 0).await?;
    wait_for("the host to be granted", PATIENCE, || async {
        let answer = zincati.pre_reboot().await?;
        if answer.ok() {
            return Ok(Some(()));
        }
        waiting(&answer)?;
        tokio::time::sleep(PAUSE).await;
        Ok(None)
    })
    .await
    .with_context(logs)?;
    ensure!(
        scope.pods().get_opt("fcos-workload").await?.is_none(),
        "granted before the kubelet had stopped the evicted container"
    );
    let name = NodeName::new(node)?;
    let record = store.node(&name).await?.context("no record")?;
    ensure!(
        record.state == NodeState::Rebooting && record.process == Some(Process::FleetLock),
        "{record:?}"
    );
    let early = zincati.steady_state().await?;
    ensure!(
        early.status == 409 && early.kind == "not_rebooted",
        "{early:?}"
    );

    // "The reboot": the new boot id the kubelet would report, and Zincati's start right after.
    // Should the kubelet's own status update come in between, it is written again.
    let mut back = None;
    for attempt in 0..3 {
        set_boot_id(scope, node, &format!("fleetlock-test-{attempt}")).await?;
        let answer = zincati.steady_state().await?;
        if answer.ok() {
            back = Some(answer);
            break;
        }
        ensure!(answer.kind == "not_rebooted", "{answer:?}");
    }
    ensure!(back.is_some(), "the server never saw the new boot id");
    wait_for("the host's window to end", PATIENCE, || async {
        let record = store.node(&name).await?;
        Ok(record
            .filter(|r| r.state == NodeState::Idle && r.slot.is_none())
            .map(drop))
    })
    .await
    .with_context(logs)?;
    ensure!(!unschedulable(scope, node).await?, "left cordoned");
    let entries = history(&store, node).await?;
    let finished = count(&entries, &Process::FleetLock, HistoryEvent::Finished);
    let failed = count(&entries, &Process::FleetLock, HistoryEvent::Failed);
    ensure!(finished == 1 && failed == 0, "{entries:?}");
    Ok(())
}

/// The shared node as the other tests expect it: no FleetLock host, uncordoned, and without
/// this test's RotaNode.
async fn restore(scope: &Scope, node: &str) -> Result<()> {
    label(scope, node, None).await?;
    scope
        .nodes()
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "unschedulable": false } })),
        )
        .await?;
    let rota_nodes: Api<rota_kube_api::RotaNode> = Api::all(scope.client());
    if rota_nodes.get_opt(node).await?.is_some() {
        rota_nodes.delete(node, &DeleteParams::default()).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_fedora_coreos_host_on_a_real_node_is_granted_only_once_its_containers_are_evicted()
-> Result<()> {
    let real = RealNode::get()?;
    let node = real.name()?.to_owned();
    let scope = real.scope("fleetlock-real").await?;
    rota_e2e::fleet::install_crd(scope.client()).await?;
    label(&scope, &node, Some("true")).await?;
    let turn = turn(&real, &scope, &node).await;
    // Also after a failure: the next test on the shared node must not meet this one's
    // workload, held by its budget.
    let restored = restore(&scope, &node).await;
    let cleaned = scope.cleanup().await;
    turn?;
    restored?;
    cleaned
}

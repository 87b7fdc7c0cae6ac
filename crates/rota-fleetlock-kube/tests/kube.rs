//! The FleetLock server's Kubernetes side on the real control plane of testenv/, with kwok
//! Nodes that report what a Fedora CoreOS host's kubelet would: which Node a client id is
//! ([`NodeIds`]), and the boot id a host's reboot changes ([`KubePlatform`]).

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use kube::api::{Patch, PatchParams};
use rota_core::NodeName;
use rota_e2e::fleetlock::{HostStatus, create_node, machine_id, report, set_boot_id};
use rota_e2e::testenv::{Scope, TestEnv, wait_for};
use rota_fleetlock::{Client, Ids, Platform, zincati_id};
use rota_fleetlock_kube::{HOST_LABEL, KubePlatform, NodeActionsConfig, NodeIds};
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(60);

fn status(scope: &Scope, n: u32, address: Option<&str>) -> Result<HostStatus> {
    Ok(HostStatus {
        machine_id: machine_id(scope, n),
        boot_id: "boot-1".into(),
        address: address.map(str::parse::<IpAddr>).transpose()?,
    })
}

fn id(status: &HostStatus) -> Result<String> {
    zincati_id(&status.machine_id).context("a machine id without a Zincati id")
}

async fn set_label(scope: &Scope, node: &str, value: Option<&str>) -> Result<()> {
    let patch = json!({ "metadata": { "labels": { HOST_LABEL: value } } });
    scope
        .nodes()
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Waits until `id` maps to `expected` (`None`: to no node); a fault on the way is a state
/// the watch has not yet left.
async fn wait_maps(ids: &NodeIds, id: &str, expected: Option<Client>) -> Result<()> {
    wait_for(&format!("id {id} to map to {expected:?}"), PATIENCE, || {
        let expected = expected.clone();
        async move { Ok((ids.client(id).await.ok() == Some(expected)).then_some(())) }
    })
    .await
}

/// Waits until looking `id` up fails with an error that contains each of `needles`.
async fn wait_fault(ids: &NodeIds, id: &str, needles: &[&str]) -> Result<()> {
    wait_for(&format!("id {id} to be a fault"), PATIENCE, || async {
        Ok(match ids.client(id).await {
            Err(e) => {
                let text = e.to_string();
                needles.iter().all(|n| text.contains(n)).then_some(text)
            }
            Ok(_) => None,
        })
    })
    .await
    .map(drop)
}

#[tokio::test]
async fn a_client_id_is_the_labelled_node_whose_machine_id_gives_it() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    ensure!(
        rota_e2e::fleetlock::HOST_LABEL == HOST_LABEL,
        "the tests' FleetLock host label is not the server's"
    );
    let scope = env.scope("fleetlock-ids").await?;
    let host_status = status(&scope, 1, Some("127.0.0.2"))?;
    let other_status = status(&scope, 2, Some("127.0.0.3"))?;
    let host = create_node(&scope, "host", true, &host_status).await?;
    let other = create_node(&scope, "other", false, &other_status).await?;
    let ids = NodeIds::follow(scope.client());
    tokio::time::timeout(PATIENCE, ids.ready())
        .await
        .context("the Nodes were not listed")??;
    let as_client = |node: &str, address: &str| -> Result<Option<Client>> {
        Ok(Some(Client {
            node: NodeName::new(node)?,
            address: Some(address.parse()?),
        }))
    };

    // The host's id is its Node, whose InternalIP its requests must come from.
    wait_maps(&ids, &id(&host_status)?, as_client(&host, "127.0.0.2")?).await?;
    // A Node that is no FleetLock host is no client's, and a name is no id.
    ensure!(ids.client(&id(&other_status)?).await?.is_none());
    ensure!(ids.client(&host).await?.is_none());
    ensure!(ids.client(&other_status.machine_id).await?.is_none());

    // The label makes a Node a host, and its removal makes it none.
    set_label(&scope, &other, Some("true")).await?;
    wait_maps(&ids, &id(&other_status)?, as_client(&other, "127.0.0.3")?).await?;
    set_label(&scope, &other, None).await?;
    wait_maps(&ids, &id(&other_status)?, None).await?;
    // A new address is the one requests must come from.
    let moved = HostStatus {
        address: Some("127.0.0.4".parse()?),
        ..host_status.clone()
    };
    report(&scope, &host, &moved).await?;
    wait_maps(&ids, &id(&host_status)?, as_client(&host, "127.0.0.4")?).await?;

    // Two hosts that report one machine id (a cloned image): their id maps to neither, and
    // the error names both.
    let clone = HostStatus {
        address: Some("127.0.0.3".parse()?),
        ..host_status.clone()
    };
    report(&scope, &other, &clone).await?;
    set_label(&scope, &other, Some("true")).await?;
    wait_fault(&ids, &id(&host_status)?, &[&host, &other, "machine id"]).await?;
    report(&scope, &other, &other_status).await?;
    wait_maps(&ids, &id(&host_status)?, as_client(&host, "127.0.0.4")?).await?;

    // A host whose Node lists no InternalIP: nobody's requests could be checked against it.
    let unaddressed = HostStatus {
        address: None,
        ..other_status.clone()
    };
    report(&scope, &other, &unaddressed).await?;
    wait_fault(&ids, &id(&other_status)?, &[&other, "InternalIP"]).await?;

    // A deleted host is nobody's.
    scope
        .nodes()
        .delete(&host, &Default::default())
        .await
        .context("deleting the host's Node")?;
    wait_maps(&ids, &id(&host_status)?, None).await?;
    scope.cleanup().await
}

#[tokio::test]
async fn the_platform_reads_the_boot_id_the_hosts_kubelet_reports() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("fleetlock-boot").await?;
    let host_status = status(&scope, 1, Some("127.0.0.2"))?;
    let host = create_node(&scope, "host", true, &host_status).await?;
    let platform = KubePlatform::new(
        scope.client(),
        NodeActionsConfig {
            drain: rota_kube_actions::DrainOptions::default(),
            health_pdbs: false,
            annotate_nodes: false,
            node_conditions: true,
            health: None,
        },
    );
    let name = NodeName::new(&host)?;
    ensure!(platform.boot_id(&name).await?.as_deref() == Some("boot-1"));
    set_boot_id(&scope, &host, "boot-2").await?;
    ensure!(platform.boot_id(&name).await?.as_deref() == Some("boot-2"));
    // A Node without one, or gone, has none.
    set_boot_id(&scope, &host, "").await?;
    ensure!(platform.boot_id(&name).await?.is_none());
    let gone = NodeName::new(format!("{host}-gone"))?;
    ensure!(platform.boot_id(&gone).await?.is_none());
    // One host's actions are made once: what a call leaves (the drain's progress) is there
    // for the next.
    let (first, second) = (platform.actions(&name), platform.actions(&name));
    if !std::sync::Arc::ptr_eq(&first, &second) {
        bail!("the host's actions were made twice");
    }
    scope.cleanup().await
}

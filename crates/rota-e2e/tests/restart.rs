//! `testenv/restart` on a control plane of the test's own (`rota_e2e::control_plane`): etcd and
//! the kube-apiserver SIGKILLed and started again come back on the same address with the same
//! data and certificates, the run's `pids` names the new processes, and `testenv/down` stops
//! them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rota_e2e::control_plane::{Component, OwnControlPlane};
use rota_e2e::testenv::wait_for;

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("kept".to_string(), name.to_string())])),
        ..ConfigMap::default()
    }
}

fn running(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/exe")).exists()
}

#[tokio::test]
async fn etcd_and_the_api_server_come_back_with_their_data() -> Result<()> {
    let Some(plane) = OwnControlPlane::start()? else {
        return Ok(());
    };
    let client = plane.env().client().await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    maps.create(&PostParams::default(), &config_map("before"))
        .await?;

    let mut old = Vec::new();
    for (i, component) in [Component::Etcd, Component::KubeApiserver]
        .into_iter()
        .enumerate()
    {
        let before = plane.pid(component)?;
        let after = plane.restart(component)?;
        ensure!(after != before, "{component:?} kept pid {before}");
        ensure!(
            !running(before),
            "the old {component:?} (pid {before}) still runs"
        );
        ensure!(
            running(after),
            "the new {component:?} (pid {after}) does not run"
        );
        ensure!(
            plane.pid(component)? == after,
            "pids does not name the new {component:?}"
        );
        old.push(after);
        // The same client (address, CA, token) reads what was written before, and writes.
        let name = format!("after-{i}");
        let kept = wait_for("the API to answer", Duration::from_secs(60), || async {
            Ok(maps.get_opt("before").await.ok().flatten())
        })
        .await?;
        ensure!(kept.data == config_map("before").data, "{kept:?}");
        maps.create(&PostParams::default(), &config_map(&name))
            .await
            .with_context(|| format!("writing after restarting {component:?}"))?;
    }
    ensure!(maps.get_opt("after-0").await?.is_some());

    let run = plane.run_dir().to_path_buf();
    drop(plane);
    for pid in old {
        ensure!(!running(pid), "testenv/down left pid {pid} running");
    }
    ensure!(!run.exists(), "testenv/down left {}", run.display());
    Ok(())
}

//! The drain against an API server that cannot be reached for a while, and without the permissions
//! it needs.
//!
//! Against a real control plane (testenv/): kube-apiserver with the disruption,
//! deployment and daemonset controllers, kwok playing the kubelets. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use rota_actions::NodeActions;
use rota_core::NodeName;
use rota_e2e::proxy::Proxy;
use rota_e2e::testenv::{TestEnv, wait_for};
use rota_kube_actions::{Error, KubeActions};
use rota_kube_client::CallError;

use common::{TIMEOUT, node_of, options, running_pods, same_pod_exists};

/// The API server out of reach as the drain starts (a restart of the control plane, the
/// network to it down): the drain starts again after a pause, where the cluster is, instead of
/// failing the node's window, and finishes once the API server answers. The agent reaches the
/// API server through a proxy that the test cuts.
#[tokio::test]
async fn a_drain_that_meets_an_unreachable_api_server_starts_again_and_finishes() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-outage").await?;
    scope.create_ready_nodes(2).await?;
    scope.create_deployment("api", 1, None).await?;
    let first = running_pods(&scope, "api", 1).await?.remove(0);
    let node = node_of(&first).context("running pod without a node")?;

    let mut config = env.config().await?;
    let server: SocketAddr = config
        .cluster_url
        .authority()
        .context("the API server's address")?
        .as_str()
        .parse()?;
    let proxy = Proxy::start(server).await?;
    config.cluster_url = format!("https://{}", proxy.addr()).parse()?;
    let actions = KubeActions::new(
        rota_kube_client::client(config)?,
        NodeName::new(node.clone())?,
        options(),
        "true".into(),
        None,
    );
    proxy.cut();
    let outage = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.restore();
    };
    let (drained, ()) = tokio::join!(tokio::time::timeout(TIMEOUT, actions.drain()), outage);
    drained.context("the drain did not finish")??;
    ensure!(proxy.refused() > 0, "the drain never met the outage");
    ensure!(actions.is_cordoned().await?);
    ensure!(!same_pod_exists(&scope, &first).await?);
    scope.cleanup().await
}

#[tokio::test]
async fn a_missing_permission_names_the_verb_and_the_resource() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-rbac").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let admin = scope.client();
    let weak = scope.service_account_client(env, "weak").await?;

    let err = rota_kube_actions::drain(&weak, &node, &options())
        .await
        .err()
        .context("a drain without any permission succeeded")?;
    ensure!(
        matches!(
            &err,
            Error::Call(CallError::Forbidden {
                verb: "patch",
                resource: "nodes",
                ..
            })
        ),
        "{err:?}"
    );
    let message = err.to_string();
    ensure!(
        message.contains("`patch`") && message.contains("`nodes`") && message.contains(&node),
        "{message}"
    );

    // Allowed to cordon, not to list pods: the next missing rule is named.
    let role = scope
        .grant("cordon", "weak", "nodes", &["get", "patch"])
        .await?;
    let err = wait_for("the cordon to be allowed", TIMEOUT, || async {
        match rota_kube_actions::drain(&weak, &node, &options()).await {
            Err(Error::Call(CallError::Forbidden { verb: "patch", .. })) => Ok(None),
            Err(e) => Ok(Some(e)),
            Ok(()) => bail!("a drain without permission to list pods succeeded"),
        }
    })
    .await?;
    ensure!(
        matches!(
            &err,
            Error::Call(CallError::Forbidden {
                verb: "list",
                resource: "pods",
                ..
            })
        ),
        "{err:?}"
    );
    ensure!(rota_kube_actions::is_cordoned(&admin, &node).await?);

    scope.revoke(&role).await?;
    scope.cleanup().await
}

//! What the store checks of the cluster as it connects (`rota_kube_api::preflight`), against the
//! real API server of `testenv/`: a CRD it does not serve, a namespace that does not exist and
//! credentials it refuses are each named, with how to fix them. The shared cluster's CRDs are
//! never deleted (other tests use them): the missing ones are resources that were never
//! installed, asked about through the same check.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::DeleteParams;
use rota_kube_api::ApiError;
use rota_kube_api::preflight::{ROTA_RESOURCES, ServedResource, check_resources};
use rota_store_kube::{KubeError, KubeStore, KubeStoreConfig};

/// The start-up check's error, as the Kubernetes store raised it.
fn kube_error(e: &rota_store::Error) -> Option<&ApiError> {
    let source = match e {
        rota_store::Error::Backend(source) | rota_store::Error::Unavailable(source) => source,
        _ => return None,
    };
    match source.downcast_ref()? {
        KubeError::Objects(e) => Some(e),
        _ => None,
    }
}

async fn connect(client: kube::Client, namespace: &str) -> Result<KubeStore, rota_store::Error> {
    KubeStore::connect(
        client,
        KubeStoreConfig {
            namespace: namespace.into(),
            ..KubeStoreConfig::default()
        },
    )
    .await
}

#[tokio::test]
async fn a_crd_the_api_server_does_not_serve_is_named_with_how_to_install_it() {
    let Some(env) = common::env() else { return };
    let client = env.client().await.expect("a client");
    common::install_crd(client.clone()).await;
    check_resources(&client, &ROTA_RESOURCES)
        .await
        .expect("rota's CRDs are installed");

    // One never installed in a group the API server serves (rota.dev), one in a group it
    // does not know at all: both are a 404, the second not even a Status.
    let mut wanted = ROTA_RESOURCES.to_vec();
    wanted.push(ServedResource {
        name: "neverinstalleds.rota.dev",
        version: "v1alpha1",
    });
    wanted.push(ServedResource {
        name: "widgets.absent.rota.dev",
        version: "v1",
    });
    let failed = check_resources(&client, &wanted)
        .await
        .expect_err("two of them are not installed");
    match &failed {
        ApiError::CrdMissing { resources } => assert_eq!(
            resources,
            &["neverinstalleds.rota.dev", "widgets.absent.rota.dev"]
        ),
        other => panic!("not a missing CRD: {other:?}"),
    }
    let message = failed.to_string();
    for expected in [
        "the CRDs neverinstalleds.rota.dev, widgets.absent.rota.dev are not installed",
        "`kubectl apply -f charts/rota/crds/`",
        "`--include-crds`",
    ] {
        assert!(message.contains(expected), "no {expected:?} in: {message}");
    }
}

/// Authorization comes before the 404 of a resource that is not served: a client that may not
/// list is still told which CRD is missing, and otherwise that it may not list.
#[tokio::test]
async fn a_missing_crd_is_named_to_a_client_without_permissions() {
    let Some(env) = common::env() else { return };
    let scope = env.scope("preflight-rbac").await.expect("a scope");
    common::install_crd(scope.client()).await;
    let weak = scope
        .service_account_client(env, "weak")
        .await
        .expect("a client without permissions");
    let mut wanted = ROTA_RESOURCES.to_vec();
    wanted.push(ServedResource {
        name: "neverinstalleds.rota.dev",
        version: "v1alpha1",
    });
    match check_resources(&weak, &wanted).await {
        Err(ApiError::CrdMissing { resources }) => {
            assert_eq!(resources, ["neverinstalleds.rota.dev"])
        }
        other => panic!("not a missing CRD: {other:?}"),
    }
    let refused = check_resources(&weak, &ROTA_RESOURCES)
        .await
        .expect_err("it may not list them");
    assert!(refused.is_forbidden(), "{refused:?}");
    let message = refused.to_string();
    assert!(
        message.contains("forbidden to list rotanodes.rota.dev (all)"),
        "{message}"
    );
    scope.cleanup().await.expect("clean up");
}

#[tokio::test]
async fn a_store_in_a_namespace_that_does_not_exist_says_how_to_create_it() {
    let Some(env) = common::env() else { return };
    let scope = env.scope("preflight-ns").await.expect("a scope");
    common::install_crd(scope.client()).await;
    let absent = format!("{}-absent", scope.id());
    let failed = connect(scope.client(), &absent)
        .await
        .err()
        .expect("the namespace does not exist");
    assert!(
        matches!(kube_error(&failed), Some(ApiError::NamespaceMissing { namespace }) if *namespace == absent),
        "{failed:?}"
    );
    let message = failed.to_string();
    for expected in [
        format!("the namespace {absent} does not exist"),
        format!("`kubectl create namespace {absent}`"),
        "namespace.create=true".to_string(),
    ] {
        assert!(message.contains(&expected), "no {expected:?} in: {message}");
    }
    // The scope's own namespace exists: the same check lets the store connect.
    connect(scope.client(), scope.namespace())
        .await
        .expect("connect in a namespace that exists");
    scope.cleanup().await.expect("clean up");
}

/// The token of a ServiceAccount that was deleted, as a pod keeps it: the API server refuses
/// it (401), and the store says so instead of the bare refusal of its first call.
#[tokio::test]
async fn a_store_whose_service_account_was_deleted_is_told_its_token_is_refused() {
    let Some(env) = common::env() else { return };
    let scope = env.scope("preflight-401").await.expect("a scope");
    common::install_crd(scope.client()).await;
    let orphan = scope
        .service_account_client(env, "deleted")
        .await
        .expect("a service account's client");
    Api::<ServiceAccount>::namespaced(scope.client(), scope.namespace())
        .delete("deleted", &DeleteParams::default())
        .await
        .expect("delete the service account");
    // The token authenticator looks the account up in a cache that follows the deletion.
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = loop {
        match connect(orphan.clone(), scope.namespace()).await {
            Err(e) if matches!(kube_error(&e), Some(ApiError::Unauthorized)) => break e,
            other if Instant::now() > deadline => panic!(
                "the token of a deleted service account still works: {:?}",
                other.err()
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let message = failed.to_string();
    for expected in ["401 Unauthorized", "ServiceAccount", "serviceAccountName"] {
        assert!(message.contains(expected), "no {expected:?} in: {message}");
    }
    scope.cleanup().await.expect("clean up");
}

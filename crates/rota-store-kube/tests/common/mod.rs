//! Shared by the tests that need the control plane of `testenv/` (never a mock of the API).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use rota_e2e::testenv::{Scope, TestEnv};
use rota_store::Store;
use rota_store_kube::{KubeStore, KubeStoreConfig, crds};

/// The environment, or `None` when `ROTA_E2E_SKIP=1`; panics (the test fails) when no control
/// plane can be had.
pub fn env() -> Option<&'static TestEnv> {
    match TestEnv::get() {
        Ok(env) => env,
        Err(e) => panic!("{e:#}"),
    }
}

/// Installs (or updates) rota's CRDs and waits until the API server serves them.
pub async fn install_crd(client: kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in crds() {
        let name = crd.metadata.name.clone().expect("the CRD has a name");
        api.patch(
            &name,
            &PatchParams::apply("rota-store-kube-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply the CRD {name}: {e}"));
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("the CRD {name} is established within a minute"))
        .expect("watch the CRD");
    }
}

/// A store of its own: a fresh namespace for the Leases and the ConfigMap, and the scope id as
/// RotaNode name prefix.
pub async fn scoped_store(env: &TestEnv, name: &str) -> (Scope, KubeStore) {
    let scope = env.scope(name).await.expect("a test scope");
    install_crd(scope.client()).await;
    let store = KubeStore::connect(scope.client(), store_config(&scope))
        .await
        .expect("connect the store");
    (scope, store)
}

/// The store configuration of `scope`: its namespace, and its id as RotaNode name prefix.
pub fn store_config(scope: &Scope) -> KubeStoreConfig {
    KubeStoreConfig {
        namespace: scope.namespace().into(),
        name_prefix: format!("{}-", scope.id()),
        ..KubeStoreConfig::default()
    }
}

#[allow(dead_code, reason = "used by the conformance tests only")]
pub async fn make() -> Option<Arc<dyn Store>> {
    let env = env()?;
    Some(Arc::new(scoped_store(env, "conformance").await.1))
}

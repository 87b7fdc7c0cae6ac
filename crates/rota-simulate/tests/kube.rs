//! `rota simulate --store kube` end to end against the real control plane of `testenv/`: kwok
//! nodes with a pod each, real cordon, eviction and uncordon, the Kubernetes store; only reboots
//! are simulated. Attaches to `ROTA_TESTENV_KUBECONFIG`, else starts a control plane; fails
//! without one unless `ROTA_E2E_SKIP=1`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Api;
use kube::api::ListParams;
use rota_e2e::testenv::TestEnv;
use rota_simulate::{KubeTarget, Options, StoreChoice, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rollout_reboots_every_node_once_never_more_than_k_at_once() {
    let env = match TestEnv::get() {
        Ok(Some(env)) => env,
        Ok(None) => return,
        Err(e) => panic!("{e:#}"),
    };
    let config = env.config().await.expect("the test kubeconfig");
    let client = rota_drain::client(config).expect("a client");
    let namespace = format!("rota-simulate-test-{}", std::process::id());
    let summary = run(
        Options {
            nodes: 6,
            concurrency: 2,
            maintenance_time: Duration::from_millis(300),
            store: StoreChoice::Kube(KubeTarget {
                client: client.clone(),
                namespace: Some(namespace.clone()),
            }),
        },
        |_, _| {},
    )
    .await
    .expect("simulation runs");
    assert_eq!(summary.store, "kube", "{summary:?}");
    assert_eq!(summary.completed, 6, "{summary:?}");
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert!(summary.max_concurrent <= 2, "{summary:?}");

    // The run cleans up after itself: its nodes are gone and its namespace is going.
    let nodes: Api<Node> = Api::all(client.clone());
    let left = nodes
        .list(&ListParams::default().labels(&format!("rota.dev/simulation={namespace}")))
        .await
        .expect("list nodes");
    assert!(
        left.items
            .iter()
            .all(|n| n.metadata.deletion_timestamp.is_some()),
        "simulated nodes left behind: {:?}",
        left.items
            .iter()
            .map(|n| &n.metadata.name)
            .collect::<Vec<_>>()
    );
    let ns = Api::<Namespace>::all(client)
        .get_opt(&namespace)
        .await
        .expect("read the namespace");
    assert!(
        ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "namespace {namespace} left behind"
    );
}

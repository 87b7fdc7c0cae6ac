//! The agent's start-up check of its RBAC permissions (`rota_kube_api::permissions`), against the
//! real authorizer of `testenv/`'s API server: a service account without a permission is told
//! which ones it lacks, and a granted one is no longer among them. That the chart grants every
//! permission the check looks for is tested with the chart (rota-kube-actions's `tests/chart.rs`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rota_kube_api::permissions::{agent_permissions, missing};

#[tokio::test]
async fn an_agent_without_permissions_is_told_each_one_it_lacks() {
    let Some(env) = common::env() else { return };
    let scope = env.scope("permissions").await.expect("a scope");
    let weak = scope
        .service_account_client(env, "weak")
        .await
        .expect("a client without permissions");
    let wanted = agent_permissions("rota-system", true);
    let lacking = missing(&weak, &wanted).await.expect("the reviews");
    assert_eq!(lacking, wanted, "a new service account may do nothing");

    // Granted the cordon: it is no longer among the missing, the rest still are.
    let role = scope
        .grant("cordon", "weak", "nodes", &["get", "patch"])
        .await
        .expect("a grant");
    let granted = |p: &rota_kube_api::permissions::Permission| {
        p.group.is_empty()
            && p.resource == "nodes"
            && p.subresource.is_none()
            && matches!(p.verb, "get" | "patch")
    };
    let expected: Vec<_> = wanted.iter().filter(|p| !granted(p)).cloned().collect();
    assert_eq!(expected.len(), wanted.len() - 2);
    // RBAC reaches the authorizer's cache a moment after the write.
    let deadline = Instant::now() + Duration::from_secs(30);
    let lacking = loop {
        let lacking = missing(&weak, &wanted).await.expect("the reviews");
        if lacking == expected || Instant::now() > deadline {
            break lacking;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lacking, expected, "the granted ones are no longer missing");
    let shown: Vec<String> = lacking.iter().map(ToString::to_string).collect();
    assert!(
        shown.contains(&"`create` on `pods/eviction`".to_string()),
        "{shown:?}"
    );

    scope.revoke(&role).await.expect("revoke the grant");
    scope.cleanup().await.expect("clean up");
}

/// The start-up check costs one request, a rules review in rota's namespace (the cluster-wide
/// rules come with it), however many permissions it checks: not one review per permission.
#[tokio::test]
async fn the_check_costs_one_request_for_every_permission() {
    let Some(env) = common::env() else { return };
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let count =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            request
        });
    let config = env.config().await.expect("the test kubeconfig");
    let admin = kube::client::ClientBuilder::try_from(config)
        .expect("a client")
        .with_layer(&count)
        .build();
    let wanted = agent_permissions("rota-system", true);
    assert!(wanted.len() > 30, "{} permissions", wanted.len());
    let lacking = missing(&admin, &wanted).await.expect("the review");
    assert_eq!(lacking, Vec::new(), "the test's admin may do everything");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "requests for the check");
}

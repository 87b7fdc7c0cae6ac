//! [`KubeActions`], the agent's node actions in a cluster: the drain onto another node and the
//! uncordon, the cordon's and the uncordon's node labels, and the pending taint.
//!
//! Against a real control plane (testenv/): kube-apiserver with the disruption,
//! deployment and daemonset controllers, kwok playing the kubelets. No mocks.
//!
//! Timeouts here bound how long a test may hang; no test asserts how fast anything is.

mod common;

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use rota_actions::NodeActions;
use rota_core::NodeName;
use rota_e2e::testenv::TestEnv;
use rota_kube_actions::KubeActions;
use serde_json::json;

use common::{TIMEOUT, node_of, options, running_pods, same_pod_exists};

#[tokio::test]
async fn kube_actions_drain_a_deployment_pod_onto_another_node_and_uncordon() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-actions").await?;
    let nodes = scope.create_ready_nodes(2).await?;
    scope.create_deployment("api", 1, None).await?;
    let first = running_pods(&scope, "api", 1).await?.remove(0);
    let first_node = node_of(&first).context("running pod without a node")?;
    ensure!(nodes.contains(&first_node));

    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(first_node.clone())?,
        options(),
        "true".into(),
        Some("test \"$ROTA_NODE\" = ".to_owned() + &first_node),
    );
    ensure!(!actions.is_cordoned().await?);
    tokio::time::timeout(TIMEOUT, actions.drain())
        .await
        .context("the drain did not finish")??;
    ensure!(actions.is_cordoned().await?);
    ensure!(!same_pod_exists(&scope, &first).await?);
    let second = running_pods(&scope, "api", 1).await?.remove(0);
    let second_node = node_of(&second).context("replacement pod without a node")?;
    ensure!(
        second_node != first_node && nodes.contains(&second_node),
        "the replacement landed on {second_node}, not the other test node"
    );

    // Draining a drained node again is a no-op (the agent repeats it after a restart).
    tokio::time::timeout(TIMEOUT, actions.drain())
        .await
        .context("the repeated drain did not finish")??;
    ensure!(same_pod_exists(&scope, &second).await?);

    actions.health().await?;
    actions
        .reboot()
        .await?
        .await
        .context("the reboot command's result was dropped")??;
    actions.uncordon().await?;
    ensure!(!actions.is_cordoned().await?);

    let failing = KubeActions::new(
        scope.client(),
        NodeName::new(first_node.clone())?,
        options(),
        "true".into(),
        Some("exit 3".into()),
    );
    let err = failing
        .health()
        .await
        .err()
        .context("a failing health command passed")?;
    ensure!(err.to_string().contains("exit 3"), "{err}");

    let missing = KubeActions::new(
        scope.client(),
        NodeName::new(scope.node_name("missing"))?,
        options(),
        "true".into(),
        None,
    );
    let err = missing
        .health()
        .await
        .err()
        .context("a missing node was healthy")?;
    ensure!(err.to_string().contains("does not exist"), "{err}");
    scope.cleanup().await
}

/// The labels of the cordon go on the Node with the cordon and stay while the node is out
/// (a repeated drain, after an agent restart, keeps them); the uncordon sets its own and removes
/// the cordon's others. Labels set on the Node by anyone else stay as they are.
#[tokio::test]
async fn the_cordon_and_the_uncordon_set_their_node_labels() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-labels").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(scope.client());
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "team": "payments" } } })),
        )
        .await?;
    let labels = |text: &str| -> Result<BTreeMap<String, String>> {
        Ok(rota_kube_actions::parse_labels(text)?.into_iter().collect())
    };
    let mut drain = options();
    drain.labels = rota_kube_actions::NodeLabels::new(
        labels("kured=rebooting,example.com/out=true")?,
        labels("kured=done")?,
    );
    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(node.clone())?,
        drain,
        "true".into(),
        None,
    );
    let label =
        |object: &k8s_openapi::api::core::v1::Node, key: &str| object.labels().get(key).cloned();
    for attempt in ["the drain", "the repeated drain"] {
        tokio::time::timeout(TIMEOUT, actions.drain())
            .await
            .with_context(|| format!("{attempt} did not finish"))??;
        let object = nodes.get(&node).await?;
        ensure!(
            label(&object, "kured").as_deref() == Some("rebooting")
                && label(&object, "example.com/out").as_deref() == Some("true"),
            "after {attempt} the Node's labels are {:?}",
            object.labels()
        );
        ensure!(actions.is_cordoned().await?);
    }
    actions.uncordon().await?;
    let object = nodes.get(&node).await?;
    ensure!(
        label(&object, "kured").as_deref() == Some("done")
            && label(&object, "example.com/out").is_none()
            && label(&object, "team").as_deref() == Some("payments"),
        "after the uncordon the Node's labels are {:?}",
        object.labels()
    );
    ensure!(!actions.is_cordoned().await?);
    scope.cleanup().await
}

/// A node waiting for maintenance carries the taint `KEY:PreferNoSchedule` and loses it again;
/// the Node's other taints stay as they are, and marking twice changes nothing.
#[tokio::test]
async fn a_node_marked_pending_carries_a_prefer_no_schedule_taint_until_unmarked() -> Result<()> {
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-taint").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(scope.client());
    let taints = || async {
        let object = nodes.get(&node).await?;
        anyhow::Ok(
            object
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect::<Vec<_>>(),
        )
    };
    // Someone else's taint, which the marks must keep.
    let mut object = nodes.get(&node).await?;
    let spec = object.spec.get_or_insert_default();
    spec.taints
        .get_or_insert_default()
        .push(k8s_openapi::api::core::v1::Taint {
            key: "team".into(),
            value: Some("payments".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    nodes
        .replace(&node, &PostParams::default(), &object)
        .await?;
    let before = taints().await?;
    ensure!(
        before.contains(&"team:NoSchedule".to_string()),
        "{before:?}"
    );
    let actions = KubeActions::new(
        scope.client(),
        NodeName::new(node.clone())?,
        options(),
        "true".into(),
        None,
    )
    .pending_taint(Some("rota.dev/pending".into()));
    for _ in 0..2 {
        actions.mark_pending(true).await?;
        let now = taints().await?;
        let mut expected = before.clone();
        expected.push("rota.dev/pending:PreferNoSchedule".into());
        ensure!(now == expected, "marked: {now:?}, before: {before:?}");
    }
    for _ in 0..2 {
        actions.mark_pending(false).await?;
        let now = taints().await?;
        ensure!(now == before, "unmarked: {now:?}, before: {before:?}");
    }

    // Without a key there is nothing to mark, and nothing is asked.
    let plain = KubeActions::new(
        scope.client(),
        NodeName::new(scope.node_name("missing"))?,
        options(),
        "true".into(),
        None,
    );
    plain.mark_pending(true).await?;
    scope.cleanup().await
}

/// With `--annotate-nodes` the Node carries `rota.dev/reboot-in-progress` from the reboot's
/// start until it is back in service, and the last reboot's start and end after; a window
/// without a reboot leaves them as they were, an unlock's uncordon ends the reboot in progress
/// without an end, and a node rota did not cordon gets them in a write of their own.
#[tokio::test]
async fn annotated_nodes_carry_the_reboot_in_progress_until_they_are_back_in_service() -> Result<()>
{
    let Some(env) = TestEnv::get()? else {
        return Ok(());
    };
    let scope = env.scope("drain-annotations").await?;
    let node = scope.create_ready_nodes(1).await?.remove(0);
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(scope.client());
    let annotation = |key: &'static str| {
        let nodes = nodes.clone();
        let node = node.clone();
        async move { anyhow::Ok(nodes.get(&node).await?.annotations().get(key).cloned()) }
    };
    let name = NodeName::new(node.clone())?;
    let actions = || KubeActions::new(scope.client(), name.clone(), options(), "true".into(), None);
    let annotated = actions().annotate_nodes(true);
    const IN_PROGRESS: &str = rota_kube_actions::REBOOT_IN_PROGRESS_ANNOTATION;
    const STARTED: &str = rota_kube_actions::LAST_REBOOT_STARTED_ANNOTATION;
    const FINISHED: &str = rota_kube_actions::LAST_REBOOT_FINISHED_ANNOTATION;

    // A window with a reboot: nothing at the cordon, the start right before the reboot...
    tokio::time::timeout(TIMEOUT, annotated.drain())
        .await
        .context("the drain did not finish")??;
    for key in [IN_PROGRESS, STARTED, FINISHED] {
        ensure!(annotation(key).await?.is_none(), "{key} after the drain");
    }
    // 2024-06-01T12:34:56.789Z, as the store records it.
    annotated.reboot_starting(1_717_245_296_789).await?;
    let at = "2024-06-01T12:34:56Z";
    ensure!(annotation(IN_PROGRESS).await?.as_deref() == Some(at));
    ensure!(annotation(STARTED).await?.as_deref() == Some(at));
    ensure!(annotation(FINISHED).await?.is_none());
    // ...and the end with the uncordon, once healthy.
    annotated.health().await?;
    let before = jiff::Timestamp::now().as_second();
    annotated.return_to_service(true).await?;
    ensure!(!annotated.is_cordoned().await?, "not uncordoned");
    ensure!(
        annotation(IN_PROGRESS).await?.is_none(),
        "still in progress"
    );
    ensure!(annotation(STARTED).await?.as_deref() == Some(at));
    let finished = annotation(FINISHED).await?.context("no end")?;
    ensure!(
        finished.parse::<jiff::Timestamp>()?.as_second() >= before,
        "the end {finished} is before the return to service"
    );

    // A window without a reboot changes none of them.
    tokio::time::timeout(TIMEOUT, annotated.drain())
        .await
        .context("the second drain did not finish")??;
    annotated.health().await?;
    annotated.return_to_service(true).await?;
    ensure!(!annotated.is_cordoned().await?, "not uncordoned");
    ensure!(annotation(FINISHED).await?.as_deref() == Some(finished.as_str()));
    ensure!(annotation(IN_PROGRESS).await?.is_none());

    // A failed reboot that an operator unlocks: the uncordon ends it, without an end.
    annotated.reboot_starting(1_717_300_000_000).await?;
    ensure!(annotation(IN_PROGRESS).await?.is_some());
    annotated.uncordon().await?;
    ensure!(
        annotation(IN_PROGRESS).await?.is_none(),
        "the unlock kept it"
    );
    ensure!(annotation(FINISHED).await?.as_deref() == Some(finished.as_str()));

    // A node that rota did not cordon: the end is a write of its own, and it stays as it is.
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "unschedulable": true } })),
        )
        .await?;
    annotated.reboot_starting(1_717_400_000_000).await?;
    annotated.health().await?;
    annotated.return_to_service(false).await?;
    ensure!(
        annotated.is_cordoned().await?,
        "uncordoned a node rota did not cordon"
    );
    ensure!(annotation(IN_PROGRESS).await?.is_none());
    let again = annotation(FINISHED).await?.context("no end")?;
    ensure!(again.parse::<jiff::Timestamp>()?.as_second() >= before);

    // Without --annotate-nodes: no annotation, also not at the reboot's start (the last
    // start stays the annotated one's).
    let plain = actions();
    plain.reboot_starting(1_717_500_000_000).await?;
    plain.health().await?;
    plain.return_to_service(true).await?;
    ensure!(annotation(IN_PROGRESS).await?.is_none());
    ensure!(annotation(STARTED).await?.as_deref() == Some("2024-06-03T07:33:20Z"));
    scope.cleanup().await
}

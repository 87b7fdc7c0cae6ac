//! Procedures on the real control plane of `testenv/`: what the API server refuses (the
//! Procedure CRD's validation), scripts read from ConfigMaps, and the Event of a failed
//! attempt. The Procedures' status is the scheduler's: `crates/rota-scheduler/tests`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use rota_core::{ConfigMapKey, NodeName, NodeState, ProcedureSpec, Process};
use rota_e2e::testenv::Scope;
use rota_kube_api::Procedure;
use rota_store::{Outcome, Session, Store, StoreExt, Transition, WindowChange};
use rota_store_kube::KubeStore;
use serde_json::json;

const TTL: Duration = Duration::from_secs(60);

fn name(n: &str) -> NodeName {
    NodeName::new(n).expect("valid node name")
}

fn dynamic(scope: &Scope) -> Api<DynamicObject> {
    Api::all_with(
        scope.client(),
        &kube::api::ApiResource::erase::<Procedure>(&()),
    )
}

/// Creates a Procedure from raw JSON, as `kubectl apply` would send it. Procedures are
/// cluster-scoped and agents of other tests run at the same time: a spec that names no nodes
/// and no selector gets a node list of nobody, so that no agent takes it up.
async fn create_raw(scope: &Scope, name: &str, mut spec: serde_json::Value) -> kube::Result<()> {
    if let Some(fields) = spec.as_object_mut()
        && !fields.contains_key("nodes")
        && !fields.contains_key("nodeSelector")
    {
        fields.insert("nodes".into(), json!([format!("{}-nobody", scope.id())]));
    }
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rota.dev/v1alpha1",
        "kind": "Procedure",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("a Procedure object");
    dynamic(scope)
        .create(&PostParams::default(), &object)
        .await
        .map(|_| ())
}

#[tokio::test]
async fn the_api_server_refuses_a_bad_priority_naming_the_value_and_the_range() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-crd").await;
    let cases = [
        (json!("100"), "invalid priority \"100\""),
        (json!("ab"), "invalid priority \"ab\""),
        (json!("-1"), "invalid priority \"-1\""),
        (json!(100), "invalid priority 100"),
        (json!(-1), "invalid priority -1"),
    ];
    for (i, (priority, expected)) in cases.into_iter().enumerate() {
        let err = create_raw(
            &scope,
            &format!("{}-bad{i}", scope.id()),
            json!({ "script": "true", "priority": priority }),
        )
        .await
        .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains("spec.priority") && text.contains(expected) && text.contains("00..99"),
            "{priority}: {text}"
        );
    }
    for (i, priority) in [json!("07"), json!("7"), json!(7), json!(0), json!("99")]
        .into_iter()
        .enumerate()
    {
        create_raw(
            &scope,
            &format!("{}-good{i}", scope.id()),
            json!({ "script": "true", "priority": priority }),
        )
        .await
        .unwrap_or_else(|e| panic!("{priority} is a valid priority: {e}"));
    }
    let priorities: Vec<u8> = store
        .procedures()
        .await
        .expect("procedures")
        .iter()
        .map(|p| p.spec.priority.value())
        .collect();
    assert_eq!(
        priorities,
        [7, 7, 7, 0, 99],
        "strings and integers read back"
    );
}

#[tokio::test]
async fn the_api_server_refuses_what_rota_would_refuse() {
    let Some(env) = common::env() else { return };
    let (scope, _store) = common::scoped_store(env, "mop-crd-rules").await;
    let id = scope.id().to_string();
    let refused = [
        (
            format!("{id}-both"),
            json!({ "script": "true", "scriptConfigMap": { "name": "a", "key": "b" } }),
            "give exactly one of script and scriptConfigMap",
        ),
        (
            format!("{id}-none"),
            json!({ "priority": "05" }),
            "give exactly one of script and scriptConfigMap",
        ),
        (
            format!("{id}.dotted"),
            json!({ "script": "true" }),
            "must be a DNS-1123 label",
        ),
        (
            format!("{id}-pin"),
            json!({ "script": "true", "sha256": "ABC" }),
            "spec.sha256",
        ),
        (
            format!("{id}-nodes"),
            json!({ "script": "true", "nodes": ["node 1"] }),
            "spec.nodes[0]",
        ),
    ];
    for (object, spec, expected) in refused {
        let err = create_raw(&scope, &object, spec)
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(expected), "{object}: {err}");
    }

    let object = format!("{id}-kept");
    let nobody = format!("{id}-nobody");
    create_raw(&scope, &object, json!({ "script": "true" }))
        .await
        .expect("a valid procedure");
    let created = dynamic(&scope).get(&object).await.expect("read back");
    assert_eq!(
        created.data["spec"],
        json!({ "script": "true", "nodes": [nobody], "priority": "99", "drain": true, "reboot": false, "timeout": "1h" }),
        "the defaults are filled in"
    );
    let err = dynamic(&scope)
        .patch(
            &object,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "script": "rm -rf /" } })),
        )
        .await
        .expect_err("immutable");
    assert!(
        err.to_string().contains("a procedure is immutable"),
        "{err}"
    );
}

/// An agent's handle lists procedures from the API server's cache, which may not yet hold a
/// procedure created a moment ago: the handle's own submissions must show all the same.
#[tokio::test]
async fn an_agents_handle_lists_every_procedure_it_has_just_submitted() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-own").await;
    let s = store
        .open_session(&name("mop-own-agent"), TTL)
        .await
        .expect("an agent's session");
    for i in 0..50 {
        let mut spec = ProcedureSpec::new(format!("own-{i:02}"), "true");
        spec.nodes = vec![name(&format!("{}-nobody", scope.id()))];
        store.submit_procedure(&spec).await.expect("submit");
        let listed = store.procedures().await.expect("procedures");
        assert_eq!(
            listed.len(),
            i + 1,
            "after submitting own-{i:02}: {listed:?}"
        );
    }
    store.close_session(&s).await.expect("close the session");
    // Procedures are cluster-scoped: the next runs' lists should not carry these.
    let prefix = &store.config().name_prefix;
    for i in 0..50 {
        dynamic(&scope)
            .delete(&format!("{prefix}own-{i:02}"), &Default::default())
            .await
            .expect("delete the procedure");
    }
}

#[tokio::test]
async fn a_script_comes_from_its_config_map_in_the_rota_namespace() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-cm").await;
    let maps: Api<ConfigMap> = Api::namespaced(scope.client(), scope.namespace());
    maps.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("scripts".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "kernel.sh".into(),
                "apt-get -y upgrade".into(),
            )])),
            ..ConfigMap::default()
        },
    )
    .await
    .expect("create the ConfigMap");
    let from_map = |name: &str, map: &str, key: &str| {
        let mut spec = ProcedureSpec::new(name, "");
        // Procedures are cluster-scoped: one for every node would reach other tests' agents.
        spec.node_selector = scope.labels();
        spec.script = None;
        spec.script_config_map = Some(ConfigMapKey {
            name: map.into(),
            key: key.into(),
        });
        spec
    };
    for spec in [
        from_map("kernel", "scripts", "kernel.sh"),
        from_map("no-key", "scripts", "other.sh"),
        from_map("no-map", "missing", "kernel.sh"),
    ] {
        store.submit_procedure(&spec).await.expect("submit");
    }
    let scripts: Vec<(String, Option<String>)> = store
        .procedures()
        .await
        .expect("procedures")
        .into_iter()
        .map(|p| (p.spec.name, p.script))
        .collect();
    assert_eq!(
        scripts,
        [
            ("kernel".to_string(), Some("apt-get -y upgrade".to_string())),
            ("no-key".to_string(), None),
            ("no-map".to_string(), None),
        ]
    );
}

/// Queues the node, has the scheduler grant it a slot, takes the grant up and opens the window.
async fn open_window(scope: &Scope, store: &KubeStore, s: &Session) {
    rota_e2e::turn::queue(store, s).await;
    common::take_turn(scope, store, s).await;
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("open the window");
}

/// A procedure's failed attempt is an Event `ProcedureFailed` on the node, with the cause.
/// (Its status, written by the scheduler, is tested in `crates/rota-scheduler/tests`.)
#[tokio::test]
async fn a_failed_procedure_is_an_event_on_its_node() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-failed").await;
    let node = scope.create_node("a").await.expect("node");
    let mut spec = ProcedureSpec::new("kernel", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("kernel").expect("process");
    let s = store.open_session(&name(&node), TTL).await.expect("open");
    store.add_request(&s, &mop, "procedure").await.expect("add");
    open_window(&scope, &store, &s).await;
    store
        .transition(
            &s,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("drained");
    let failed = Outcome::Failed {
        cause: "exit 3".into(),
        policy: rota_core::BackoffPolicy {
            initial: Duration::from_secs(1),
            maximum: Duration::from_secs(5),
            exponent: 2.0,
        },
    };
    store
        .complete_request(&s, &mop, &failed)
        .await
        .expect("fails");
    let events: Api<Event> = Api::namespaced(scope.client(), "default");
    let selector = format!("regarding.name={node}");
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while !events
        .list(&ListParams::default().fields(&selector))
        .await
        .expect("list events")
        .items
        .iter()
        .any(|e| {
            e.reason.as_deref() == Some("ProcedureFailed")
                && e.note.as_deref().is_some_and(|n| n.contains("exit 3"))
        })
    {
        assert!(
            tokio::time::Instant::now() < give_up,
            "no ProcedureFailed Event on the node"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

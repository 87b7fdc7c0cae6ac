//! Procedures on the real control plane of `testenv/`: what the API server refuses (the
//! Procedure CRD's validation), scripts read from ConfigMaps, and the status the agents' stores
//! write.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use rota_core::{ConfigMapKey, NodeName, NodeState, ProcedureSpec, Process};
use rota_e2e::testenv::Scope;
use rota_store::{Outcome, Session, Store, StoreExt, Transition, WindowChange, now_millis};
use rota_store_kube::procedure::NodeProcedureState;
use rota_store_kube::{KubeStore, Procedure};
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

/// Waits until the procedure's status shows `expected` for every node given.
async fn eventually_states(
    store: &KubeStore,
    scope: &Scope,
    procedure: &str,
    expected: &[(&str, NodeProcedureState)],
) -> rota_store_kube::ProcedureStatus {
    let api: Api<Procedure> = Api::all(scope.client());
    let object = format!("{}{procedure}", store.config().name_prefix);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = api
            .get(&object)
            .await
            .expect("read the Procedure")
            .status
            .unwrap_or_default();
        let matches = expected.iter().all(|(node, state)| {
            status
                .nodes
                .get(*node)
                .is_some_and(|entry| entry.state == *state)
        });
        if matches {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "timed out waiting for {expected:?}; status: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn open_window(store: &dyn Store, s: &Session) {
    store
        .transition(
            s,
            Transition::new(NodeState::Idle, NodeState::Queued).window(WindowChange::Queue {
                queued_at: Some(now_millis() - 1000),
            }),
        )
        .await
        .expect("queue");
    assert!(
        store
            .try_acquire_slot(s)
            .await
            .expect("acquire")
            .slot()
            .is_some()
    );
    store
        .transition(
            s,
            Transition::new(NodeState::Queued, NodeState::Draining).window(WindowChange::Open),
        )
        .await
        .expect("open the window");
}

#[tokio::test]
async fn the_status_follows_each_node_and_completes_when_every_matching_node_succeeded() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-status").await;
    store.set_concurrency(2).await.expect("concurrency");
    let nodes = [
        scope.create_node("a").await.expect("node"),
        scope.create_node("b").await.expect("node"),
    ];
    let mut spec = ProcedureSpec::new("kernel", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("kernel").expect("process");
    // Each node's agent in a process of its own: two stores writing one Procedure.
    let other = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("second handle");
    let a = store.open_session(&name(&nodes[0]), TTL).await.expect("a");
    let b = other.open_session(&name(&nodes[1]), TTL).await.expect("b");
    store.add_request(&a, &mop, "procedure").await.expect("add");
    other.add_request(&b, &mop, "procedure").await.expect("add");
    let status = eventually_states(
        &store,
        &scope,
        "kernel",
        &[
            (&nodes[0], NodeProcedureState::Pending),
            (&nodes[1], NodeProcedureState::Pending),
        ],
    )
    .await;
    assert_eq!((status.matching, status.pending), (2, 2));

    open_window(&store, &a).await;
    open_window(&other, &b).await;
    eventually_states(
        &store,
        &scope,
        "kernel",
        &[
            (&nodes[0], NodeProcedureState::Running),
            (&nodes[1], NodeProcedureState::Running),
        ],
    )
    .await;
    let failed = Outcome::Failed {
        cause: "exit 3".into(),
        policy: rota_core::BackoffPolicy {
            initial: Duration::from_secs(1),
            maximum: Duration::from_secs(5),
            exponent: 2.0,
        },
    };
    other
        .transition(
            &b,
            Transition::new(NodeState::Draining, NodeState::Maintaining),
        )
        .await
        .expect("b drained");
    other
        .complete_request(&b, &mop, &failed)
        .await
        .expect("b fails");
    store
        .complete_request(&a, &mop, &Outcome::Succeeded { detail: None })
        .await
        .expect("a succeeds");
    let status = eventually_states(
        &store,
        &scope,
        "kernel",
        &[
            (&nodes[0], NodeProcedureState::Succeeded),
            (&nodes[1], NodeProcedureState::Failed),
        ],
    )
    .await;
    assert_eq!(status.nodes[&nodes[1]].cause.as_deref(), Some("exit 3"));
    let events: Api<Event> = Api::namespaced(scope.client(), "default");
    let selector = format!("regarding.name={}", nodes[1]);
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
    let complete = &status.conditions[0];
    assert_eq!(
        (complete.status.as_str(), complete.reason.as_str()),
        ("False", "Failed")
    );

    other
        .complete_request(&b, &mop, &Outcome::Succeeded { detail: None })
        .await
        .expect("b succeeds on retry");
    let status = eventually_states(
        &store,
        &scope,
        "kernel",
        &[(&nodes[1], NodeProcedureState::Succeeded)],
    )
    .await;
    assert_eq!(
        (
            status.succeeded,
            status.failed,
            status.pending,
            status.running
        ),
        (2, 0, 0, 0)
    );
    assert_eq!(status.conditions[0].status, "True", "{status:?}");
}

/// Many agents that change their entries at once must all end up in the status: each write is
/// a compare-and-swap on the Procedure, and a lost one is retried.
#[tokio::test]
async fn concurrent_agents_never_lose_each_others_entries() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-race").await;
    let mut spec = ProcedureSpec::new("firmware", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("firmware").expect("process");
    let count = 8;
    let mut agents = Vec::new();
    for i in 0..count {
        let handle = KubeStore::connect(scope.client(), store.config().clone())
            .await
            .expect("a handle per agent");
        let node = format!("{}-n{i}", scope.id());
        let session = handle.open_session(&name(&node), TTL).await.expect("open");
        agents.push((Arc::new(handle), session, node));
    }
    let adds = agents.iter().map(|(handle, session, _)| {
        let handle = handle.clone();
        let mop = mop.clone();
        async move { handle.add_request(session, &mop, "procedure").await }
    });
    for added in futures::future::join_all(adds).await {
        assert!(added.expect("add").1);
    }
    let expected: Vec<(&str, NodeProcedureState)> = agents
        .iter()
        .map(|(_, _, node)| (node.as_str(), NodeProcedureState::Pending))
        .collect();
    let status = eventually_states(&store, &scope, "firmware", &expected).await;
    assert_eq!(status.pending, count);
}

/// A process that dies with an observation still queued: the status keeps the entry from
/// before, and the restarted agent's first write (its new session) reports the entry again,
/// with no change of the request. The lost write is made here by putting the older entry back.
#[tokio::test]
async fn a_restarted_agent_reports_an_entry_its_predecessor_lost() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-restart").await;
    let node = scope.create_node("a").await.expect("node");
    let mut spec = ProcedureSpec::new("bios", "true");
    spec.node_selector = scope.labels();
    store.submit_procedure(&spec).await.expect("submit");
    let mop = Process::mop("bios").expect("process");
    let agent = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("the first agent's store");
    let first = agent.open_session(&name(&node), TTL).await.expect("open");
    agent
        .add_request(&first, &mop, "procedure")
        .await
        .expect("add");
    let pending = eventually_states(
        &store,
        &scope,
        "bios",
        &[(&node, NodeProcedureState::Pending)],
    )
    .await;
    let pending = serde_json::to_value(&pending.nodes[&node]).expect("the pending entry");
    open_window(&agent, &first).await;
    eventually_states(
        &store,
        &scope,
        "bios",
        &[(&node, NodeProcedureState::Running)],
    )
    .await;
    drop(agent);

    let procedures: Api<Procedure> = Api::all(scope.client());
    let object = format!("{}bios", store.config().name_prefix);
    procedures
        .patch_status(
            &object,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "nodes": { &node: pending } } })),
        )
        .await
        .expect("put the older entry back");
    let status = procedures.get(&object).await.expect("read").status;
    assert_eq!(
        status.map(|s| s.nodes[&node].state),
        Some(NodeProcedureState::Pending),
        "the status shows the entry from before the lost write"
    );

    let restarted = KubeStore::connect(scope.client(), store.config().clone())
        .await
        .expect("the restarted agent's store");
    restarted
        .open_session(&name(&node), TTL)
        .await
        .expect("the restarted agent's session");
    eventually_states(
        &store,
        &scope,
        "bios",
        &[(&node, NodeProcedureState::Running)],
    )
    .await;
}

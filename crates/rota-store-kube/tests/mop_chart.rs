//! The Helm chart `charts/mop`, rendered with the helm that `testenv/build` builds and applied
//! with its kubectl to the real control plane: the procedure it renders is the one the store
//! reads back, and bad values fail `helm template` with a message that names them. Also the
//! procedures' part of `charts/rota`'s RBAC: enough for an agent's store, and no more; the
//! scheduler's account writes their status.

mod common;

use rota_store::{Store, StoreExt};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use rota_core::{ConfigMapKey, NodeName, Priority, ProcedureSpec, Process, sha256_hex};
use rota_e2e::testenv::{self, SKIP_ENV, TestEnv};

use rota_kube_api::Procedure;
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde_json::json;

fn chart_dir(chart: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts")
        .join(chart)
}

/// The path of a binary that `testenv/build` built (`helm`, `kubectl`).
fn tool(name: &str) -> PathBuf {
    testenv::tool(name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// `helm template` of the mop chart with `--set-json` arguments; the raw output.
fn helm_template(release: &str, sets: &[String]) -> Output {
    helm_template_of("mop", release, sets)
}

fn helm_template_of(chart: &str, release: &str, sets: &[String]) -> Output {
    let mut helm = Command::new(tool("helm"));
    helm.arg("template").arg(release).arg(chart_dir(chart));
    for set in sets {
        helm.arg("--set-json").arg(set);
    }
    helm.stdin(Stdio::null())
        .output()
        .expect("running helm template")
}

fn kubectl_apply(env: &TestEnv, manifest: &[u8]) {
    let mut child = Command::new(tool("kubectl"))
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kubectl");
    child
        .stdin
        .take()
        .expect("kubectl's stdin")
        .write_all(manifest)
        .expect("writing to kubectl");
    let out = child.wait_with_output().expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn skipped() -> bool {
    // helm comes from testenv/build like the control plane, so it skips along with it.
    std::env::var(SKIP_ENV).is_ok_and(|v| v == "1")
}

#[tokio::test]
async fn the_chart_installs_the_procedure_the_store_reads_back() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-chart").await;
    let script = "#!/bin/sh\nset -e\napt-get install -y linux-image\n";
    let sets = [
        format!("mop.name={}", json!(format!("{}-kernel", scope.id()))),
        "mop.priority=7".to_string(),
        format!("mop.script={}", json!(script)),
        format!("mop.sha256={}", json!(sha256_hex(script))),
        format!("mop.nodeSelector={}", json!(scope.labels())),
        "mop.reboot=true".to_string(),
        "mop.timeout=\"30m\"".to_string(),
    ];
    let rendered = helm_template("kernel", &sets);
    assert!(
        rendered.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    kubectl_apply(env, &rendered.stdout);
    // Applying the same release again changes nothing (procedures are immutable).
    kubectl_apply(env, &rendered.stdout);

    let procedures = store.procedures().await.expect("procedures");
    assert_eq!(procedures.len(), 1, "{procedures:?}");
    let mut expected = ProcedureSpec::new("kernel", script);
    expected.priority = Priority::new(7).expect("priority");
    expected.sha256 = Some(sha256_hex(script));
    expected.node_selector = scope.labels();
    expected.reboot = true;
    expected.timeout = Duration::from_secs(30 * 60);
    assert_eq!(procedures[0].spec, expected);
    assert_eq!(procedures[0].script.as_deref(), Some(script));
    procedures[0].spec.check_pin(script).expect("the pin holds");
}

#[tokio::test]
async fn the_chart_refers_to_a_config_map() {
    let Some(env) = common::env() else { return };
    let (scope, store) = common::scoped_store(env, "mop-chart-cm").await;
    let sets = [
        format!("mop.name={}", json!(format!("{}-firmware", scope.id()))),
        r#"mop.scriptConfigMap={"name":"firmware","key":"run.sh"}"#.to_string(),
        "mop.drain=false".to_string(),
        // Procedures are cluster-scoped: without a selector, other tests' agents would take
        // this one up and fail on its missing ConfigMap.
        format!("mop.nodeSelector={}", json!(scope.labels())),
    ];
    let rendered = helm_template("firmware", &sets);
    assert!(
        rendered.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    kubectl_apply(env, &rendered.stdout);
    let procedures = store.procedures().await.expect("procedures");
    let spec = &procedures[0].spec;
    assert_eq!(spec.priority, Priority::DEFAULT);
    assert!(!spec.drain && !spec.reboot);
    assert_eq!(
        spec.script_config_map.as_ref().map(|c| c.key.as_str()),
        Some("run.sh")
    );
    assert_eq!(procedures[0].script, None, "the ConfigMap does not exist");
}

#[test]
fn an_invalid_priority_fails_helm_template_naming_the_value_and_the_range() {
    if skipped() {
        return;
    }
    let cases = [
        (r#""100""#, r#"invalid priority "100""#),
        ("100", "invalid priority 100"),
        (r#""ab""#, r#"invalid priority "ab""#),
        (r#""-1""#, r#"invalid priority "-1""#),
        ("-1", "invalid priority -1"),
    ];
    for (priority, expected) in cases {
        let out = helm_template(
            "bad",
            &[
                r#"mop.script="true""#.to_string(),
                format!("mop.priority={priority}"),
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template accepted {priority}");
        assert!(
            stderr.contains(expected) && stderr.contains("expected 00..99"),
            "mop.priority={priority}: {stderr}"
        );
    }
}

#[test]
fn other_bad_values_fail_helm_template_with_a_clear_message() {
    if skipped() {
        return;
    }
    let cases: [(&[&str], &str); 6] = [
        (
            &[],
            "the script is missing; set mop.script or mop.scriptConfigMap",
        ),
        (
            &[
                r#"mop.script="true""#,
                r#"mop.scriptConfigMap={"name":"a","key":"b"}"#,
            ],
            "give exactly one of them",
        ),
        (
            &[r#"mop.script="true""#, r#"mop.name="Kernel_1""#],
            "at '/mop/name'",
        ),
        (
            &[r#"mop.script="true""#, r#"mop.sha256="abc""#],
            "at '/mop/sha256'",
        ),
        (
            &[r#"mop.script="true""#, r#"mop.timeout=3600"#],
            "at '/mop/timeout': got number, want string",
        ),
        (
            &[r#"mop.script="true""#, r#"mop.nodes=["node 1"]"#],
            "at '/mop/nodes/0'",
        ),
    ];
    for (sets, expected) in cases {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let out = helm_template("bad", &sets);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template accepted {sets:?}");
        assert!(stderr.contains(expected), "{sets:?}: {stderr}");
    }
}

#[tokio::test]
async fn the_agents_rbac_reads_procedures_and_the_scheduler_writes_their_status() {
    let Some(env) = common::env() else { return };
    let (scope, admin_store) = common::scoped_store(env, "mop-rbac").await;
    let admin = scope.client();
    let release = scope.id();
    let namespace = format!("{}-sys", scope.id());
    // This store plays an agent from outside any pod, with a token bound to no node, which
    // the chart's node-scoped policy lets write no RotaNode: this test is about the RBAC alone
    // (the policy's are in crates/rota/tests/kube_authority.rs).
    let sets = [
        format!("namespace.name={}", json!(namespace)),
        format!("nodeSelector={}", json!(scope.labels())),
        "authority.nodeScoped=false".to_string(),
    ];
    let rendered = helm_template_of("rota", release, &sets);
    assert!(
        rendered.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    kubectl_apply(env, &rendered.stdout);
    let maps: kube::Api<ConfigMap> = kube::Api::namespaced(admin.clone(), &namespace);
    maps.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("scripts".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "run.sh".into(),
                "echo from the map".into(),
            )])),
            ..ConfigMap::default()
        },
    )
    .await
    .expect("create the ConfigMap");
    let mut spec = ProcedureSpec::new("kernel", "");
    // Procedures are cluster-scoped: one for every node would reach other tests' agents.
    spec.node_selector = scope.labels();
    spec.script = None;
    spec.script_config_map = Some(ConfigMapKey {
        name: "scripts".into(),
        key: "run.sh".into(),
    });
    admin_store
        .submit_procedure(&spec)
        .await
        .expect("an operator submits");

    let agent = env
        .client_as(&admin, &namespace, "rota-agent")
        .await
        .expect("a client as the chart's service account");
    let store = KubeStore::connect(
        agent.clone(),
        KubeStoreConfig {
            namespace: namespace.clone(),
            ..admin_store.config().clone()
        },
    )
    .await
    .expect("the agent's store");
    let procedures = store
        .procedures()
        .await
        .expect("the agent lists procedures");
    assert_eq!(procedures[0].script.as_deref(), Some("echo from the map"));
    let refused = store
        .submit_procedure(&{
            let mut sneaky = ProcedureSpec::new("sneaky", "true");
            sneaky.node_selector = scope.labels();
            sneaky
        })
        .await
        .expect_err("an agent may not create procedures");
    assert!(
        refused
            .to_string()
            .contains("cannot create procedures.rota.dev")
            && refused.to_string().contains("forbidden"),
        "{refused}"
    );

    let node = NodeName::new(format!("{}-n", scope.id())).expect("node name");
    let session = store
        .open_session(&node, Duration::from_secs(60))
        .await
        .expect("open");
    let mop = Process::mop("kernel").expect("process");
    store
        .add_request(&session, &mop, "procedure")
        .await
        .expect("add");
    let object = format!("{}kernel", admin_store.config().name_prefix);
    // The agent never writes a Procedure's status...
    let refused = kube::Api::<Procedure>::all(agent)
        .patch_status(
            &object,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "pending": 7 } })),
        )
        .await
        .expect_err("an agent may not write a procedure's status");
    assert!(
        refused.to_string().contains("forbidden")
            && refused.to_string().contains("procedures/status"),
        "{refused}"
    );
    // ...the scheduler does, under its own account.
    let scheduler = env
        .client_as(&admin, &namespace, &format!("{release}-scheduler"))
        .await
        .expect("a client as the chart's scheduler account");
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(rota_scheduler::run(
        scheduler,
        rota_scheduler::SchedulerConfig {
            name_prefix: admin_store.config().name_prefix.clone(),
            ..rota_scheduler::SchedulerConfig::new(namespace.as_str(), "mop-rbac")
        },
        stop.clone(),
    ));
    let api: kube::Api<Procedure> = kube::Api::all(admin.clone());
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = api
            .get(&object)
            .await
            .expect("read")
            .status
            .unwrap_or_default();
        if status.pending == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the scheduler did not write the status: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await.expect("the scheduler stops");
}

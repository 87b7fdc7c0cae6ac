//! Node-scoped authority (README "Node-scoped authority"): the chart's ValidatingAdmissionPolicy
//! on the real API server of `testenv/`. With a token bound to the agent's pod on node A (the
//! one the kubelet mounts), A's agent may change A's Node, A's RotaNode and RotaWindows and take
//! or give back Leases for A, and nothing of node B's, and in `rota-config` only pause the fleet; a token of
//! the same service account that is bound to no pod may write none of them; every refusal
//! names the policy. And a real `rota agent` with
//! its pod's token goes through a whole window (session, slot, cordon with labels and a taint,
//! drain, the reboot's annotations, reboot, uncordon, release) without one refusal, after waiting for the garbage
//! collector to free the slot of a deleted Node, which it may not free itself.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::testenv::{Scope, app_labels, wait_for};
use rota_e2e::tokens::pod_token;
use rota_store::StoreExt;
use rota_store_kube::{
    KubeStore, KubeStoreConfig, RotaNode, RotaNodeSpec, RotaWindow, RotaWindowSpec,
};
use serde_json::{Value, json};

mod kube_common;

use kube_common::chart::Chart;
use kube_common::{PATIENCE, ROTA, count, history, scope_with_nodes, unschedulable};

/// Fails unless `result` is the policy's refusal: a 403 whose message names the policy and
/// says `why`.
fn refused<T>(what: &str, result: kube::Result<T>, policy: &str, why: &str) -> Result<()> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let named = format!("ValidatingAdmissionPolicy '{policy}'");
            ensure!(
                status.message.contains(&named) && status.message.contains(why),
                "{what}: refused without naming {named} and {why:?}: {}",
                status.message
            );
            Ok(())
        }
        Ok(_) => bail!("{what}: not refused, it went through"),
        Err(e) => bail!("{what}: not refused, it failed: {e}"),
    }
}

/// Waits until the API server enforces the chart's policy (it picks a new one up within
/// seconds), trying as `agent` a dry run of what it refuses: a Lease for another node.
async fn wait_enforced(agent: &Client, chart: &Chart) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(agent.clone(), chart.namespace());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let policy = chart.policy();
    wait_for("the policy to be enforced", PATIENCE, || async {
        match leases
            .create(&dry_run, &lease("rota-probe", Some("another-node")))
            .await
        {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(&policy) => {
                Ok(Some(()))
            }
            Err(e) => Err(e.into()),
        }
    })
    .await
}

fn lease(name: &str, holder: Option<&str>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(Into::into),
            ..LeaseSpec::default()
        }),
    }
}

/// `lease` as read, with `holder` (as a take or a release writes it).
fn held_by(mut lease: Lease, holder: Option<&str>) -> Lease {
    lease
        .spec
        .get_or_insert_with(LeaseSpec::default)
        .holder_identity = holder.map(Into::into);
    lease
}

fn rota_node(name: &str, node: &str) -> RotaNode {
    RotaNode {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: RotaNodeSpec { node: node.into() },
        status: None,
    }
}

fn rota_window(name: &str, node: &str) -> RotaWindow {
    RotaWindow::new(
        name,
        RotaWindowSpec {
            node: node.into(),
            sequence: 0,
            cut_at_generation: 1,
            entries: Vec::new(),
            procedure_requests: Vec::new(),
            steps: Vec::new(),
        },
    )
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// `map` as read, with `key` set to `value` (as the store's write of one key does).
fn with_data(mut map: ConfigMap, key: &str, value: &str) -> ConfigMap {
    map.data
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    map
}

fn cordon(on: bool) -> Patch<Value> {
    Patch::Merge(json!({ "spec": { "unschedulable": on } }))
}

/// Node A's agent may cordon, label and taint A, write A's RotaNode, take, give back and take
/// again a free slot, and pause the fleet; it may not cordon B, write B's RotaNode, give back,
/// take over, delete or take for B a slot, or change the fleet's other settings; a token bound
/// to no pod may write none of it; the admin may.
#[tokio::test]
async fn an_agent_may_change_only_its_own_nodes_objects_and_each_refusal_names_the_policy()
-> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("authority", 2).await? else {
        return Ok(());
    };
    let (a, b) = (nodes[0].as_str(), nodes[1].as_str());
    let chart = Chart::install(env, &scope, json!({})).await?;
    let policy = chart.policy();
    let admin = scope.client();
    let pod = chart.agent_pod_on(&admin, a).await?;
    let agent = env
        .client_with_token(&pod_token(&admin, &pod).await?)
        .await?;
    wait_enforced(&agent, &chart).await?;
    let post = PostParams::default();
    let denied =
        |what: &str, whose: &str| format!("the agent of node {a} may {what}; refused: {whose}");

    // Nodes: the cordon of its own, with its labels, taint and annotation in the same write...
    let nodes_as_a: Api<Node> = Api::all(agent.clone());
    let own_node = json!({
        "metadata": {
            "labels": { "rota.dev/maintenance": "out" },
            "annotations": { "rota.dev/evicted": "{}" },
        },
        "spec": {
            "unschedulable": true,
            "taints": [{ "key": "rota.dev/pending", "effect": "PreferNoSchedule" }],
        },
    });
    nodes_as_a
        .patch(a, &PatchParams::default(), &Patch::Merge(own_node))
        .await
        .context("A's agent cordoning its own Node")?;
    ensure!(unschedulable(&scope, a).await?, "A is not cordoned");
    // ...but not another node's.
    refused(
        "cordoning B",
        nodes_as_a
            .patch(b, &PatchParams::default(), &cordon(true))
            .await,
        &policy,
        &denied("change only its own Node", &format!("UPDATE of Node {b}")),
    )?;
    ensure!(!unschedulable(&scope, b).await?, "B was cordoned");

    // RotaNodes: its own, created and updated...
    let rota_nodes_as_a: Api<RotaNode> = Api::all(agent.clone());
    let admin_rota_nodes: Api<RotaNode> = Api::all(admin.clone());
    let own = rota_nodes_as_a
        .create(&post, &rota_node(a, a))
        .await
        .context("A's agent creating its RotaNode")?;
    let own = rota_nodes_as_a
        .replace(a, &post, &own)
        .await
        .context("A's agent updating its RotaNode")?;
    // ...but not B's, neither made nor rewritten, nor its own turned into B's.
    let own_rota_node = "write only its own RotaNode";
    refused(
        "creating B's RotaNode",
        rota_nodes_as_a.create(&post, &rota_node(b, b)).await,
        &policy,
        &denied(own_rota_node, &format!("CREATE of RotaNode {b}")),
    )?;
    let theirs = admin_rota_nodes.create(&post, &rota_node(b, b)).await?;
    refused(
        "rewriting B's RotaNode",
        rota_nodes_as_a.replace(b, &post, &theirs).await,
        &policy,
        &denied(own_rota_node, &format!("UPDATE of RotaNode {b}")),
    )?;
    let mut disguised = own;
    disguised.spec.node = b.into();
    refused(
        "making its own RotaNode B's",
        rota_nodes_as_a.replace(a, &post, &disguised).await,
        &policy,
        &denied(own_rota_node, &format!("UPDATE of RotaNode {a}")),
    )?;

    // RotaWindows (its history's ring): its own, created and updated...
    let windows_as_a: Api<RotaWindow> = Api::all(agent.clone());
    let own_window = format!("{a}-0");
    let own = windows_as_a
        .create(&post, &rota_window(&own_window, a))
        .await
        .context("A's agent creating its RotaWindow")?;
    let own = windows_as_a
        .replace(&own_window, &post, &own)
        .await
        .context("A's agent updating its RotaWindow")?;
    // ...but not B's, neither made nor rewritten, nor its own turned into B's.
    let own_windows = "write only its own RotaWindows";
    let b_s_window = format!("{b}-0");
    refused(
        "creating B's RotaWindow",
        windows_as_a
            .create(&post, &rota_window(&b_s_window, b))
            .await,
        &policy,
        &denied(own_windows, &format!("CREATE of RotaWindow {b_s_window}")),
    )?;
    let theirs = Api::<RotaWindow>::all(admin.clone())
        .create(&post, &rota_window(&b_s_window, b))
        .await?;
    refused(
        "rewriting B's RotaWindow",
        windows_as_a.replace(&b_s_window, &post, &theirs).await,
        &policy,
        &denied(own_windows, &format!("UPDATE of RotaWindow {b_s_window}")),
    )?;
    let mut disguised = own;
    disguised.spec.node = b.into();
    refused(
        "making its own RotaWindow B's",
        windows_as_a.replace(&own_window, &post, &disguised).await,
        &policy,
        &denied(own_windows, &format!("UPDATE of RotaWindow {own_window}")),
    )?;

    // Leases: a free slot taken by create, given back, and taken again by compare-and-swap...
    let leases_as_a: Api<Lease> = Api::namespaced(agent.clone(), chart.namespace());
    let admin_leases: Api<Lease> = Api::namespaced(admin.clone(), chart.namespace());
    let taken = leases_as_a
        .create(&post, &lease("rota-slot-0", Some(a)))
        .await
        .context("A's agent taking a slot by create")?;
    let free = leases_as_a
        .replace("rota-slot-0", &post, &held_by(taken, None))
        .await
        .context("A's agent giving its slot back")?;
    leases_as_a
        .replace("rota-slot-0", &post, &held_by(free, Some(a)))
        .await
        .context("A's agent taking a free slot")?;
    // ...but B's slot is neither given back, nor taken over, nor deleted, and no slot is
    // taken for B.
    let theirs = admin_leases
        .create(&post, &lease("rota-slot-1", Some(b)))
        .await?;
    let own_lease = "take a free Lease for itself or give back its own";
    let b_s_slot = denied(
        own_lease,
        &format!("UPDATE of Lease rota-slot-1 held by {b}"),
    );
    for (what, holder) in [("giving B's slot back", None), ("taking B's slot", Some(a))] {
        refused(
            what,
            leases_as_a
                .replace("rota-slot-1", &post, &held_by(theirs.clone(), holder))
                .await,
            &policy,
            &b_s_slot,
        )?;
    }
    refused(
        "deleting B's slot",
        leases_as_a.delete("rota-slot-1", &Default::default()).await,
        &policy,
        &denied(
            own_lease,
            &format!("DELETE of Lease rota-slot-1 held by {b}"),
        ),
    )?;
    refused(
        "taking a slot for B",
        leases_as_a
            .create(&post, &lease("rota-slot-2", Some(b)))
            .await,
        &policy,
        &denied(own_lease, &format!("CREATE of Lease rota-slot-2 for {b}")),
    )?;
    let still = admin_leases.get("rota-slot-1").await?;
    ensure!(
        still.spec.and_then(|s| s.holder_identity).as_deref() == Some(b),
        "B lost its slot"
    );

    // rota-config: the agent pauses the fleet and takes a node tag from the counter...
    let maps_as_a: Api<ConfigMap> = Api::namespaced(agent.clone(), chart.namespace());
    let settings = maps_as_a
        .create(&post, &config_map("rota-config", &[("paused", "budget")]))
        .await
        .context("A's agent pausing the fleet")?;
    let settings = maps_as_a
        .replace(
            "rota-config",
            &post,
            &with_data(settings, "nextNodeTag", "1"),
        )
        .await
        .context("A's agent taking a node tag")?;
    // ...but sets no concurrency the chart did not give it, lifts no pause, touches no other
    // ConfigMap.
    let own_settings = "may only pause the fleet, set the concurrency (agent.concurrency is \
                        not set) and take a node tag in rota-config, and write no other \
                        ConfigMap; refused";
    for (what, key, value) in [
        ("raising the concurrency", "concurrency", "100"),
        ("lifting the pause", "paused", ""),
        ("starting a new rollout", "resumedAt", "1"),
    ] {
        refused(
            what,
            maps_as_a
                .replace(
                    "rota-config",
                    &post,
                    &with_data(settings.clone(), key, value),
                )
                .await,
            &policy,
            &format!("{own_settings}: UPDATE of ConfigMap rota-config"),
        )?;
    }
    refused(
        "writing a script",
        maps_as_a
            .create(&post, &config_map("scripts", &[("run.sh", "reboot")]))
            .await,
        &policy,
        &format!("{own_settings}: CREATE of ConfigMap scripts"),
    )?;

    // A token of the same service account bound to no pod names no node: it may read, and
    // write none of them.
    let unbound = env
        .client_as(&admin, chart.namespace(), "rota-agent")
        .await?;
    let no_node = "this token is bound to no node";
    Api::<Node>::all(unbound.clone()).get(a).await?;
    refused(
        "an unbound token cordoning A",
        Api::<Node>::all(unbound.clone())
            .patch(a, &PatchParams::default(), &cordon(false))
            .await,
        &policy,
        no_node,
    )?;
    refused(
        "an unbound token writing A's RotaNode",
        Api::<RotaNode>::all(unbound.clone())
            .replace(a, &post, &admin_rota_nodes.get(a).await?)
            .await,
        &policy,
        no_node,
    )?;
    refused(
        "an unbound token giving A's slot back",
        Api::<Lease>::namespaced(unbound, chart.namespace())
            .replace(
                "rota-slot-0",
                &post,
                &held_by(admin_leases.get("rota-slot-0").await?, None),
            )
            .await,
        &policy,
        no_node,
    )?;

    // Operators keep their rights: the admin cordons B and gives B's slot back.
    scope.cordon(b).await?;
    admin_leases
        .replace(
            "rota-slot-1",
            &post,
            &held_by(admin_leases.get("rota-slot-1").await?, None),
        )
        .await
        .context("an operator giving B's slot back")?;

    for name in [a, b] {
        admin_rota_nodes.delete(name, &Default::default()).await?;
    }
    chart.uninstall()?;
    scope.cleanup().await
}

/// A `rota agent` process for one node, run as the chart's DaemonSet runs it but outside a pod,
/// on a host of files: a host root, a boot id, and a reboot command that leaves a mark. A
/// reboot ([`AgentHost::reboot`]) kills it and starts it again on a new boot id.
struct AgentHost {
    dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<Child>,
    boots: u32,
}

impl AgentHost {
    fn start(node: &str, kubeconfig: &Path, namespace: &str) -> Result<AgentHost> {
        let dir = tempfile::tempdir()?;
        for sub in ["root/run", "root/var/run"] {
            std::fs::create_dir_all(dir.path().join(sub))?;
        }
        let path = |p: &str| dir.path().join(p).to_string_lossy().into_owned();
        let mut args: Vec<String> = [
            "agent",
            "--store=kube",
            "--node-actions=kube",
            "--concurrency=1",
            "--drain-force",
            "--health-interval=1s",
            "--cordon-label=rota.dev/maintenance=out",
            "--uncordon-label=rota.dev/maintenance=in",
            "--prefer-no-schedule-taint=rota.dev/pending",
            "--annotate-nodes",
            "--reboot-sentinel=/run/reboot-needed",
            "--start-jitter=0s",
        ]
        .map(String::from)
        .into();
        args.extend([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--namespace={namespace}"),
            format!("--node={node}"),
            format!("--host-root={}", path("root")),
            format!("--boot-id-file={}", path("boot_id")),
            format!("--reboot-command=touch '{}'", path("rebooted")),
        ]);
        let mut host = AgentHost {
            dir,
            args,
            child: None,
            boots: 0,
        };
        host.boot()?;
        Ok(host)
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// A new boot id, and the agent started on it.
    fn boot(&mut self) -> Result<()> {
        self.boots += 1;
        std::fs::write(self.path("boot_id"), format!("boot-{}\n", self.boots))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("agent.log"))?;
        self.child = Some(
            Command::new(ROTA)
                .args(&self.args)
                .env("RUST_LOG", "info")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("starting rota agent")?,
        );
        Ok(())
    }

    fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// What a reboot does to the machine: the agent dies, `/run` empties (the sentinel with
    /// it), and it starts again on a new boot id.
    fn reboot(&mut self) -> Result<()> {
        self.stop()?;
        std::fs::remove_file(self.path("root/run/reboot-needed"))?;
        self.boot()
    }

    fn rebooted(&self) -> bool {
        self.path("rebooted").exists()
    }

    fn log(&self) -> Result<String> {
        Ok(std::fs::read_to_string(self.path("agent.log"))?)
    }
}

impl Drop for AgentHost {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The Node's taint keys and the value of its `rota.dev/maintenance` label.
async fn marks(scope: &Scope, node: &str) -> Result<(Vec<String>, Option<String>)> {
    let node = scope.nodes().get(node).await?;
    let label = node.labels().get("rota.dev/maintenance").cloned();
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    Ok((taints.into_iter().map(|t| t.key).collect(), label))
}

/// Which of `--annotate-nodes`' annotations the Node carries.
async fn reboot_annotations(scope: &Scope, node: &str) -> Result<Vec<String>> {
    let node = scope.nodes().get(node).await?;
    Ok(node
        .annotations()
        .keys()
        .filter(|k| k.contains("reboot"))
        .cloned()
        .collect())
}

/// A real agent, with the token of its pod, through a whole window under the policy.
#[tokio::test]
async fn a_real_agent_with_its_pods_token_goes_through_a_whole_window_under_the_policy()
-> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("authority-agent", 1).await? else {
        return Ok(());
    };
    let node = nodes[0].as_str();
    // The concurrency the agent sets, as the chart's DaemonSet would pass it.
    let chart = Chart::install(env, &scope, json!({ "agent": { "concurrency": 1 } })).await?;
    let admin = scope.client();
    let pod = chart.agent_pod_on(&admin, node).await?;
    let token = pod_token(&admin, &pod).await?;
    wait_enforced(&env.client_with_token(&token).await?, &chart).await?;
    // A pod for the drain to evict (the agent's own, a DaemonSet's, stays).
    scope
        .create_pod_on("workload", node, &app_labels("workload"))
        .await?;
    scope.wait_pod_running("workload", PATIENCE).await?;
    let kubeconfig = tempfile::NamedTempFile::new()?;
    env.write_kubeconfig_with_token(&token, kubeconfig.path())?;
    let store = KubeStore::connect(
        admin.clone(),
        KubeStoreConfig {
            namespace: chart.namespace().into(),
            ..KubeStoreConfig::default()
        },
    )
    .await?;
    let name = NodeName::new(node)?;

    // The one slot is still held by a node whose Node is gone, which no agent may free: the
    // agent waits until the garbage collector frees it (its ownerReference names the Node),
    // here once a finalizer lets it.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), chart.namespace());
    let mut orphan = lease("rota-slot-0", Some("gone"));
    orphan.metadata.finalizers = Some(vec!["rota.dev/test-hold".into()]);
    orphan.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "gone".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..OwnerReference::default()
    }]);
    leases.create(&PostParams::default(), &orphan).await?;

    let mut host = AgentHost::start(node, kubeconfig.path(), chart.namespace())?;
    std::fs::write(host.path("root/run/reboot-needed"), b"")?;
    let in_log = |host: &AgentHost, what: &str| match host.log() {
        Ok(log) => format!("{what}; the agent's log:\n{log}"),
        Err(e) => format!("{what}; no log: {e}"),
    };
    let waited = wait_for(
        "the agent to queue and the collector to free the slot",
        PATIENCE,
        || async {
            let queued = store
                .node(&name)
                .await?
                .is_some_and(|r| r.state == NodeState::Queued);
            let collected = leases
                .get("rota-slot-0")
                .await?
                .metadata
                .deletion_timestamp
                .is_some();
            Ok((queued && collected).then_some(()))
        },
    )
    .await;
    waited.with_context(|| {
        in_log(
            &host,
            "the agent did not queue, or the slot was not collected",
        )
    })?;
    ensure!(
        !unschedulable(&scope, node).await?,
        "cordoned without a slot"
    );
    leases
        .patch(
            "rota-slot-0",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await?;
    let waited = wait_for("the reboot command", PATIENCE, || async {
        Ok(host.rebooted().then_some(()))
    })
    .await;
    waited.with_context(|| in_log(&host, "the agent did not reboot its node"))?;
    // It took its slot, cordoned with its label and taint, and drained.
    let record = store.node(&name).await?.context("no RotaNode")?;
    ensure!(
        record.state == NodeState::Rebooting && record.slot == Some(0),
        "{record:?}"
    );
    ensure!(unschedulable(&scope, node).await?, "not cordoned");
    let (taints, label) = marks(&scope, node).await?;
    ensure!(
        taints.iter().any(|t| t == "rota.dev/pending") && label.as_deref() == Some("out"),
        "taints {taints:?}, label {label:?}"
    );
    scope.wait_pod_gone("workload", PATIENCE).await?;
    let annotations = reboot_annotations(&scope, node).await?;
    ensure!(
        annotations
            == [
                "rota.dev/last-reboot-started",
                "rota.dev/reboot-in-progress"
            ],
        "rebooting with the annotations {annotations:?}"
    );

    host.reboot()?;
    let waited = wait_for("the window to end", PATIENCE, || async {
        let idle = store
            .node(&name)
            .await?
            .is_some_and(|r| r.state == NodeState::Idle && r.slot.is_none());
        // The pending taint goes in the agent's next pass after the window's end.
        let (taints, _) = marks(&scope, node).await?;
        let untainted = !taints.iter().any(|t| t == "rota.dev/pending");
        Ok((idle && untainted && store.slot_holders().await?.is_empty()).then_some(()))
    })
    .await;
    waited.with_context(|| in_log(&host, "the window did not end"))?;
    host.stop()?;
    let finished = count(
        &history(&store, node).await?,
        &Process::Reboot,
        HistoryEvent::Finished,
    );
    ensure!(finished == 1, "{finished} finished reboots");
    ensure!(
        store.concurrency().await? == Some(1),
        "the agent did not set its concurrency"
    );
    ensure!(!unschedulable(&scope, node).await?, "left cordoned");
    let (taints, label) = marks(&scope, node).await?;
    ensure!(
        !taints.iter().any(|t| t == "rota.dev/pending") && label.as_deref() == Some("in"),
        "taints {taints:?}, label {label:?}"
    );
    let annotations = reboot_annotations(&scope, node).await?;
    ensure!(
        annotations
            == [
                "rota.dev/last-reboot-finished",
                "rota.dev/last-reboot-started"
            ],
        "back in service with the annotations {annotations:?}"
    );
    // Not one of its requests was refused on the way.
    let log = host.log()?;
    ensure!(
        !log.contains(&chart.policy()) && !log.contains("forbidden"),
        "the agent met a refusal: {log}"
    );

    Api::<RotaNode>::all(admin)
        .delete(node, &Default::default())
        .await?;
    chart.uninstall()?;
    scope.cleanup().await
}

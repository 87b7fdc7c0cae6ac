//! Node-scoped authority (README "Node-scoped authority"): the chart's ValidatingAdmissionPolicy
//! on the real API server of `testenv/`. With a token bound to the agent's pod on node A (the
//! one the kubelet mounts), A's agent may change A's Node and A's RotaNode (keeping or clearing,
//! never writing, the grant and the withdrawal that only the scheduler writes), create and
//! delete A's RotaWindows, give back a Lease A holds, and in `rota-config` only pause the fleet;
//! it may change nothing of node B's, take no slot and rewrite no window: the chart's RBAC
//! refuses what it leaves out (creating or deleting a Lease, updating a RotaWindow), and the
//! policy refuses it too where a broader RBAC allows it. A token of the same service account
//! that is bound to no pod may write none of them; every refusal of the policy names it. And a
//! real `rota agent` with its pod's token goes through a whole window (session, grant taken up,
//! cordon with labels and a taint, drain, the reboot's annotations, reboot, uncordon, its Lease
//! given back) without one refusal, granted its slot by a real `rota scheduler` with a token of
//! the scheduler's own service account, once the scheduler took the one slot back from a node
//! that is gone, which the agent may not free itself.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use rota_core::{HistoryEvent, NodeName, NodeState, Process};
use rota_e2e::testenv::{Scope, TestEnv, app_labels, wait_for};
use rota_e2e::tokens::pod_token;
use rota_kube_api::crd::{GrantSpec, Timestamp, WithdrawnSpec};
use rota_kube_api::permissions::{Permission, missing};
use rota_kube_api::{RotaNode, RotaNodeSpec, RotaWindow, RotaWindowSpec, slots};
use rota_store::{StoreExt, now_millis};
use rota_store_kube::{KubeStore, KubeStoreConfig};
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

/// Fails unless `result` is RBAC's refusal of `verb` on `resource` (a 403 before any
/// admission policy is asked).
fn refused_by_rbac<T>(
    what: &str,
    result: kube::Result<T>,
    verb: &str,
    resource: &str,
) -> Result<()> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let cannot = format!("cannot {verb} resource \"{resource}\"");
            ensure!(
                status.message.contains(&cannot)
                    && !status.message.contains("ValidatingAdmissionPolicy"),
                "{what}: not RBAC's refusal ({cannot:?}): {}",
                status.message
            );
            Ok(())
        }
        Ok(_) => bail!("{what}: not refused, it went through"),
        Err(e) => bail!("{what}: not refused, it failed: {e}"),
    }
}

/// Waits until the API server enforces the chart's policy (it picks a new one up within
/// seconds), trying as `agent` a dry run of what RBAC lets it do and the policy refuses: the
/// creation of another node's RotaNode.
async fn wait_enforced(agent: &Client, chart: &Chart) -> Result<()> {
    let rota_nodes: Api<RotaNode> = Api::all(agent.clone());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let policy = chart.policy();
    wait_for("the policy to be enforced", PATIENCE, || async {
        match rota_nodes
            .create(&dry_run, &rota_node("another-node", "another-node"))
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
        spec: RotaNodeSpec {
            node: node.into(),
            grant: None,
            withdrawn: None,
        },
        status: None,
    }
}

/// `node` with a grant of `slot` (as the scheduler writes one), or none.
fn granted(mut node: RotaNode, slot: Option<u32>) -> RotaNode {
    node.spec.grant = slot.map(|slot| GrantSpec {
        slot,
        at: Timestamp(now_millis()),
    });
    node
}

/// `node` with the withdrawal of `slot` for `reason` (as the scheduler records one), or none.
fn withdrawn(mut node: RotaNode, slot: Option<u32>, reason: &str) -> RotaNode {
    node.spec.withdrawn = slot.map(|slot| WithdrawnSpec {
        slot,
        at: Timestamp(now_millis()),
        reason: reason.into(),
    });
    node
}

fn rota_window(name: &str, node: &str) -> RotaWindow {
    RotaWindow::new(
        name,
        RotaWindowSpec {
            node: node.into(),
            history: Vec::new(),
            steps: Vec::new(),
            closed: Vec::new(),
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

/// What the chart's RBAC leaves out of the agents' rights, and the policy refuses too: updates
/// of RotaWindows, and the creation and deletion of Leases.
fn beyond_the_charts_rbac(namespace: &str) -> Vec<Permission> {
    let permission = |verb, group, resource, namespace: Option<&str>| Permission {
        verb,
        group,
        resource,
        subresource: None,
        namespace: namespace.map(Into::into),
    };
    vec![
        permission("update", "rota.dev", "rotawindows", None),
        permission("create", "coordination.k8s.io", "leases", Some(namespace)),
        permission("delete", "coordination.k8s.io", "leases", Some(namespace)),
    ]
}

/// Binds to the agents' service account a ClusterRole `name` with [`beyond_the_charts_rbac`]:
/// an RBAC broader than the chart's, as another role bound to the agents would grant.
async fn broaden(admin: &Client, name: &str, chart: &Chart) -> Result<()> {
    let meta = ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    };
    let rule = |group: &str, resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: meta.clone(),
                rules: Some(vec![
                    rule("rota.dev", "rotawindows", &["update"]),
                    rule("coordination.k8s.io", "leases", &["create", "delete"]),
                ]),
                ..ClusterRole::default()
            },
        )
        .await
        .with_context(|| format!("creating the ClusterRole {name}"))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: meta,
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: name.into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "rota-agent".into(),
                    namespace: Some(chart.namespace().into()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .with_context(|| format!("creating the ClusterRoleBinding {name}"))?;
    Ok(())
}

/// Deletes what [`broaden`] made.
async fn narrow(admin: &Client, name: &str) -> Result<()> {
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(name, &Default::default())
        .await?;
    Api::<ClusterRole>::all(admin.clone())
        .delete(name, &Default::default())
        .await?;
    Ok(())
}

/// Node A's agent may cordon, label and taint A and set A's lifecycle conditions; create and
/// update A's RotaNode, keeping or clearing the grant and the withdrawal the scheduler wrote;
/// create and delete A's RotaWindows; give back a slot A holds; and pause the fleet. It may not
/// cordon B or set B's conditions, write B's RotaNode or RotaWindows, grant itself a slot or
/// withdraw one, rewrite a RotaWindow, take a slot (free or B's, by update or create), renew or
/// delete a Lease, give back B's slot, or change the fleet's other settings. A token bound to
/// no pod may write none of it; the admin may.
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
    // Its own Node's lifecycle conditions, a patch of its status (nodes/status)...
    let planned = Patch::Strategic(json!({ "status": { "conditions": [{
        "type": "MaintenancePlanned",
        "status": "True",
        "reason": "RotaMaintenanceQueued",
        "message": "rota queued the node for maintenance",
    }] } }));
    nodes_as_a
        .patch_status(a, &PatchParams::default(), &planned)
        .await
        .context("A's agent setting its own Node's conditions")?;
    // ...but not another node's.
    refused(
        "setting B's conditions",
        nodes_as_a
            .patch_status(b, &PatchParams::default(), &planned)
            .await,
        &policy,
        &denied("change only its own Node", &format!("UPDATE of Node {b}")),
    )?;

    // RotaNodes: its own, created and updated without a grant (never created with one)...
    let rota_nodes_as_a: Api<RotaNode> = Api::all(agent.clone());
    let admin_rota_nodes: Api<RotaNode> = Api::all(admin.clone());
    let own_grant = "only keep or clear the grant of its RotaNode (only the scheduler grants)";
    refused(
        "creating its RotaNode with a grant",
        rota_nodes_as_a
            .create(&post, &granted(rota_node(a, a), Some(0)))
            .await,
        &policy,
        &denied(
            own_grant,
            &format!("CREATE of RotaNode {a} granting it a slot"),
        ),
    )?;
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
    let mut disguised = own.clone();
    disguised.spec.node = b.into();
    refused(
        "making its own RotaNode B's",
        rota_nodes_as_a.replace(a, &post, &disguised).await,
        &policy,
        &denied(own_rota_node, &format!("UPDATE of RotaNode {a}")),
    )?;

    // Its grant: only the scheduler writes one (the admin here, as the scheduler does); the
    // agent keeps it while it writes, and clears it...
    let granting = denied(
        own_grant,
        &format!("UPDATE of RotaNode {a} granting it a slot"),
    );
    refused(
        "granting itself a slot",
        rota_nodes_as_a
            .replace(a, &post, &granted(own.clone(), Some(0)))
            .await,
        &policy,
        &granting,
    )?;
    let own = admin_rota_nodes
        .replace(a, &post, &granted(own, Some(0)))
        .await
        .context("the scheduler's grant")?;
    let own = rota_nodes_as_a
        .replace(a, &post, &own)
        .await
        .context("A's agent keeping its grant")?;
    // ...but changes no grant's slot...
    let mut moved = own.clone();
    moved.spec.grant = moved.spec.grant.map(|g| GrantSpec { slot: 1, ..g });
    refused(
        "changing the slot of its grant",
        rota_nodes_as_a.replace(a, &post, &moved).await,
        &policy,
        &granting,
    )?;
    let own = rota_nodes_as_a
        .replace(a, &post, &granted(own, None))
        .await
        .context("A's agent clearing its grant")?;
    // ...and the same of a withdrawal, which only the scheduler records.
    let own_withdrawal =
        "only keep or clear the withdrawal in its RotaNode (only the scheduler withdraws)";
    let withdrawing = denied(
        own_withdrawal,
        &format!("UPDATE of RotaNode {a} setting spec.withdrawn"),
    );
    refused(
        "withdrawing a slot from itself",
        rota_nodes_as_a
            .replace(a, &post, &withdrawn(own.clone(), Some(0), "notTakenUp"))
            .await,
        &policy,
        &withdrawing,
    )?;
    let own = admin_rota_nodes
        .replace(a, &post, &withdrawn(own, Some(0), "notTakenUp"))
        .await
        .context("the scheduler's withdrawal")?;
    let own = rota_nodes_as_a
        .replace(a, &post, &own)
        .await
        .context("A's agent keeping its withdrawal")?;
    refused(
        "changing its withdrawal",
        rota_nodes_as_a
            .replace(a, &post, &withdrawn(own.clone(), Some(1), "unused"))
            .await,
        &policy,
        &withdrawing,
    )?;
    let own = rota_nodes_as_a
        .replace(a, &post, &withdrawn(own, None, ""))
        .await
        .context("A's agent clearing its withdrawal")?;
    ensure!(
        own.spec.grant.is_none() && own.spec.withdrawn.is_none(),
        "{:?}",
        own.spec
    );

    // RotaWindows (its ended windows): its own, created and deleted...
    let windows_as_a: Api<RotaWindow> = Api::all(agent.clone());
    let admin_windows: Api<RotaWindow> = Api::all(admin.clone());
    let own_window = format!("{a}-1-0");
    let own = windows_as_a
        .create(&post, &rota_window(&own_window, a))
        .await
        .context("A's agent creating its RotaWindow")?;
    // ...but never rewritten (the chart's RBAC has no update of RotaWindows)...
    refused_by_rbac(
        "rewriting its own RotaWindow",
        windows_as_a.replace(&own_window, &post, &own).await,
        "update",
        "rotawindows",
    )?;
    // ...and B's neither made nor deleted.
    let own_windows = "only create and delete its own RotaWindows";
    let b_s_window = format!("{b}-1-0");
    refused(
        "creating B's RotaWindow",
        windows_as_a
            .create(&post, &rota_window(&b_s_window, b))
            .await,
        &policy,
        &denied(own_windows, &format!("CREATE of RotaWindow {b_s_window}")),
    )?;
    admin_windows
        .create(&post, &rota_window(&b_s_window, b))
        .await?;
    refused(
        "deleting B's RotaWindow",
        windows_as_a.delete(&b_s_window, &Default::default()).await,
        &policy,
        &denied(own_windows, &format!("DELETE of RotaWindow {b_s_window}")),
    )?;
    ensure!(
        admin_windows.get_opt(&b_s_window).await?.is_some(),
        "B's RotaWindow was deleted"
    );
    windows_as_a
        .delete(&own_window, &Default::default())
        .await
        .context("A's agent deleting its RotaWindow")?;

    // Leases: a slot it holds (taken for it by the scheduler: the admin here) given back...
    let leases_as_a: Api<Lease> = Api::namespaced(agent.clone(), chart.namespace());
    let admin_leases: Api<Lease> = Api::namespaced(admin.clone(), chart.namespace());
    let taken = admin_leases
        .create(&post, &lease("rota-slot-0", Some(a)))
        .await
        .context("the scheduler taking a slot for A")?;
    let free = leases_as_a
        .replace("rota-slot-0", &post, &held_by(taken, None))
        .await
        .context("A's agent giving its slot back")?;
    // ...but no free slot taken, B's neither given back nor taken over, its own not renewed...
    let own_lease = "only give back its own Lease";
    refused(
        "taking a free slot",
        leases_as_a
            .replace("rota-slot-0", &post, &held_by(free.clone(), Some(a)))
            .await,
        &policy,
        &denied(own_lease, &format!("UPDATE of Lease rota-slot-0 for {a}")),
    )?;
    let theirs = admin_leases
        .create(&post, &lease("rota-slot-1", Some(b)))
        .await?;
    for (what, holder, whose) in [
        ("giving B's slot back", None, format!("held by {b}")),
        ("taking B's slot", Some(a), format!("held by {b} for {a}")),
    ] {
        refused(
            what,
            leases_as_a
                .replace("rota-slot-1", &post, &held_by(theirs.clone(), holder))
                .await,
            &policy,
            &denied(own_lease, &format!("UPDATE of Lease rota-slot-1 {whose}")),
        )?;
    }
    let held = admin_leases
        .replace("rota-slot-0", &post, &held_by(free, Some(a)))
        .await
        .context("the scheduler taking the slot for A again")?;
    refused(
        "renewing its own slot",
        leases_as_a
            .replace("rota-slot-0", &post, &slots::renewed(&held, now_millis()))
            .await,
        &policy,
        &denied(
            own_lease,
            &format!("UPDATE of Lease rota-slot-0 held by {a} for {a}"),
        ),
    )?;
    // ...and no Lease created or deleted (the chart's RBAC has neither).
    refused_by_rbac(
        "taking a slot by create",
        leases_as_a
            .create(&post, &lease("rota-slot-2", Some(a)))
            .await,
        "create",
        "leases",
    )?;
    refused_by_rbac(
        "deleting B's slot",
        leases_as_a.delete("rota-slot-1", &Default::default()).await,
        "delete",
        "leases",
    )?;

    // Where a broader RBAC than the chart's lets the agents rewrite RotaWindows and create and
    // delete Leases, the policy still refuses each.
    let broader = format!("{}-broader-agents", scope.id());
    broaden(&admin, &broader, &chart).await?;
    let beyond = beyond_the_charts_rbac(chart.namespace());
    wait_for("the broader RBAC", PATIENCE, || async {
        Ok(missing(&agent, &beyond).await?.is_empty().then_some(()))
    })
    .await?;
    let own_window = format!("{a}-2-0");
    let own = windows_as_a
        .create(&post, &rota_window(&own_window, a))
        .await
        .context("A's agent creating its RotaWindow")?;
    refused(
        "rewriting its own RotaWindow",
        windows_as_a.replace(&own_window, &post, &own).await,
        &policy,
        &denied(own_windows, &format!("UPDATE of RotaWindow {own_window}")),
    )?;
    let mut disguised = own;
    disguised.spec.node = b.into();
    refused(
        "making its own RotaWindow B's",
        windows_as_a.replace(&own_window, &post, &disguised).await,
        &policy,
        &denied(own_windows, &format!("UPDATE of RotaWindow {own_window}")),
    )?;
    refused(
        "rewriting B's RotaWindow",
        windows_as_a
            .replace(&b_s_window, &post, &admin_windows.get(&b_s_window).await?)
            .await,
        &policy,
        &denied(own_windows, &format!("UPDATE of RotaWindow {b_s_window}")),
    )?;
    for holder in [a, b] {
        refused(
            &format!("taking a slot for {holder} by create"),
            leases_as_a
                .create(&post, &lease("rota-slot-2", Some(holder)))
                .await,
            &policy,
            &denied(
                own_lease,
                &format!("CREATE of Lease rota-slot-2 for {holder}"),
            ),
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
    windows_as_a
        .delete(&own_window, &Default::default())
        .await
        .context("A's agent deleting its RotaWindow")?;
    narrow(&admin, &broader).await?;
    let still = admin_leases.get("rota-slot-1").await?;
    ensure!(
        still.spec.and_then(|s| s.holder_identity).as_deref() == Some(b),
        "B lost its slot"
    );
    ensure!(
        admin_leases.get_opt("rota-slot-2").await?.is_none(),
        "a slot was taken by create"
    );

    // rota-config: the agent pauses the fleet...
    let maps_as_a: Api<ConfigMap> = Api::namespaced(agent.clone(), chart.namespace());
    let settings = maps_as_a
        .create(&post, &config_map("rota-config", &[("paused", "budget")]))
        .await
        .context("A's agent pausing the fleet")?;
    // ...but sets no concurrency the chart did not give it, lifts no pause, writes no other
    // key (not even the node-tag counter of earlier versions), touches no other ConfigMap.
    let own_settings = "may only pause the fleet and set the concurrency (agent.concurrency is \
                        not set) in rota-config, and write no other ConfigMap; refused";
    for (what, key, value) in [
        ("raising the concurrency", "concurrency", "100"),
        ("lifting the pause", "paused", ""),
        ("starting a new rollout", "resumedAt", "1"),
        ("widening the rollout", "rollout", "batches=all"),
        ("taking a node tag", "nextNodeTag", "1"),
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

    admin_windows
        .delete(&b_s_window, &Default::default())
        .await?;
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

/// rota's scheduler (`rota scheduler`), run as the chart's Deployment runs it but outside a
/// pod: with a token of the scheduler's own service account, whose writes the node-scoped
/// policy does not look at.
struct SchedulerHost {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl SchedulerHost {
    async fn start(env: &TestEnv, admin: &Client, chart: &Chart) -> Result<SchedulerHost> {
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        env.write_kubeconfig_as(
            admin,
            chart.namespace(),
            &chart.scheduler_account(),
            &kubeconfig,
        )
        .await?;
        let log = std::fs::File::create(dir.path().join("scheduler.log"))?;
        let child = Command::new(ROTA)
            .arg("scheduler")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--namespace={}", chart.namespace()))
            .arg("--identity=authority-test")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting rota scheduler")?;
        Ok(SchedulerHost {
            dir,
            child: Some(child),
        })
    }

    fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    fn log(&self) -> Result<String> {
        Ok(std::fs::read_to_string(
            self.dir.path().join("scheduler.log"),
        )?)
    }
}

impl Drop for SchedulerHost {
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
    // The concurrency the agent sets, as the chart's DaemonSet would pass it. The scheduler
    // runs here as a process ([`SchedulerHost`]; kwok runs nothing in a pod), and the chart's
    // replicas are kept off the node: its drain would evict them, and its health gate wait for
    // them to be Ready again, which they cannot be while the one node is cordoned.
    let values = json!({
        "agent": { "concurrency": 1 },
        "scheduler": { "nodeSelector": { "rota.dev/test": "no-node" } },
    });
    let chart = Chart::install(env, &scope, values).await?;
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

    // The one slot is still held by a node that is gone (neither its Node nor its RotaNode is
    // there), which no agent may free: the agent queues and waits, taking no slot, until the
    // scheduler takes the slot back and grants it.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), chart.namespace());
    let gone = format!("{}-gone", scope.id());
    let mut orphan = lease(&slots::slot_name(0), Some(&gone));
    orphan.metadata.labels = Some([(slots::SLOT_LABEL.to_string(), "0".to_string())].into());
    leases.create(&PostParams::default(), &orphan).await?;
    let holder = || async {
        let lease = leases.get(&slots::slot_name(0)).await?;
        anyhow::Ok(slots::holder(&lease).map(String::from))
    };

    let mut host = AgentHost::start(node, kubeconfig.path(), chart.namespace())?;
    std::fs::write(host.path("root/run/reboot-needed"), b"")?;
    let in_log = |host: &AgentHost, what: &str| match host.log() {
        Ok(log) => format!("{what}; the agent's log:\n{log}"),
        Err(e) => format!("{what}; no log: {e}"),
    };
    let waited = wait_for("the agent to queue", PATIENCE, || async {
        let queued = store
            .node(&name)
            .await?
            .is_some_and(|r| r.state == NodeState::Queued);
        Ok(queued.then_some(()))
    })
    .await;
    waited.with_context(|| in_log(&host, "the agent did not queue"))?;
    ensure!(
        !unschedulable(&scope, node).await?,
        "cordoned without a slot"
    );
    ensure!(
        holder().await?.as_deref() == Some(gone.as_str()),
        "the slot of the node that is gone was freed without a scheduler"
    );
    let mut scheduler = SchedulerHost::start(env, &admin, &chart).await?;
    let in_logs = |host: &AgentHost, what: &str| {
        let scheduler = match scheduler.log() {
            Ok(log) => log,
            Err(e) => format!("no log: {e}"),
        };
        in_log(host, &format!("{what}; the scheduler's log:\n{scheduler}"))
    };
    let waited = wait_for("the reboot command", PATIENCE, || async {
        Ok(host.rebooted().then_some(()))
    })
    .await;
    waited.with_context(|| in_logs(&host, "the agent did not reboot its node"))?;
    // The scheduler granted it the slot, which it took up; it cordoned with its label and
    // taint, and drained.
    let record = store.node(&name).await?.context("no RotaNode")?;
    ensure!(
        record.state == NodeState::Rebooting && record.slot == Some(0),
        "{record:?}"
    );
    ensure!(holder().await?.as_deref() == Some(node), "the slot's Lease");
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
    waited.with_context(|| in_logs(&host, "the window did not end"))?;
    host.stop()?;
    scheduler.stop()?;
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
    // Not one of their requests was refused on the way.
    for (who, log) in [("agent", host.log()?), ("scheduler", scheduler.log()?)] {
        ensure!(
            !log.contains(&chart.policy()) && !log.contains("forbidden"),
            "the {who} met a refusal: {log}"
        );
    }

    Api::<RotaNode>::all(admin)
        .delete(node, &Default::default())
        .await?;
    chart.uninstall()?;
    scope.cleanup().await
}

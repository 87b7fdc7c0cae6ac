//! The chart's roles for people (README "Roles for operators"), `<release>-viewer` and
//! `<release>-operator`, bound through `rbac.viewers` and `rbac.operators`, on the real API
//! server of `testenv/`: the real `rota` binary run as a viewer shows the fleet and its history
//! but may not ask for maintenance or pause the fleet (403); run as an operator it may, and is
//! refused nothing on the way. Each of the operator's commands lands in the audit trail in the
//! operator's own name, which nobody can forge (the chart's audit-trail policy). And the chart's
//! other accounts as the API server's authorizer sees them: rota's scheduler may do all it
//! needs, and the agents take no slot.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kube::Api;
use rota_core::{NodeName, Process};
use rota_e2e::testenv::wait_for;
use rota_kube_api::permissions::{Permission, agent_permissions, missing, scheduler_permissions};
use rota_kube_api::{RotaAuditRecord, RotaAuditRecordSpec, RotaNode};
use rota_store::{Store, StoreExt};
use rota_store_kube::{KubeStore, KubeStoreConfig};
use serde_json::json;

mod kube_common;

use kube_common::chart::Chart;
use kube_common::{PATIENCE, ROTA, scope_with_nodes};

/// Runs `rota <args> --store kube` with `kubeconfig` against `namespace`, until it stops.
async fn rota(kubeconfig: &Path, namespace: &str, args: &[&str]) -> Result<Output> {
    let run = tokio::process::Command::new(ROTA)
        .args(args)
        .args(["--store", "kube", "--namespace", namespace])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(PATIENCE, run)
        .await
        .context("rota did not stop")?
        .context("running rota")
}

/// `rota <args>`'s stdout; fails unless it succeeded without being refused anything on the
/// way: a warning of a refusal (403) is something the role lacks, such as the wake of the
/// agents after a request or the Event of an unlock, which the command only warns about.
async fn allowed(kubeconfig: &Path, namespace: &str, args: &[&str]) -> Result<String> {
    let out = rota(kubeconfig, namespace, args).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success() && !stderr.contains("forbidden"),
        "rota {args:?} ({}): {stderr}",
        out.status
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Fails unless `rota <args>` failed for want of the permission to `verb` `resource`.
async fn forbidden(
    kubeconfig: &Path,
    namespace: &str,
    args: &[&str],
    verb: &str,
    resource: &str,
) -> Result<()> {
    let out = rota(kubeconfig, namespace, args).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cannot = format!("cannot {verb} {resource}");
    ensure!(
        !out.status.success() && stderr.contains(&cannot) && stderr.contains("forbidden"),
        "rota {args:?} was not refused the {cannot} ({}): {stderr}",
        out.status
    );
    Ok(())
}

/// One verb on RotaNodes, cluster-wide.
fn on_rota_nodes(verb: &'static str) -> Permission {
    on_rota("rotanodes", verb)
}

/// One verb on a resource of rota's group, cluster-wide.
fn on_rota(resource: &'static str, verb: &'static str) -> Permission {
    Permission {
        verb,
        group: "rota.dev",
        resource,
        subresource: None,
        namespace: None,
    }
}

/// One verb on the Leases of `namespace`.
fn on_leases(namespace: &str, verb: &'static str) -> Permission {
    Permission {
        verb,
        group: "coordination.k8s.io",
        resource: "leases",
        subresource: None,
        namespace: Some(namespace.into()),
    }
}

/// Waits until `client` may do all of `wanted` (RBAC takes a moment to see new bindings).
async fn wait_allowed(who: &str, client: &kube::Client, wanted: &[Permission]) -> Result<()> {
    wait_for(&format!("the {who}'s rights"), PATIENCE, || async {
        Ok(missing(client, wanted).await?.is_empty().then_some(()))
    })
    .await
}

#[tokio::test]
async fn a_viewer_sees_the_fleet_and_an_operator_may_also_ask_for_maintenance() -> Result<()> {
    let Some((env, scope, nodes)) = scope_with_nodes("roles", 1).await? else {
        return Ok(());
    };
    let node = NodeName::new(&nodes[0])?;
    let people = ["viewer", "operator"];
    let subject = |name: &str| json!([{ "kind": "ServiceAccount", "name": name, "namespace": scope.namespace() }]);
    let values =
        json!({ "rbac": { "viewers": subject(people[0]), "operators": subject(people[1]) } });
    let chart = Chart::install(env, &scope, values).await?;
    let namespace = chart.namespace();
    // The node's agent has opened its session: its RotaNode is there (written by the admin
    // here, as an agent's store writes it). The checks read with a store of their own, which
    // holds no session and so always asks the API server.
    let store = || {
        KubeStore::connect(
            scope.client(),
            KubeStoreConfig {
                namespace: namespace.into(),
                ..KubeStoreConfig::default()
            },
        )
    };
    store()
        .await?
        .open_session(&node, Duration::from_secs(600))
        .await?;
    let store = store().await?;
    let dir = tempfile::tempdir()?;
    let mut kubeconfigs = Vec::new();
    let mut clients = Vec::new();
    for (person, may) in people.into_iter().zip(["list", "update"]) {
        let client = scope.service_account_client(env, person).await?;
        // RBAC takes a moment to see new bindings.
        wait_for(&format!("the {person}'s binding"), PATIENCE, || async {
            Ok(missing(&client, &[on_rota_nodes(may)])
                .await?
                .is_empty()
                .then_some(()))
        })
        .await?;
        let path = dir.path().join(person);
        env.write_kubeconfig_as(&scope.client(), scope.namespace(), person, &path)
            .await?;
        kubeconfigs.push(path);
        clients.push(client);
    }
    let (viewer, operator) = (&kubeconfigs[0], &kubeconfigs[1]);

    // The operator's RotaWindows: an ended window is moved into a new one and the oldest are
    // deleted (request, cancel, retry, unlock), but a window is never rewritten.
    let windows = ["get", "list", "create", "delete"].map(|v| on_rota("rotawindows", v));
    wait_allowed("operator", &clients[1], &windows).await?;
    let rewrites = ["update", "patch"].map(|v| on_rota("rotawindows", v));
    ensure!(
        missing(&clients[1], &rewrites).await? == rewrites,
        "the operator may rewrite a RotaWindow"
    );
    // rota's scheduler, under its own service account, may do all it does...
    let scheduler = env
        .client_as(&scope.client(), namespace, &chart.scheduler_account())
        .await?;
    wait_allowed("scheduler", &scheduler, &scheduler_permissions(namespace)).await?;
    // ...and the agents all they do, but take no slot: they neither create nor delete a Lease
    // (the scheduler takes the slots; an agent gives its own back).
    let agent = env
        .client_as(&scope.client(), namespace, "rota-agent")
        .await?;
    wait_allowed("agent", &agent, &agent_permissions(namespace, true)).await?;
    let slots_taken = ["create", "delete"].map(|v| on_leases(namespace, v));
    ensure!(
        missing(&agent, &slots_taken).await? == slots_taken,
        "the agent may create or delete a Lease"
    );
    // Nor does an agent write a Procedure's status: the scheduler alone does.
    let procedure_status = ["get", "patch", "update"].map(|verb| Permission {
        subresource: Some("status"),
        ..on_rota("procedures", verb)
    });
    ensure!(
        missing(&agent, &procedure_status).await? == procedure_status,
        "the agent may write a Procedure's status"
    );

    // The viewer sees the fleet and its history...
    let status = allowed(viewer, namespace, &["status"]).await?;
    ensure!(status.contains(node.as_str()), "{status}");
    allowed(viewer, namespace, &["history"]).await?;
    allowed(viewer, namespace, &["mop", "list"]).await?;
    // ...but may not ask for maintenance, nor pause the fleet.
    let request = ["request", node.as_str(), "--reboot"];
    forbidden(viewer, namespace, &request, "update", "rotanodes.rota.dev").await?;
    ensure!(
        store.open_requests(&node).await?.is_empty(),
        "the viewer's request was recorded"
    );
    let pause = ["pause", "--reason", "a viewer's pause"];
    forbidden(viewer, namespace, &pause, "write", "configmaps").await?;

    // The operator sees the fleet, asks for a reboot, and pauses and resumes the fleet.
    allowed(operator, namespace, &["status"]).await?;
    allowed(operator, namespace, &request).await?;
    let open = store.open_requests(&node).await?;
    ensure!(
        open.iter().any(|r| r.process == Process::Reboot),
        "no reboot request: {open:?}"
    );
    allowed(
        operator,
        namespace,
        &["pause", "--reason", "an operator's pause"],
    )
    .await?;
    // The store sees rota-config through its watch, a moment after the write.
    wait_for("the pause", PATIENCE, || async {
        Ok(store.paused().await?.map(drop))
    })
    .await?;
    allowed(operator, namespace, &["resume", "--reason", "triage done"]).await?;
    wait_for("the resume", PATIENCE, || async {
        Ok(store.paused().await?.is_none().then_some(()))
    })
    .await?;
    allowed(operator, namespace, &["cancel", node.as_str(), "--reboot"]).await?;

    // Each of the operator's commands is in the audit trail, in the name the API server knows
    // the operator by, and the viewer reads it.
    let operator_user = format!("system:serviceaccount:{}:{}", scope.namespace(), people[1]);
    let history: Vec<serde_json::Value> =
        serde_json::from_str(&allowed(viewer, namespace, &["history", "-o", "json"]).await?)?;
    let commands: Vec<(&str, &str)> = history
        .iter()
        .filter_map(|r| Some((r["event"].as_str()?, r["by"].as_str()?)))
        .collect();
    ensure!(
        commands == ["request", "pause", "resume", "cancel"].map(|c| (c, operator_user.as_str())),
        "{history:?}"
    );
    ensure!(
        history
            .iter()
            .any(|r| r["event"] == "resume" && r["cause"] == "triage done"),
        "{history:?}"
    );
    // Nobody records a command in another's name, nor changes a record.
    let audit_api: Api<RotaAuditRecord> = Api::namespaced(clients[1].clone(), namespace);
    let forged = RotaAuditRecord::new(
        "forged",
        RotaAuditRecordSpec {
            at: rota_kube_api::crd::Timestamp(0),
            command: "unlock".into(),
            node: Some(node.to_string()),
            process: None,
            by: "someone-else".into(),
            reason: None,
        },
    );
    // The API server enforces a new policy within seconds of its creation: until then a dry
    // run of the forgery goes through.
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let audit_policy = chart.audit_policy();
    wait_for(
        "the audit-trail policy to be enforced",
        PATIENCE,
        || async {
            match audit_api.create(&dry_run, &forged).await {
                Ok(_) => Ok(None),
                Err(kube::Error::Api(s)) if s.message.contains(&audit_policy) => Ok(Some(())),
                Err(e) => Err(e.into()),
            }
        },
    )
    .await?;
    let refused = audit_api
        .create(&Default::default(), &forged)
        .await
        .expect_err("a forged record")
        .to_string();
    ensure!(
        refused.contains(&chart.audit_policy()) && refused.contains("someone-else"),
        "{refused}"
    );
    let mut recorded = audit_api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("an audit record")?;
    let name = recorded.metadata.name.clone().context("a name")?;
    recorded.spec.reason = Some("rewritten".into());
    // The operator may not update one (RBAC); a cluster admin may, and the policy refuses.
    let refused = Api::<RotaAuditRecord>::namespaced(scope.client(), namespace)
        .replace(&name, &Default::default(), &recorded)
        .await
        .expect_err("a changed record")
        .to_string();
    ensure!(
        refused.contains(&chart.audit_policy()) && refused.contains("never changed"),
        "{refused}"
    );

    Api::<RotaNode>::all(scope.client())
        .delete(node.as_str(), &Default::default())
        .await?;
    chart.uninstall()?;
    scope.cleanup().await
}

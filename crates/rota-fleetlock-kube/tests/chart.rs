//! The chart's FleetLock server (`fleetlock.*`) as `helm template` renders it with the helm
//! that `testenv/build` builds: off by default; on, a Deployment of one replica with its
//! values as `rota fleetlock` flags, its Service, its own RBAC and policy, an optional
//! NetworkPolicy, and the agents' DaemonSet kept off the FleetLock hosts. What the chart grants
//! and refuses on a real API server is tested in crates/rota/tests/kube_fleetlock.rs.

use anyhow::{Context as _, Result, ensure};
use rota_e2e::chart;
use rota_fleetlock_kube::HOST_LABEL;
use serde_json::{Value, json};

/// The rendered objects of `kind` named `name`.
fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn get<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    find(objects, kind, name).with_context(|| format!("no {kind} {name} rendered"))
}

/// The FleetLock server's args in the rendered objects.
fn args(objects: &[Value]) -> Result<Vec<String>> {
    let deployment = get(objects, "Deployment", "rota-fleetlock")?;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    Ok(serde_json::from_value(container["args"].clone())?)
}

/// The required node selector terms of the agents' DaemonSet.
fn agent_terms(objects: &[Value]) -> Result<Vec<Value>> {
    let daemonset = get(objects, "DaemonSet", "rota-agent")?;
    let terms = &daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    Ok(serde_json::from_value(terms.clone()).unwrap_or_default())
}

fn keeps_off_hosts(term: &Value) -> bool {
    let not_a_host = json!({ "key": HOST_LABEL, "operator": "NotIn", "values": ["true"] });
    term["matchExpressions"]
        .as_array()
        .is_some_and(|all| all.contains(&not_a_host))
}

#[test]
fn the_chart_renders_no_fleetlock_server_by_default() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let objects = chart::objects(&[])?;
    let fleetlock: Vec<&Value> = objects
        .iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "fleetlock")
        .collect();
    ensure!(fleetlock.is_empty(), "{fleetlock:?}");
    ensure!(
        agent_terms(&objects)?.is_empty(),
        "the agents keep off nodes without the FleetLock server"
    );
    Ok(())
}

#[test]
fn the_chart_renders_the_fleetlock_server_with_its_values_as_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let objects = chart::objects(&["fleetlock.enabled=true"])?;
    let deployment = get(&objects, "Deployment", "rota-fleetlock")?;
    let spec = &deployment["spec"];
    ensure!(
        spec["replicas"] == 1 && spec["strategy"]["type"] == "Recreate",
        "{spec}"
    );
    let pod = &spec["template"]["spec"];
    ensure!(pod["serviceAccountName"] == "rota-fleetlock", "{pod}");
    ensure!(
        pod["containers"][0]["command"] == json!(["rota", "fleetlock"]),
        "{pod}"
    );
    let default = args(&objects)?;
    for arg in [
        "--store=kube",
        "--namespace=rota-system",
        "--kept-windows=20",
        "--listen=0.0.0.0:8470",
        "--drain-timeout=10m",
        "--reboot-timeout=15m",
        "--verify-timeout=10m",
        "--health-interval=5s",
        "--client-ttl=15m",
        "--lock-wait=15m",
        "--backoff-initial=1m",
        "--backoff-max=1h",
        "--backoff-exponent=2",
        "--drain-concurrency=5",
        "--log-format=text",
    ] {
        ensure!(default.iter().any(|a| a == arg), "no {arg} in {default:?}");
    }
    for absent in [
        "--drain-force",
        "--health-pdbs",
        "--node-conditions",
        "--hours",
    ] {
        ensure!(
            !default.iter().any(|a| a.starts_with(absent)),
            "{absent} in {default:?}"
        );
    }
    // Preferably off the FleetLock hosts, whose drains evict it.
    let preferred = &pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["preference"];
    ensure!(keeps_off_hosts(preferred), "{pod}");
    let service = get(&objects, "Service", "rota-fleetlock")?;
    ensure!(
        service["spec"]["type"] == "ClusterIP"
            && service["spec"]["ports"][0]["port"] == 8470
            && service["spec"]["ports"][0]["targetPort"] == "fleetlock"
            && service["spec"]["selector"]["app.kubernetes.io/component"] == "fleetlock",
        "{service}"
    );
    get(&objects, "ServiceAccount", "rota-fleetlock")?;
    get(
        &objects,
        "ValidatingAdmissionPolicy",
        "rota-fleetlock-scoped",
    )?;
    get(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "rota-fleetlock-scoped",
    )?;
    // The agents' policy stays as it is, beside the server's.
    get(
        &objects,
        "ValidatingAdmissionPolicy",
        "rota-agent-node-scoped",
    )?;
    ensure!(
        find(&objects, "NetworkPolicy", "rota-fleetlock").is_none(),
        "a NetworkPolicy by default"
    );
    // Its RBAC grants no slot and no setting: Leases are read, listed and given back,
    // rota-config only created (the store's dry-run probe).
    let role = get(&objects, "Role", "rota-fleetlock")?;
    let verbs = |resource: &str| -> Vec<String> {
        role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|all| all.contains(&json!(resource)))
            })
            .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    };
    ensure!(verbs("leases") == ["get", "list", "update"], "{role}");
    ensure!(
        verbs("configmaps") == ["get", "list", "watch", "create"],
        "{role}"
    );
    let cluster_role = get(&objects, "ClusterRole", "rota-fleetlock")?;
    ensure!(
        cluster_role.to_string().contains("nodes/status"),
        "no nodes/status for the lifecycle conditions: {cluster_role}"
    );

    let custom = chart::objects(&[
        "fleetlock.enabled=true",
        "fleetlock.port=9000",
        "fleetlock.clientTtl=\"20m\"",
        "fleetlock.lockWait=\"5m\"",
        "fleetlock.logFormat=\"json\"",
        "fleetlock.extraArgs=[\"--drain-grace-period=30s\"]",
        "namespace.name=\"ops\"",
        "agent.drainTimeout=\"20m\"",
        "agent.hours=[\"mon-fri 22:00-04:00 Europe/Berlin\"]",
        "agent.healthPdbs=true",
        "agent.nodeConditions=false",
        "drain.force=true",
        "drain.cordonLabels={\"rota.dev/maintenance\":\"out\"}",
        "drain.annotateNodes=true",
    ])?;
    let flags = args(&custom)?;
    for arg in [
        "--namespace=ops",
        "--listen=0.0.0.0:9000",
        "--client-ttl=20m",
        "--lock-wait=5m",
        "--log-format=json",
        "--drain-timeout=20m",
        "--hours=mon-fri 22:00-04:00 Europe/Berlin",
        "--health-pdbs",
        "--node-conditions=false",
        "--drain-force",
        "--cordon-label=rota.dev/maintenance=out",
        "--annotate-nodes",
        "--drain-grace-period=30s",
    ] {
        ensure!(flags.iter().any(|a| a == arg), "no {arg} in {flags:?}");
    }
    let service = get(&custom, "Service", "rota-fleetlock")?;
    ensure!(service["spec"]["ports"][0]["port"] == 9000, "{service}");
    let cluster_role = get(&custom, "ClusterRole", "rota-fleetlock")?;
    ensure!(
        !cluster_role.to_string().contains("nodes/status"),
        "nodes/status without the lifecycle conditions: {cluster_role}"
    );
    Ok(())
}

#[test]
fn the_agents_keep_off_the_fleetlock_hosts_while_the_server_is_enabled() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    ensure!(
        rota_e2e::fleetlock::HOST_LABEL == HOST_LABEL,
        "the tests' FleetLock host label is not the server's"
    );
    let terms = agent_terms(&chart::objects(&["fleetlock.enabled=true"])?)?;
    ensure!(terms.len() == 1 && keeps_off_hosts(&terms[0]), "{terms:?}");
    // An affinity of the operator's own: the hosts are kept out of each of its terms (terms
    // are alternatives), and the rest of it stays.
    let own = json!({
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    { "matchExpressions": [{ "key": "pool", "operator": "In", "values": ["a"] }] },
                    { "matchFields": [{ "key": "metadata.name", "operator": "In", "values": ["n"] }] },
                ]
            }
        },
        "podAntiAffinity": {},
    });
    let objects = chart::objects(&["fleetlock.enabled=true", &format!("affinity={own}")])?;
    let terms = agent_terms(&objects)?;
    ensure!(
        terms.len() == 2 && terms.iter().all(keeps_off_hosts),
        "{terms:?}"
    );
    ensure!(
        terms[0]["matchExpressions"][0]["key"] == "pool"
            && terms[1]["matchFields"][0]["key"] == "metadata.name",
        "{terms:?}"
    );
    let daemonset = get(&objects, "DaemonSet", "rota-agent")?;
    ensure!(
        daemonset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"] == json!({}),
        "{daemonset}"
    );
    // Without the server, the operator's affinity is left as it is.
    let objects = chart::objects(&[&format!("affinity={own}")])?;
    ensure!(
        !agent_terms(&objects)?.iter().any(keeps_off_hosts),
        "the agents keep off nodes without the FleetLock server"
    );
    Ok(())
}

#[test]
fn the_network_policy_lets_in_only_the_hosts_addresses() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let objects = chart::objects(&[
        "fleetlock.enabled=true",
        "fleetlock.networkPolicy={\"enabled\":true,\"ipBlocks\":[\"10.0.0.0/24\",\"fd00::/64\"]}",
    ])?;
    let policy = get(&objects, "NetworkPolicy", "rota-fleetlock")?;
    let spec = &policy["spec"];
    ensure!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "fleetlock"
            && spec["policyTypes"] == json!(["Ingress"]),
        "{spec}"
    );
    ensure!(
        spec["ingress"]
            == json!([{
                "from": [
                    { "ipBlock": { "cidr": "10.0.0.0/24" } },
                    { "ipBlock": { "cidr": "fd00::/64" } },
                ],
                "ports": [{ "port": "fleetlock", "protocol": "TCP" }],
            }]),
        "{spec}"
    );
    chart::ensure_rejected(&[
        (
            "fleetlock={\"enabled\":true,\"port\":8470,\"clientTtl\":\"15m\",\"lockWait\":\"15m\",\
             \"logLevel\":\"info\",\"logFormat\":\"text\",\"networkPolicy\":{\"enabled\":true,\
             \"ipBlocks\":[]}}",
            "fleetlock.networkPolicy.enabled needs fleetlock.networkPolicy.ipBlocks",
        ),
        (
            "fleetlock.networkPolicy.ipBlocks=[\"10.0.0.1\"]",
            "at '/fleetlock/networkPolicy/ipBlocks/0'",
        ),
        ("fleetlock.port=0", "at '/fleetlock/port'"),
        ("fleetlock.clientTtl=\"0s\"", "at '/fleetlock/clientTtl'"),
    ])
}

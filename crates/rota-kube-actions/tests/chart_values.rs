//! The Helm chart `charts/rota` as `helm template` renders it with the helm that
//! `testenv/build` builds: bad values fail with a message that names them, and the values
//! become the agent's flags, ports, probes and annotations in its DaemonSet.

use anyhow::{Context as _, Result, ensure};
use rota_e2e::chart;
use serde_json::json;

/// The rendered DaemonSet of `helm template` with `--set-json` arguments.
fn rendered_daemonset(sets: &[&str]) -> Result<String> {
    chart::rendered("rota", sets, Some("templates/daemonset.yaml"))
}

/// The agent's args in a rendered DaemonSet: the items of its `args:` list, each unquoted.
fn agent_args(daemonset: &str) -> Result<Vec<String>> {
    let mut lines = daemonset
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1);
    let mut args = Vec::new();
    for line in lines.by_ref() {
        let Some(item) = line.trim().strip_prefix("- ") else {
            break;
        };
        args.push(if item.starts_with('"') {
            serde_json::from_str(item).with_context(|| format!("arg {item}"))?
        } else {
            item.to_string()
        });
    }
    ensure!(!args.is_empty(), "no args in:\n{daemonset}");
    Ok(args)
}

/// The args that start with one of `prefixes`, in their order.
fn starting_with(args: &[String], prefixes: &[&str]) -> Vec<String> {
    args.iter()
        .filter(|a| prefixes.iter().any(|p| a.starts_with(p)))
        .cloned()
        .collect()
}

/// The agent's args that start with one of `prefixes`, in the DaemonSet rendered with `sets`.
fn agent_flags(sets: &[&str], prefixes: &[&str]) -> Result<Vec<String>> {
    Ok(starting_with(
        &agent_args(&rendered_daemonset(sets)?)?,
        prefixes,
    ))
}

#[test]
fn bad_values_fail_helm_template_with_a_clear_message() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let cases = [
        (
            "drain.concurrency=\"five\"",
            "at '/drain/concurrency': got string, want integer",
        ),
        (
            "agent.concurrency=\"two\"",
            "at '/agent/concurrency': got string, want null or integer",
        ),
        ("drain.concurrency=0", "at '/drain/concurrency': minimum"),
        (
            "agent.drainTimeout=600",
            "at '/agent/drainTimeout': got number, want string",
        ),
        ("agent.nodeActions=\"ssh\"", "at '/agent/nodeActions'"),
        (
            "agent.rebootSentinels=[\"/etc/reboot-now\"]",
            "host path /etc/reboot-now is not under any of hostMounts",
        ),
        (
            "hostPathPrefix=\"var/lib/host\"",
            "at '/hostPathPrefix': 'var/lib/host' does not match pattern",
        ),
        (
            "hostPathPrefix=\"/srv/host/\"",
            "at '/hostPathPrefix': '/srv/host/' does not match pattern",
        ),
        (
            "agent.releaseDelay=30",
            "at '/agent/releaseDelay': got number, want string",
        ),
        (
            "agent.healthPdbs=\"yes\"",
            "at '/agent/healthPdbs': got string, want boolean",
        ),
        (
            "agent.logFormat=\"yaml\"",
            "at '/agent/logFormat': value must be one of 'text', 'json'",
        ),
        (
            "metrics.port=0",
            "at '/metrics/port': minimum: got 0, want 1",
        ),
        (
            "metrics.port=65536",
            "at '/metrics/port': maximum: got 65,536, want 65,535",
        ),
        (
            "notifications.webhooks=[\"ftp://x\"]",
            "at '/notifications/webhooks/0': 'ftp://x' does not match pattern",
        ),
        (
            "notifications.slack=[\"https://ok\",\"hooks.slack.com/x\"]",
            "at '/notifications/slack/1': 'hooks.slack.com/x' does not match pattern",
        ),
        (
            "notifications.templates={\"failed\":\"{node}: {cause}\"}",
            "notifications.templates [failed]: no webhook to send them to",
        ),
        (
            "agent.hours=[\"mon-fri 22-04\"]",
            "at '/agent/hours/0': 'mon-fri 22-04' does not match pattern",
        ),
        (
            "agent.failureBudget=0",
            "at '/agent/failureBudget': minimum: got 0, want 1",
        ),
        (
            "agent.failureBudget=\"101%\"",
            "at '/agent/failureBudget': '101%' does not match pattern",
        ),
        (
            "agent.batches=\"fast\"",
            "at '/agent/batches': 'fast' does not match pattern",
        ),
        (
            "agent.groupLimits=[\"zone a=1\"]",
            "at '/agent/groupLimits/0': 'zone a=1' does not match pattern",
        ),
        (
            "blockers.prometheus.url=\"prometheus:9090\"",
            "at '/blockers/prometheus/url'",
        ),
        (
            "blockers.prometheus.alertFiringOnly=true",
            "alert filters need blockers.prometheus.url",
        ),
        (
            "blockers.interval=60",
            "at '/blockers/interval': got number, want string",
        ),
        (
            "notifications.templates={\"rebooted\":\"{node}\"}",
            "at '/notifications/templates': additional properties 'rebooted' not allowed",
        ),
        (
            "drain.cordonLabels={\"kured\":\"not ok\"}",
            "at '/drain/cordonLabels/kured'",
        ),
        (
            "drain.uncordonLabels={\"bad key\":\"done\"}",
            "invalid propertyName 'bad key'",
        ),
        (
            "drain.preferNoScheduleTaint=\"Rota/pending\"",
            "at '/drain/preferNoScheduleTaint'",
        ),
        (
            "drain.annotateNodes=\"yes\"",
            "at '/drain/annotateNodes': got string, want boolean",
        ),
        (
            "drain.skipWaitForDeleteTimeout=30",
            "at '/drain/skipWaitForDeleteTimeout'",
        ),
        ("agent.rebootMethod=\"kexec\"", "at '/agent/rebootMethod'"),
        (
            "agent.drainDelay=30",
            "at '/agent/drainDelay': got number, want string",
        ),
        ("agent.rebootDelay=\"soon\"", "at '/agent/rebootDelay'"),
        (
            "drain.podSelector=true",
            "at '/drain/podSelector': got boolean, want string",
        ),
        (
            "agent.rebootSentinelCommandInterval=300",
            "at '/agent/rebootSentinelCommandInterval': got number, want string",
        ),
        (
            "authority.nodeScoped=\"yes\"",
            "at '/authority/nodeScoped': got string, want boolean",
        ),
        (
            "rbac.operators=[{\"kind\":\"ServiceAccount\",\"name\":\"ops\"}]",
            "at '/rbac/operators/0': missing property 'namespace'",
        ),
        (
            "rbac.viewers=[{\"kind\":\"Robot\",\"name\":\"x\"}]",
            "at '/rbac/viewers/0/kind': value must be one of 'User', 'Group', 'ServiceAccount'",
        ),
        ("scheduler.replicas=0", "at '/scheduler/replicas': minimum"),
        ("scheduler.takeUp=\"0s\"", "at '/scheduler/takeUp'"),
        (
            "scheduler.leaseDuration=15",
            "at '/scheduler/leaseDuration': got number, want string",
        ),
        (
            "scheduler.leader=true",
            "additional properties 'leader' not allowed",
        ),
        (
            "history.keptWindows=0",
            "at '/history/keptWindows': minimum",
        ),
        (
            "history.keptWindows=1001",
            "at '/history/keptWindows': maximum",
        ),
    ];
    chart::ensure_rejected(&cases)
}

/// The scheduler's Deployment, rendered with `--set-json` arguments.
fn rendered_scheduler(sets: &[&str]) -> Result<String> {
    chart::rendered("rota", sets, Some("templates/scheduler.yaml"))
}

#[test]
fn the_chart_renders_the_scheduler_values_as_scheduler_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let default = rendered_scheduler(&[])?;
    for line in [
        "command: [\"rota\", \"scheduler\"]",
        "replicas: 2",
        "serviceAccountName: rota-scheduler",
        "- \"--namespace=rota-system\"",
        "- \"--lease-duration=15s\"",
        "- \"--take-up=60s\"",
        "fieldPath: metadata.name",
        // The agents' nodeSelector, and the replicas spread over nodes.
        "kubernetes.io/os: linux",
        "topologyKey: kubernetes.io/hostname",
    ] {
        ensure!(default.contains(line), "no {line:?} in:\n{default}");
    }
    let custom = rendered_scheduler(&[
        "namespace.name=\"ops\"",
        "scheduler.replicas=3",
        "scheduler.leaseDuration=\"30s\"",
        "scheduler.takeUp=\"2m\"",
        "scheduler.nodeSelector={\"pool\":\"system\"}",
        "scheduler.affinity={\"nodeAffinity\":{}}",
    ])?;
    for line in [
        "replicas: 3",
        "- \"--namespace=ops\"",
        "- \"--lease-duration=30s\"",
        "- \"--take-up=2m\"",
        "pool: system",
        "nodeAffinity: {}",
    ] {
        ensure!(custom.contains(line), "no {line:?} in:\n{custom}");
    }
    for gone in ["kubernetes.io/os: linux", "podAntiAffinity"] {
        ensure!(!custom.contains(gone), "{gone:?} in:\n{custom}");
    }
    // The agents' flags for the history and the namespace.
    let flags = agent_flags(
        &["namespace.name=\"ops\""],
        &["--namespace", "--kept-windows"],
    )?;
    ensure!(
        flags == ["--namespace=ops", "--kept-windows=20"],
        "{flags:?}"
    );
    let flags = agent_flags(&["history.keptWindows=5"], &["--kept-windows"])?;
    ensure!(flags == ["--kept-windows=5"], "{flags:?}");
    Ok(())
}

#[test]
fn the_chart_renders_hours_and_the_failure_budget_as_agent_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = ["--hours", "--failure-budget", "--batches"];
    let default = agent_flags(&[], &ours)?;
    ensure!(
        default.is_empty(),
        "no maintenance hours and no budget by default: {default:?}"
    );
    let custom = agent_flags(
        &[
            "agent.hours=[\"mon-fri 22:00-04:00 Europe/Berlin\",\"sat 08:00:30-10:00\"]",
            "agent.failureBudget=2",
            "agent.batches=\"exponential\"",
        ],
        &ours,
    )?;
    ensure!(
        custom
            == [
                "--hours=mon-fri 22:00-04:00 Europe/Berlin",
                "--hours=sat 08:00:30-10:00",
                "--failure-budget=2",
                "--batches=exponential",
            ],
        "{custom:?}"
    );
    let share = agent_flags(
        &["agent.failureBudget=\"10%\"", "agent.batches=\"1,5,10\""],
        &ours,
    )?;
    ensure!(
        share == ["--failure-budget=10%", "--batches=1,5,10"],
        "{share:?}"
    );
    Ok(())
}

#[test]
fn the_chart_renders_metrics_notifications_and_log_format_as_agent_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let probes = |port: &str| {
        [
            format!("ports:\n            - name: metrics\n              containerPort: {port}\n"),
            "livenessProbe:\n            httpGet:\n              path: /healthz\n              port: metrics\n".to_string(),
            "readinessProbe:\n            httpGet:\n              path: /readyz\n              port: metrics\n".to_string(),
            "prometheus.io/path: /metrics\n".to_string(),
            format!("prometheus.io/port: \"{port}\"\n"),
            "prometheus.io/scrape: \"true\"\n".to_string(),
        ]
    };

    // Defaults: metrics on 9746 with probes and scrape annotations, text logs, no webhooks.
    let default = rendered_daemonset(&[])?;
    let args = agent_args(&default)?;
    for arg in ["--metrics-addr=0.0.0.0:9746", "--log-format=text"] {
        ensure!(args.iter().any(|a| a == arg), "no {arg} in {args:?}");
    }
    ensure!(
        !args.iter().any(|a| a.starts_with("--notify-")),
        "notification flags by default: {args:?}"
    );
    for snippet in probes("9746") {
        ensure!(default.contains(&snippet), "no {snippet:?} in:\n{default}");
    }

    // Custom values: another port, JSON logs, webhooks, Slack URLs and templates in order,
    // and the chart's own podAnnotations beside the scrape annotations.
    let custom = rendered_daemonset(&[
        "metrics.port=9999",
        "agent.logFormat=\"json\"",
        &format!(
            "notifications={}",
            json!({
                "webhooks": ["https://hooks.example/a", "http://10.0.0.1:8080/b"],
                "slack": ["https://hooks.slack.com/services/T/B/X"],
                "templates": {
                    "reboot": "rebooting {node} \"now\"",
                    "failed": "{node} failed {process}: {cause}",
                },
            })
        ),
        "podAnnotations={\"team\":\"ops\"}",
    ])?;
    let flags = starting_with(
        &agent_args(&custom)?,
        &["--metrics-addr", "--log-format", "--notify-"],
    );
    ensure!(
        flags
            == [
                "--log-format=json",
                "--metrics-addr=0.0.0.0:9999",
                "--notify-webhook=https://hooks.example/a",
                "--notify-webhook=http://10.0.0.1:8080/b",
                "--notify-slack=https://hooks.slack.com/services/T/B/X",
                "--notify-template=failed={node} failed {process}: {cause}",
                "--notify-template=reboot=rebooting {node} \"now\"",
            ],
        "flags: {flags:?}"
    );
    for snippet in probes("9999") {
        ensure!(custom.contains(&snippet), "no {snippet:?} in:\n{custom}");
    }
    ensure!(
        custom.contains("team: ops\n"),
        "podAnnotations lost:\n{custom}"
    );

    // Blockers: none but the interval by default; every value a flag.
    let blockers = [
        "--blocking-pod-selector",
        "--prometheus-url",
        "--alert-",
        "--blocker-interval",
    ];
    let flags = starting_with(&agent_args(&default)?, &blockers);
    ensure!(
        flags == ["--blocker-interval=1m"],
        "default blocker flags: {flags:?}"
    );
    let flags = agent_flags(
        &[&format!(
            "blockers={}",
            json!({
                "podSelectors": ["app=backup", "tier in (db,cache)"],
                "prometheus": {
                    "url": "http://prometheus.monitoring:9090",
                    "alertFilterRegexp": "^(Watchdog|InfoInhibitor)$",
                    "alertFilterMatchOnly": true,
                    "alertFiringOnly": true,
                },
                "interval": "30s",
            })
        )],
        &blockers,
    )?;
    ensure!(
        flags
            == [
                "--blocking-pod-selector=app=backup",
                "--blocking-pod-selector=tier in (db,cache)",
                "--prometheus-url=http://prometheus.monitoring:9090",
                "--alert-filter-regexp=^(Watchdog|InfoInhibitor)$",
                "--alert-filter-match-only",
                "--alert-firing-only",
                "--blocker-interval=30s",
            ],
        "blocker flags: {flags:?}"
    );

    // Metrics disabled: no address, port, probes or scrape annotations.
    let disabled = rendered_daemonset(&["metrics.enabled=false"])?;
    let args = agent_args(&disabled)?;
    ensure!(
        !args.iter().any(|a| a.starts_with("--metrics-addr")),
        "{args:?}"
    );
    for absent in [
        "containerPort",
        "livenessProbe",
        "readinessProbe",
        "prometheus.io/",
        "annotations:",
    ] {
        ensure!(
            !disabled.contains(absent),
            "{absent} with metrics disabled:\n{disabled}"
        );
    }
    Ok(())
}

#[test]
fn the_chart_renders_the_kured_style_drain_values_as_agent_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = [
        "--cordon-label",
        "--uncordon-label",
        "--prefer-no-schedule-taint",
        "--annotate-nodes",
        "--drain-skip-wait-for-delete-timeout",
        "--drain-pod-selector",
        "--reboot-sentinel-command",
    ];
    let default = agent_flags(&[], &ours)?;
    ensure!(default.is_empty(), "defaults: {default:?}");
    let custom = agent_flags(
        &[
            "drain.cordonLabels={\"kured\":\"rebooting\",\"example.com/out\":\"true\"}",
            "drain.uncordonLabels={\"kured\":\"done\"}",
            "drain.preferNoScheduleTaint=\"rota.dev/pending\"",
            "drain.annotateNodes=true",
            "drain.skipWaitForDeleteTimeout=\"5m\"",
            "drain.podSelector=\"app in (web,batch)\"",
            "agent.rebootSentinelCommand=\"! needs-restarting -r\"",
        ],
        &ours,
    )?;
    ensure!(
        custom
            == [
                "--reboot-sentinel-command=! needs-restarting -r",
                "--reboot-sentinel-command-interval=5m",
                "--drain-skip-wait-for-delete-timeout=5m",
                "--drain-pod-selector=app in (web,batch)",
                "--cordon-label=example.com/out=true",
                "--cordon-label=kured=rebooting",
                "--uncordon-label=kured=done",
                "--prefer-no-schedule-taint=rota.dev/pending",
                "--annotate-nodes"
            ],
        "custom: {custom:?}"
    );
    Ok(())
}

/// `drain.waitCompletedSelector` and `drain.waitCompletedTimeout`: empty, the agent's defaults
/// (only annotated pods are wait-completed, for up to 1h); set, their flags.
#[test]
fn the_chart_renders_the_wait_completed_values_as_agent_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = ["--drain-wait-completed-"];
    let default = agent_flags(&[], &ours)?;
    ensure!(default.is_empty(), "defaults: {default:?}");
    let custom = agent_flags(
        &[
            "drain.waitCompletedSelector=\"app in (ci-runner,gpu-batch)\"",
            "drain.waitCompletedTimeout=\"3h\"",
        ],
        &ours,
    )?;
    ensure!(
        custom
            == [
                "--drain-wait-completed-selector=app in (ci-runner,gpu-batch)",
                "--drain-wait-completed-timeout=3h",
            ],
        "custom: {custom:?}"
    );
    chart::ensure_rejected(&[
        (
            "drain.waitCompletedSelector=true",
            "at '/drain/waitCompletedSelector': got boolean, want string",
        ),
        (
            "drain.waitCompletedTimeout=\"0s\"",
            "at '/drain/waitCompletedTimeout'",
        ),
        (
            "drain.waitCompletedTimeout=3600",
            "at '/drain/waitCompletedTimeout'",
        ),
    ])
}

#[test]
fn the_chart_renders_the_drain_and_reboot_delays_as_agent_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = ["--drain-delay", "--reboot-delay"];
    let default = agent_flags(&[], &ours)?;
    ensure!(
        default == ["--drain-delay=0s", "--reboot-delay=0s"],
        "defaults: {default:?}"
    );
    let custom = agent_flags(
        &["agent.drainDelay=\"90s\"", "agent.rebootDelay=\"2m\""],
        &ours,
    )?;
    ensure!(
        custom == ["--drain-delay=90s", "--reboot-delay=2m"],
        "custom: {custom:?}"
    );
    Ok(())
}

#[test]
fn the_chart_renders_the_reboot_method_as_an_agent_flag() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = ["--reboot-method"];
    let default = agent_flags(&[], &ours)?;
    ensure!(
        default == ["--reboot-method=command"],
        "defaults: {default:?}"
    );
    let signal = agent_flags(&["agent.rebootMethod=\"signal\""], &ours)?;
    ensure!(signal == ["--reboot-method=signal"], "signal: {signal:?}");
    Ok(())
}

#[test]
fn the_chart_renders_the_health_gate_values_as_agent_flags() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = ["--release-delay", "--health-pdbs"];
    let default = agent_flags(&[], &ours)?;
    ensure!(default == ["--release-delay=0s"], "defaults: {default:?}");
    let custom = agent_flags(
        &["agent.releaseDelay=\"2m\"", "agent.healthPdbs=true"],
        &ours,
    )?;
    ensure!(
        custom == ["--release-delay=2m", "--health-pdbs"],
        "custom: {custom:?}"
    );
    Ok(())
}

/// `agent.nodeConditions` (on by default) turns the node lifecycle conditions off with
/// `--node-conditions=false`, and with them the agents' right to patch their Node's status.
#[test]
fn the_chart_renders_node_conditions_as_an_agent_flag_and_their_rbac() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let status_verbs = |sets: &[&str]| -> Result<Vec<String>> {
        let role = chart::objects(sets)?
            .into_iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "rota-agent")
            .context("no ClusterRole rota-agent")?;
        let rules = role["rules"].as_array().context("a role without rules")?;
        Ok(rules
            .iter()
            .filter(|r| r["resources"] == json!(["nodes/status"]))
            .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(String::from))
            .collect())
    };
    let ours = ["--node-conditions"];
    ensure!(agent_flags(&[], &ours)?.is_empty(), "on by default");
    ensure!(status_verbs(&[])? == ["patch"], "{:?}", status_verbs(&[])?);
    let off = ["agent.nodeConditions=false"];
    let flags = agent_flags(&off, &ours)?;
    ensure!(flags == ["--node-conditions=false"], "off: {flags:?}");
    ensure!(status_verbs(&off)?.is_empty(), "{:?}", status_verbs(&off)?);
    chart::ensure_rejected(&[(
        "agent.nodeConditions=\"no\"",
        "at '/agent/nodeConditions': got string, want boolean",
    )])
}

/// The node-scoped policy lets the agents store exactly the rollout their flags give, as rota
/// writes it, and none without the chart's values.
#[test]
fn the_chart_renders_the_rollout_the_agents_may_store() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let policy = |sets: &[&str]| chart::rendered("rota", sets, Some("templates/authority.yaml"));
    let expression = |rendered: &str| {
        rendered
            .lines()
            .skip_while(|l| l.trim() != "- name: rollout")
            .nth(1)
            .map(|l| l.trim().to_string())
    };
    let none = policy(&[])?;
    ensure!(
        expression(&none).as_deref() == Some("expression: \"''\""),
        "{none}"
    );
    let both = policy(&[
        "agent.batches=\"exponential\"",
        "agent.failureBudget=\"10%\"",
    ])?;
    ensure!(
        expression(&both).as_deref()
            == Some("expression: \"'batches=exponential;failure-budget=10%'\""),
        "{both}"
    );
    let budget = policy(&["agent.failureBudget=2"])?;
    ensure!(
        expression(&budget).as_deref() == Some("expression: \"'batches=all;failure-budget=2'\""),
        "{budget}"
    );
    let rollout: rota_core::Rollout = "batches=exponential;failure-budget=10%"
        .parse()
        .context("rota reads it")?;
    ensure!(rollout.to_string() == "batches=exponential;failure-budget=10%");
    Ok(())
}

/// The slot groups: the agents' flags, and the rules the node-scoped policy lets them store,
/// exactly as rota writes the rules those flags give.
#[test]
fn the_chart_renders_the_slot_groups_as_agent_flags_and_the_rules_they_store() -> Result<()> {
    if chart::skipped() {
        return Ok(());
    }
    let ours = ["--group"];
    ensure!(agent_flags(&[], &ours)?.is_empty(), "no groups by default");
    let sets = [
        "agent.groupBy=\"topology.kubernetes.io/zone\"",
        "agent.groupLimits=[\"zone-b=2\",1,\"zone-a=3\"]",
        "agent.groupsInTurn=true",
    ];
    let flags = agent_flags(&sets, &ours)?;
    ensure!(
        flags
            == [
                "--group-by=topology.kubernetes.io/zone",
                "--group-limit=zone-b=2",
                "--group-limit=1",
                "--group-limit=zone-a=3",
                "--groups-in-turn",
            ],
        "{flags:?}"
    );
    let policy = chart::rendered("rota", &sets, Some("templates/authority.yaml"))?;
    let expression = policy
        .lines()
        .skip_while(|l| l.trim() != "- name: groups")
        .nth(1)
        .map(|l| l.trim().to_string());
    let mut rules = rota_core::GroupRules {
        in_turn: true,
        ..rota_core::GroupRules::default()
    };
    for part in ["zone-b=2", "*=1", "zone-a=3"] {
        rules.add(part).context("a rule")?;
    }
    ensure!(
        expression == Some(format!("expression: \"'{rules}'\"")),
        "{expression:?} is not rota's {rules}"
    );
    Ok(())
}

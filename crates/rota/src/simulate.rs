//! `rota simulate`: shows rota's main job on a simulated fleet and measures it.

use std::io::IsTerminal;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use rota_simulate::{EtcdSummary, KubeTarget, Options, PostgresSummary, StoreChoice, Summary};
use tokio_util::sync::CancellationToken;

use crate::cli::SimulateArgs;
use crate::output;
use crate::store::StoreLocation;

fn progress_bar(nodes: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(nodes);
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] {pos}/{len} nodes maintained, ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The summary for people.
pub fn render(summary: &Summary) -> String {
    let mut text = format!(
        "{completed} of {nodes} nodes rebooted ({failed} failed, {reboots} reboot commands) on {store}, \
         concurrency {k}\n\
         at most {max} out at once (from the store's history)\n\
         makespan {makespan:.2}s, ideal {ideal:.2}s, efficiency {efficiency:.3}\n\
         detection p50 {d50} ms, p99 {d99} ms (sentinel written → node queued)\n\
         handoff p50 {h50} ms, p99 {h99} ms (slot released → next window open)\n\
         first window open {first} ms after the sentinels; windows p50 {w50} ms, p99 {w99} ms \
         (window open → slot released)",
        completed = summary.completed,
        nodes = summary.nodes,
        failed = summary.failed,
        reboots = summary.reboots,
        store = summary.store,
        k = summary.concurrency,
        max = summary.max_concurrent,
        makespan = summary.makespan_s,
        ideal = summary.ideal_s,
        efficiency = summary.efficiency,
        d50 = summary.detection_p50_ms,
        d99 = summary.detection_p99_ms,
        h50 = summary.handoff_p50_ms,
        h99 = summary.handoff_p99_ms,
        first = summary.first_window_ms,
        w50 = summary.window_p50_ms,
        w99 = summary.window_p99_ms,
    );
    if let Some(zones) = &summary.zones {
        let each: Vec<String> = zones
            .max_concurrent
            .iter()
            .map(|(zone, max)| format!("{zone} {max}"))
            .collect();
        text.push_str(&format!(
            "\n{count} zones ({rules}): at most out at once in each zone: {each}; at most \
             {together} zones out at once",
            count = zones.count,
            rules = if zones.rules.is_empty() {
                "no limits"
            } else {
                &zones.rules
            },
            each = each.join(", "),
            together = zones.max_zones_at_once,
        ));
    }
    if let Some(traffic) = &summary.traffic {
        let phases = traffic
            .idle
            .iter()
            .map(|p| ("idle", p))
            .chain([("rollout", &traffic.rollout)]);
        for (name, phase) in phases {
            text.push_str(&format!(
                "\n{name}: {total} requests ({writes} writes) in {seconds:.1}s, \
                 {per_hour:.1} per node-hour ({writes_per_hour:.1} writes)",
                total = phase.total,
                writes = phase.writes,
                seconds = phase.seconds,
                per_hour = phase.per_node_hour,
                writes_per_hour = phase.writes_per_node_hour,
            ));
        }
        if let Some(watches) = traffic.idle_watches_per_agent {
            text.push_str(&format!("\nwatches per idle agent: {watches:.2}"));
        }
    }
    if let Some(etcd) = &summary.etcd {
        text.push_str(&render_etcd(etcd));
    }
    if let Some(postgres) = &summary.postgres {
        text.push_str(&render_postgres(postgres));
    }
    text
}

fn render_etcd(etcd: &EtcdSummary) -> String {
    let mut text = format!(
        "\netcd baseline (no agent yet): {bytes} WAL bytes in {seconds:.1}s, {rate:.0} a second",
        bytes = etcd.baseline.wal_bytes,
        seconds = etcd.baseline.seconds,
        rate = etcd.baseline.wal_bytes_per_second,
    );
    let phases = [
        (
            "idle",
            etcd.idle.as_ref(),
            etcd.idle_over_baseline_per_node_hour,
            "node-hour",
        ),
        (
            "rollout",
            Some(&etcd.rollout),
            Some(etcd.rollout_over_baseline_per_window),
            "window",
        ),
    ];
    for (name, phase, per, unit) in phases {
        if let Some(phase) = phase {
            text.push_str(&format!(
                "\netcd {name}: {bytes} WAL bytes in {seconds:.1}s, {over:.0} over the baseline \
                 ({per:.0} per {unit})",
                bytes = phase.wal_bytes,
                seconds = phase.seconds,
                over = phase.over_baseline_bytes.unwrap_or(0.0),
                per = per.unwrap_or(0.0),
            ));
        }
    }
    text
}

fn render_postgres(postgres: &PostgresSummary) -> String {
    let mut text = String::new();
    let phases = postgres
        .idle
        .iter()
        .map(|p| ("idle", p))
        .chain([("rollout", &postgres.rollout)]);
    for (name, phase) in phases {
        let statements = match (phase.statements, phase.statements_per_agent_second) {
            (Some(n), Some(rate)) => format!("{n} statements ({rate:.3} per agent per second)"),
            _ => "statements not counted".to_owned(),
        };
        text.push_str(&format!(
            "\npostgres {name}: {seconds:.1}s, agents' connections at most {peak} ({end} at the end), \
             {transactions} transactions ({rate:.3} per agent per second), {statements}",
            seconds = phase.seconds,
            peak = phase.connections_peak,
            end = phase.connections_end,
            transactions = phase.transactions,
            rate = phase.transactions_per_agent_second,
        ));
    }
    if let Some(why) = &postgres.statements_unavailable {
        text.push_str(&format!("\npostgres: statements not counted: {why}"));
    }
    text
}

pub async fn run(args: SimulateArgs) -> Result<()> {
    if let Some(namespace) = &args.namespace
        && args.store != Some(StoreLocation::Kube)
    {
        bail!("--namespace {namespace} needs --store kube");
    }
    if !args.idle.is_zero() && !args.handle_per_agent {
        bail!(
            "--idle {} needs --handle-per-agent: an idle phase is there to count what the agents' own handles send",
            humantime::format_duration(args.idle)
        );
    }
    let store = match args.store {
        None => StoreChoice::Temporary,
        Some(StoreLocation::Url(url)) => StoreChoice::Url(url),
        Some(StoreLocation::Kube) => StoreChoice::Kube(KubeTarget {
            client: crate::store::client(args.kubeconfig.as_ref()).await?,
            namespace: args.namespace,
        }),
    };
    let nodes = args.nodes as usize;
    let bar = progress_bar(u64::from(args.nodes));
    // Ctrl-C stops the run the way its end does: what it created in a cluster is deleted.
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone())?;
    let summary = rota_simulate::run(
        Options {
            nodes,
            concurrency: args.concurrency,
            maintenance_time: args.maintenance_time,
            store,
            session_ttl: None,
            handle_per_agent: args.handle_per_agent,
            idle: args.idle,
            etcd_metrics: args.etcd_metrics,
            plan: args.plan,
            batches: args.batches,
            zones: args.zones.map(|zones| rota_simulate::Zones {
                count: zones,
                rules: crate::cli::parse::group_rules(&args.group_limit, args.groups_in_turn)
                    .unwrap_or_default(),
            }),
        },
        &cancel,
        |done, _| bar.set_position(done as u64),
    )
    .await;
    bar.finish_and_clear();
    let summary = summary?;
    if args.json {
        output::emit(&format!("{}\n", serde_json::to_string(&summary)?))?;
    } else {
        output::emit(&format!("{}\n", render(&summary)))?;
    }
    Ok(())
}

//! The Grafana dashboard that the chart ships (`charts/rota/dashboards/rota.json`) asks only
//! for what the agent serves: every metric its queries name is one a real [`Metrics`] encodes,
//! every label they match on or group by is one that metric carries, and every metric the
//! agent serves has a panel. With `ROTA_TEST_PROMETHEUS_URL`, a real Prometheus also parses
//! each query.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context as _, Result, bail, ensure};
use promql_parser::label::METRIC_NAME;
use promql_parser::parser::{Expr, LabelModifier, VectorSelector};
use promql_parser::util::{ExprVisitor, walk_expr};
use rota_blockers::{Block, BlockKind};
use rota_core::{Event, NodeName, NodeState, Process};
use rota_metrics::Metrics;
use rota_notify::Counters;
use rota_observer::{AgentObserver, WorkOutcome};
use rota_store::{NodeRecord, RequestRecord, RequestState};
use serde_json::Value;

/// Labels the scrape adds to every series of a target, whatever the agent serves: the
/// dashboard joins an agent's unlabelled series to its labelled ones on it.
const TARGET_LABELS: [&str; 1] = ["instance"];

/// Grafana's variables in the dashboard's queries, as Grafana would fill them in: PromQL has
/// no `$`, so a query is only parsed once they are replaced. `$node` stands inside regular
/// expressions, where it is text.
const VARIABLES: [(&str, &str); 3] = [
    ("$__rate_interval", "1m"),
    ("$__range", "1d"),
    ("$range", "6h"),
];

/// Every series name the agent serves, with the labels its samples carry.
type Served = BTreeMap<String, BTreeSet<String>>;

/// The series of a real agent's metrics, each family made to hold at least one sample: the
/// names follow from each family's `# TYPE` line (a counter's samples end in `_total`, a
/// histogram's in `_bucket`, `_sum` and `_count`), the labels from its samples.
fn served() -> Result<Served> {
    let node = NodeName::new("node-1")?;
    let counters = Arc::new(Counters::default());
    counters.sent.fetch_add(1, Ordering::Relaxed);
    let metrics = Metrics::new(node.clone(), Some(counters));
    let queued = NodeRecord::new(node.clone(), NodeState::Queued, 1_000);
    let mut draining = NodeRecord::new(node.clone(), NodeState::Draining, 2_000);
    draining.slot = Some(0);
    metrics.record(&queued);
    metrics.transition(
        &queued,
        &draining,
        &Event::SlotAcquired {
            pre_cordoned: false,
        },
    );
    metrics.record(&draining);
    metrics.requests(&[RequestRecord {
        id: 1,
        node,
        process: Process::Reboot,
        source: "/run/reboot-needed".into(),
        created_at: 1_000,
        state: RequestState::Active,
    }]);
    metrics.blocked(Some(&Block {
        kind: BlockKind::Pod,
        reason: "pod default/backup".into(),
    }));
    metrics.work_ended(&Process::Maintenance, WorkOutcome::Failed, Some("exit 1"));
    metrics.within_hours(true);
    metrics.failure_budget(1, 3);
    let text = metrics.encode()?;

    let mut served = Served::new();
    for line in text.lines() {
        let Some(family) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = family
            .split_once(' ')
            .with_context(|| format!("a TYPE line without a type: {line}"))?;
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "gauge" => &[""],
            other => bail!("the agent serves a {other} ({name}) that this test cannot map"),
        };
        for suffix in suffixes {
            served.insert(format!("{name}{suffix}"), BTreeSet::new());
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, _value) = line
            .rsplit_once(' ')
            .with_context(|| format!("a sample without a value: {line}"))?;
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let known = served
            .get_mut(name)
            .with_context(|| format!("a sample of {name}, which no TYPE line names"))?;
        // The values the test set contain neither `,` nor `=`.
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (label, _) = pair
                .split_once('=')
                .with_context(|| format!("a label without a value in {line}"))?;
            known.insert(label.to_owned());
        }
    }
    ensure!(
        served.contains_key("rota_node_state")
            && served.contains_key("rota_slot_wait_seconds_bucket"),
        "the agent's metrics as encoded: {text}"
    );
    Ok(served)
}

fn dashboard() -> Result<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/rota/dashboards/rota.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Every panel's queries, as (panel title, expr), rows' nested panels included.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                found.push((title.to_owned(), expr.to_owned()));
            }
        }
    }
    found
}

/// `expr` with Grafana's variables filled in.
fn as_promql(expr: &str) -> String {
    VARIABLES
        .iter()
        .fold(expr.to_owned(), |expr, (variable, value)| {
            expr.replace(variable, value)
        })
}

/// What a query names: its selectors, and the labels each aggregation groups by with the
/// selectors it aggregates.
#[derive(Default)]
struct Names {
    selectors: Vec<VectorSelector>,
    groupings: Vec<(Vec<String>, Vec<VectorSelector>)>,
}

impl ExprVisitor for Names {
    type Error = std::convert::Infallible;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, Self::Error> {
        match expr {
            Expr::VectorSelector(vs) => self.selectors.push(vs.clone()),
            Expr::MatrixSelector(ms) => self.selectors.push(ms.vs.clone()),
            Expr::Aggregate(aggregate) => {
                if let Some(LabelModifier::Include(labels)) = &aggregate.modifier {
                    let mut inner = Names::default();
                    walk_expr(&mut inner, &aggregate.expr)?;
                    self.groupings
                        .push((labels.labels.clone(), inner.selectors));
                }
            }
            _ => {}
        }
        Ok(true)
    }
}

/// What is wrong with `expr` against what the agent serves: each name or label it asks for
/// that no agent series has.
fn problems(expr: &str, served: &Served) -> Vec<String> {
    let parsed = match promql_parser::parser::parse(&as_promql(expr)) {
        Ok(parsed) => parsed,
        Err(e) => return vec![format!("does not parse: {e}")],
    };
    let mut names = Names::default();
    let Ok(_) = walk_expr(&mut names, &parsed);
    let mut found = Vec::new();
    let labels_of = |vs: &VectorSelector| vs.name.as_ref().and_then(|n| served.get(n));
    for vs in &names.selectors {
        let Some(name) = &vs.name else {
            found.push("a selector without a metric name".to_owned());
            continue;
        };
        let Some(labels) = labels_of(vs) else {
            found.push(format!("{name} is not a metric the agent serves"));
            continue;
        };
        let matchers = vs.matchers.matchers.iter();
        let or_matchers = vs.matchers.or_matchers.iter().flatten();
        for matcher in matchers.chain(or_matchers) {
            if matcher.name != METRIC_NAME && !labels.contains(&matcher.name) {
                found.push(format!("{name} has no label {}", matcher.name));
            }
        }
    }
    for (grouping, selectors) in &names.groupings {
        for label in grouping {
            let present = TARGET_LABELS.contains(&label.as_str())
                || selectors
                    .iter()
                    .filter_map(labels_of)
                    .any(|labels| labels.contains(label));
            if !present {
                found.push(format!("groups by {label}, which none of its metrics has"));
            }
        }
    }
    found
}

#[test]
fn every_query_names_metrics_and_labels_the_agent_serves() -> Result<()> {
    let served = served()?;
    let queries = queries(&dashboard()?);
    ensure!(queries.len() >= 20, "only {} queries", queries.len());
    let mut wrong = Vec::new();
    for (title, expr) in &queries {
        for problem in problems(expr, &served) {
            wrong.push(format!("panel {title:?}: {problem} in {expr}"));
        }
    }
    ensure!(
        wrong.is_empty(),
        "the dashboard asks for what the agent does not serve (it serves {:?}):\n{}",
        served,
        wrong.join("\n")
    );
    Ok(())
}

#[test]
fn the_check_finds_an_unknown_metric_a_missing_label_and_a_bad_grouping() -> Result<()> {
    let served = served()?;
    ensure!(problems("sum(rota_slot_held{node=~\"$node\"})", &served).is_empty());
    let cases = [
        (
            "histogram_quantile(0.5, sum by (le) (rate(rota_drain_seconds_bucket[$range])))",
            "rota_drain_seconds_bucket is not a metric the agent serves",
        ),
        // A histogram's family name is no series of its own.
        (
            "rota_reboot_duration_seconds",
            "rota_reboot_duration_seconds is not a metric the agent serves",
        ),
        // A counter's samples end in _total.
        (
            "rate(rota_work_results[$__rate_interval])",
            "rota_work_results is not a metric the agent serves",
        ),
        (
            "rota_slot_held{reason=\"pod\"}",
            "rota_slot_held has no label reason",
        ),
        (
            "sum by (process) (rota_node_state)",
            "groups by process, which none of its metrics has",
        ),
        ("sum(rota_slot_held", "does not parse"),
    ];
    for (expr, expected) in cases {
        let found = problems(expr, &served);
        ensure!(
            found.iter().any(|p| p.contains(expected)),
            "{expr}: expected {expected:?} among {found:?}"
        );
    }
    Ok(())
}

#[test]
fn every_metric_the_agent_serves_has_a_panel() -> Result<()> {
    let served = served()?;
    let queries = queries(&dashboard()?);
    let mut asked = BTreeSet::new();
    for (_, expr) in &queries {
        let parsed = promql_parser::parser::parse(&as_promql(expr))
            .map_err(|e| anyhow::anyhow!("{expr} does not parse: {e}"))?;
        let mut names = Names::default();
        let Ok(_) = walk_expr(&mut names, &parsed);
        asked.extend(names.selectors.into_iter().filter_map(|vs| vs.name));
    }
    // A histogram is shown by its buckets, a quantile; its _sum and _count add nothing.
    let missing: Vec<&String> = served
        .keys()
        .filter(|name| !name.ends_with("_sum") && !name.ends_with("_count"))
        .filter(|name| !asked.contains(*name))
        .collect();
    ensure!(missing.is_empty(), "no panel shows {missing:?}");
    Ok(())
}

#[test]
fn the_node_variable_reads_a_label_the_agent_serves() -> Result<()> {
    let served = served()?;
    let dashboard = dashboard()?;
    let variables = dashboard["templating"]["list"]
        .as_array()
        .context("no templating list")?;
    let node = variables
        .iter()
        .find(|v| v["name"] == "node")
        .context("no node variable")?;
    let query = node["query"]["query"]
        .as_str()
        .context("the node variable has no query")?;
    let (metric, label) = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .and_then(|q| q.split_once(", "))
        .with_context(|| format!("the node variable's query {query} is no label_values"))?;
    ensure!(
        served.get(metric).is_some_and(|l| l.contains(label)),
        "{query}: the agent serves no {metric} with a label {label}"
    );
    ensure!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "no Prometheus datasource variable"
    );
    Ok(())
}

/// The test Prometheus of `scripts/prometheus-up`, unless skipping it is intended.
fn prometheus_url() -> Result<Option<String>> {
    match std::env::var("ROTA_TEST_PROMETHEUS_URL") {
        Ok(url) if !url.is_empty() => Ok(Some(url)),
        _ if std::env::var("ROTA_PROMETHEUS_SKIP").as_deref() == Ok("1") => {
            eprintln!("skipped: ROTA_PROMETHEUS_SKIP=1 and no ROTA_TEST_PROMETHEUS_URL");
            Ok(None)
        }
        _ => bail!(
            "ROTA_TEST_PROMETHEUS_URL is not set: start a server with \
             `url=$(scripts/prometheus-up | tail -n 1)` and export ROTA_TEST_PROMETHEUS_URL=$url \
             (set ROTA_PROMETHEUS_SKIP=1 to skip this test on purpose)"
        ),
    }
}

#[tokio::test]
async fn a_real_prometheus_runs_every_query() -> Result<()> {
    let Some(url) = prometheus_url()? else {
        return Ok(());
    };
    let client = reqwest::Client::new();
    let mut refused = Vec::new();
    for (title, expr) in queries(&dashboard()?) {
        // Grafana sends `$node` as a regular expression of the chosen nodes, `.*` for all.
        let promql = as_promql(&expr).replace("$node", ".*");
        let response = client
            .post(format!("{}/api/v1/query", url.trim_end_matches('/')))
            .form(&[("query", promql.as_str())])
            .send()
            .await
            .with_context(|| format!("asking {url}"))?;
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() || body["status"] != "success" {
            refused.push(format!("panel {title:?}: {promql}: {status} {body}"));
        }
    }
    ensure!(
        refused.is_empty(),
        "Prometheus refused:\n{}",
        refused.join("\n")
    );
    Ok(())
}

//! `rota mop submit` and `rota mop list`: procedures, from the operator's side.

use std::collections::BTreeMap;
use std::io::Read;

use anyhow::{Context, Result};
use rota_core::{BackoffSpec, HistoryEvent, NodeName, ProcedureSpec, Process};
use rota_store::{
    HistoryEntry, HistoryFilter, OperatorCommand, ProcedureRecord, RequestRecord, RequestState,
    StoreExt,
};
use serde::Serialize;

use crate::audit::Operator;
use crate::cli::{Format, MopCommand, MopListArgs, MopSubmitArgs};
use crate::output;

pub async fn run(command: MopCommand) -> Result<()> {
    match command {
        MopCommand::Submit(args) => submit(args).await,
        MopCommand::List(args) => list(args).await,
    }
}

fn read_script(args: &MopSubmitArgs) -> Result<String> {
    if args.script.as_os_str() == "-" {
        let mut script = String::new();
        std::io::stdin()
            .read_to_string(&mut script)
            .context("reading the script from stdin")?;
        return Ok(script);
    }
    std::fs::read_to_string(&args.script)
        .with_context(|| format!("reading the script {}", args.script.display()))
}

/// The procedure the flags describe.
fn spec(args: &MopSubmitArgs, script: String) -> ProcedureSpec {
    let mut spec = ProcedureSpec::new(args.name.clone(), script);
    spec.priority = args.priority;
    spec.nodes = args.nodes.clone();
    spec.node_selector = args.selector.iter().cloned().collect();
    spec.reboot = args.reboot;
    spec.drain = !args.no_drain;
    spec.timeout = args.timeout;
    spec.sha256 = args.sha256.clone();
    spec.exclusive = args.exclusive;
    spec.retry = args.retry;
    spec.backoff = BackoffSpec::from(args.backoff.policy());
    spec
}

async fn submit(args: MopSubmitArgs) -> Result<()> {
    let script = read_script(&args)?;
    let spec = spec(&args, script);
    spec.validate()?;
    if let Some(script) = &spec.script {
        // Caught here rather than on every node, where it would fail each one closed.
        spec.check_pin(script)?;
    }
    let operator = Operator::open(&args.store).await?;
    let (record, created) = operator.store.submit_procedure(&spec).await?;
    if created {
        let process = Process::mop(spec.name.clone())?;
        operator
            .record(
                OperatorCommand::Submit,
                None,
                Some(&process),
                args.reason.as_deref(),
            )
            .await?;
    }
    let verb = if created {
        "submitted"
    } else {
        "already submitted (unchanged)"
    };
    output::emit(&format!(
        "procedure {} {verb}: priority {}, {}{}; each matching node runs it once in its next window\n",
        record.spec.name,
        record.spec.priority,
        if record.spec.needs_drain() {
            "drain"
        } else {
            "no drain"
        },
        if record.spec.reboot {
            ", then reboot"
        } else {
            ""
        },
    ))
}

/// How far a procedure got across the fleet, from its requests.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
struct Counts {
    pending: usize,
    running: usize,
    succeeded: usize,
    failed: usize,
    canceled: usize,
}

#[derive(Debug, Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    procedure: &'a ProcedureRecord,
    nodes: Counts,
}

/// Counts a procedure's requests; an active one whose last history entry is `failed` is a
/// failed node waiting for an operator.
fn counts(
    procedure: &ProcedureRecord,
    requests: &[RequestRecord],
    history: &[HistoryEntry],
) -> Counts {
    let process = format!("mop/{}", procedure.spec.name);
    let last_failed = |node: &NodeName| {
        history
            .iter()
            .rev()
            .find(|h| &h.node == node)
            .is_some_and(|h| h.event == HistoryEvent::Failed)
    };
    let mut counts = Counts::default();
    for request in requests.iter().filter(|r| r.process.to_string() == process) {
        match request.state {
            RequestState::Pending => counts.pending += 1,
            RequestState::Active if last_failed(&request.node) => counts.failed += 1,
            RequestState::Active => counts.running += 1,
            RequestState::Done => counts.succeeded += 1,
            RequestState::Canceled => counts.canceled += 1,
        }
    }
    counts
}

async fn list(args: MopListArgs) -> Result<()> {
    let store = crate::open_store(&args.store).await?;
    let procedures = store.procedures().await?;
    let requests = store.all_requests().await?;
    let mut listed = Vec::with_capacity(procedures.len());
    for procedure in &procedures {
        let history = store
            .history(&HistoryFilter {
                process: Some(procedure.spec.process()?),
                ..HistoryFilter::default()
            })
            .await?;
        listed.push(Listed {
            procedure,
            nodes: counts(procedure, &requests, &history),
        });
    }
    match args.output {
        Format::Json => output::emit(&output::json(&listed)?),
        Format::Table => output::emit(&table(&listed)),
    }
}

fn table(listed: &[Listed]) -> String {
    let rows = listed.iter().map(|l| {
        let spec = &l.procedure.spec;
        let selector: BTreeMap<&str, &str> = spec
            .node_selector
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let nodes = match (spec.nodes.is_empty(), selector.is_empty()) {
            (true, true) => "all".to_string(),
            _ => spec
                .nodes
                .iter()
                .map(ToString::to_string)
                .chain(selector.iter().map(|(k, v)| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(","),
        };
        vec![
            spec.name.clone(),
            spec.priority.to_string(),
            nodes,
            if spec.needs_drain() { "yes" } else { "no" }.to_string(),
            if spec.reboot { "yes" } else { "no" }.to_string(),
            l.nodes.pending.to_string(),
            l.nodes.running.to_string(),
            l.nodes.succeeded.to_string(),
            l.nodes.failed.to_string(),
            l.nodes.canceled.to_string(),
        ]
    });
    output::table(
        &[
            "PROCEDURE",
            "PRIORITY",
            "NODES",
            "DRAIN",
            "REBOOT",
            "PENDING",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
            "CANCELED",
        ],
        rows,
    )
}

//! `rota agent`: one node's agent, with shell commands as its node actions.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Result, bail};
use rota_agent::{Agent, AgentConfig, Blocker, CommandActions, NodeActions, SentinelCommand};
use rota_blockers::{AlertFilter, PrometheusBlocker};
use rota_core::BackoffPolicy;
use rota_drain::{DrainOptions, KubeActions, KubeBlocker, NodeLabels};
use rota_kube::{permissions, preflight};
use rota_metrics::{Metrics, MetricsServer};
use rota_notify::{Notifier, NotifierConfig};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::{AgentArgs, NodeActionsKind, NodeLabelArg};
use crate::notify::NotifyObserver;
use crate::store::StoreLocation;

const DEFAULT_DRAIN_CONCURRENCY: usize = 5;

fn config(args: AgentArgs) -> AgentConfig {
    let mut config = AgentConfig::new(args.node.clone());
    config.node_labels = args.node_labels();
    config.state_dir = args.state_dir;
    config.exec_prefix = args
        .exec_prefix
        .split_whitespace()
        .map(String::from)
        .collect();
    config.procedure_poll = args.procedure_poll.unwrap_or(match args.store.store {
        StoreLocation::Kube => rota_kube::AGENT_PROCEDURE_POLL,
        StoreLocation::Url(_) => config.procedure_poll,
    });
    // The flag's parser already refused malformed windows; no flag is no window.
    config.windows = rota_core::MaintenanceWindows::new(args.windows).ok();
    config.failure_budget = args.failure_budget;
    config.blocker_interval = args.blocker_interval;
    config.host_root = args.host_root;
    config.reboot_sentinels = args.reboot_sentinels;
    config.reboot_sentinel_command = args.reboot_sentinel_command.map(|command| SentinelCommand {
        command,
        interval: args.reboot_sentinel_command_interval,
    });
    config.maintenance_required = args.maintenance_sentinel;
    config.maintenance_in_progress = args.maintenance_in_progress;
    config.boot_id_file = args.boot_id_file;
    config.concurrency = args.concurrency;
    config.drain_timeout = args.drain_timeout;
    config.reboot_timeout = args.reboot_timeout;
    config.verify_timeout = args.verify_timeout;
    config.health_interval = args.health_interval;
    config.release_delay = args.release_delay;
    config.session_ttl = args.session_ttl;
    config.backoff = BackoffPolicy {
        initial: args.backoff_initial,
        maximum: args.backoff_max,
        exponent: args.backoff_exponent,
    };
    config.safety_recheck = args.safety_recheck;
    config.store_poll = args.store_poll.unwrap_or(match args.store.store {
        StoreLocation::Kube => rota_kube::AGENT_STORE_POLL,
        StoreLocation::Url(_) => config.store_poll,
    });
    config
}

/// The node actions `--node-actions` asks for. An empty command means nothing to do.
async fn actions(args: &AgentArgs, labels: NodeLabels) -> Result<Arc<dyn NodeActions>> {
    let command = |c: &Option<String>| c.clone().filter(|c| !c.trim().is_empty());
    Ok(match args.node_actions {
        NodeActionsKind::Command => {
            let kube_only = [
                ("--drain-concurrency", args.drain_concurrency.is_some()),
                ("--drain-force", args.drain_force),
                (
                    "--drain-delete-emptydir-data",
                    args.drain_delete_emptydir_data,
                ),
                ("--drain-grace-period", args.drain_grace_period.is_some()),
                (
                    "--drain-skip-wait-for-delete-timeout",
                    args.drain_skip_wait_for_delete_timeout.is_some(),
                ),
                ("--health-pdbs", args.health_pdbs),
                ("--cordon-label", !args.cordon_labels.is_empty()),
                ("--uncordon-label", !args.uncordon_labels.is_empty()),
                (
                    "--prefer-no-schedule-taint",
                    args.prefer_no_schedule_taint.is_some(),
                ),
            ];
            if let Some((flag, _)) = kube_only.iter().find(|(_, given)| *given) {
                bail!(
                    "{flag} needs --node-actions kube; with --node-actions command rota does \
                     not use the Kubernetes API for the node (the --drain-command drains it)"
                );
            }
            Arc::new(CommandActions {
                node: Some(args.node.clone()),
                drain: command(&args.drain_command),
                uncordon: command(&args.uncordon_command),
                reboot: command(&Some(args.reboot_command.clone())),
                health: command(&args.health_command),
            })
        }
        NodeActionsKind::Kube => {
            if args.drain_command.is_some() || args.uncordon_command.is_some() {
                bail!(
                    "--drain-command and --uncordon-command need --node-actions command; \
                     with --node-actions kube rota cordons and drains through the API"
                );
            }
            let client = crate::store::client(args.store.kubeconfig.as_ref()).await?;
            Arc::new(
                KubeActions::new(
                    client,
                    args.node.clone(),
                    DrainOptions {
                        concurrency: args.drain_concurrency.unwrap_or(DEFAULT_DRAIN_CONCURRENCY),
                        force: args.drain_force,
                        delete_emptydir_data: args.drain_delete_emptydir_data,
                        grace_period: args.drain_grace_period,
                        skip_wait_for_delete: args.drain_skip_wait_for_delete_timeout,
                        labels,
                        ..DrainOptions::default()
                    },
                    args.reboot_command.clone(),
                    command(&args.health_command),
                )
                .health_pdbs(args.health_pdbs)
                .pending_taint(args.prefer_no_schedule_taint.clone()),
            )
        }
    })
}

/// The labels of every `flag` given, refusing a key given twice with two values: one of them
/// would be ignored.
fn label_map(flag: &str, given: &[NodeLabelArg]) -> Result<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    for (key, value) in given.iter().flat_map(|arg| &arg.0) {
        if let Some(earlier) = labels.insert(key.clone(), value.clone())
            && earlier != *value
        {
            bail!("{flag} gives the label {key} twice, as {earlier:?} and {value:?}; give it once");
        }
    }
    Ok(labels)
}

/// The blockers the flags ask for, each checked before anything starts: the agent never runs
/// with a half-understood configuration. In a cluster, the Node's pause annotation always
/// counts.
async fn blockers(args: &AgentArgs) -> Result<Vec<Arc<dyn Blocker>>> {
    let filter = AlertFilter::new(
        args.alert_filter_regexp.as_deref(),
        args.alert_filter_match_only,
        args.alert_firing_only,
    )?;
    let prometheus = match &args.prometheus_url {
        Some(url) => Some(PrometheusBlocker::new(url, filter)?),
        None => {
            let alert_flags = [
                ("--alert-filter-regexp", args.alert_filter_regexp.is_some()),
                ("--alert-filter-match-only", args.alert_filter_match_only),
                ("--alert-firing-only", args.alert_firing_only),
            ];
            if let Some((flag, _)) = alert_flags.iter().find(|(_, given)| *given) {
                bail!("{flag} needs --prometheus-url (the Prometheus whose alerts it filters)");
            }
            None
        }
    };
    let mut blockers: Vec<Arc<dyn Blocker>> = Vec::new();
    let selectors = args
        .blocking_pod_selectors
        .iter()
        .map(|s| rota_drain::parse_selector(s))
        .collect::<Result<Vec<_>, _>>()?;
    match args.node_actions {
        NodeActionsKind::Kube => {
            let client = crate::store::client(args.store.kubeconfig.as_ref()).await?;
            blockers.push(Arc::new(KubeBlocker::new(
                client,
                args.node.clone(),
                selectors,
            )));
        }
        NodeActionsKind::Command if !selectors.is_empty() => bail!(
            "--blocking-pod-selector needs --node-actions kube: pods are found through the \
             Kubernetes API"
        ),
        NodeActionsKind::Command => {}
    }
    if let Some(prometheus) = prometheus {
        blockers.push(Arc::new(prometheus));
    }
    Ok(blockers)
}

/// Stops the agent before it does anything if the cluster lacks what it needs, naming what is
/// missing: credentials the API server accepts, rota's CRDs and its namespace (see
/// `rota_kube::preflight`), then every permission its service account will need. Those come
/// first: without credentials every review fails, and a missing CRD is what to fix before
/// RBAC. Waits while the API server is unavailable, as the store does.
async fn check_cluster(args: &AgentArgs) -> Result<()> {
    let client = crate::store::client(args.store.kubeconfig.as_ref()).await?;
    let wanted = permissions::agent_permissions(
        &args.store.namespace,
        args.node_actions == NodeActionsKind::Kube,
    );
    let mut pauses = rota_store::RetryPauses::new();
    let missing = loop {
        let checked = async {
            match preflight::check(&client, &args.store.namespace).await {
                // The reviews name every permission it lacks, not only the first refused.
                Err(e) if e.is_forbidden() => {}
                checked => checked?,
            }
            permissions::missing(&client, &wanted).await
        };
        match checked.await {
            Ok(missing) => break missing,
            Err(e) if e.is_unavailable() => {
                let pause = pauses.next_pause();
                warn!(error = %e, pause = ?pause, "the API server is unavailable; checking the cluster again");
                tokio::time::sleep(pause).await;
            }
            // Each names what it checked (the missing piece, or the call that failed): one
            // line with nothing before it.
            Err(e) => return Err(e.into()),
        }
    };
    let (needed, courtesy): (Vec<_>, Vec<_>) = missing.into_iter().partition(|p| p.needed());
    if !courtesy.is_empty() {
        warn!(
            "the agent's service account lacks {}: its Node gets no Events of its transitions",
            permissions::describe(&courtesy)
        );
    }
    if !needed.is_empty() {
        bail!(
            "the agent's service account lacks {} RBAC permission(s) it needs: {}; the chart \
             (charts/rota, rbac.create=true) grants them all",
            needed.len(),
            permissions::describe(&needed)
        );
    }
    Ok(())
}

pub async fn run(args: AgentArgs) -> Result<()> {
    if !args.host_root.is_dir() {
        bail!(
            "--host-root {}: not a directory (give where the host's filesystem is mounted)",
            args.host_root.display()
        );
    }
    // Checked before anything connects anywhere.
    let labels = NodeLabels::new(
        label_map("--cordon-label", &args.cordon_labels)?,
        label_map("--uncordon-label", &args.uncordon_labels)?,
    );
    let blockers = blockers(&args).await?;
    let actions = actions(&args, labels).await?;
    // Bound before the store is opened: a taken port stops the agent before it does anything.
    let server = match args.metrics_addr {
        Some(addr) => Some(MetricsServer::bind(addr).await?),
        None => None,
    };
    let notify = crate::notify::config(&args)?;
    if args.store.store == StoreLocation::Kube {
        check_cluster(&args).await?;
    }
    let store = crate::store::open(&args.store, true).await?;
    let cancel = CancellationToken::new();
    // The agent stops between steps and keeps its state.
    crate::signals::cancel_on_signals(cancel.clone())?;
    let node = args.node.clone();
    let mut agent = Agent::new(config(args), store, actions, cancel.clone());
    for blocker in blockers {
        agent = agent.block_with(blocker);
    }
    // systemd's READY=1 waits for what /readyz waits for.
    agent = agent.observe(Arc::new(crate::systemd::Readiness::default()));
    let mut counters = None;
    let mut delivery = None;
    if let Some(notify) = notify {
        // Its own token: events queued when the agent stops still go out (see below).
        let stop = CancellationToken::new();
        let (notifier, task) = Notifier::start(notify, stop.clone())?;
        counters = Some(notifier.counters());
        agent = agent.observe(Arc::new(NotifyObserver::new(node.clone(), notifier)));
        delivery = Some((task, stop));
    }
    let mut serving = None;
    if let Some(server) = server {
        let metrics = Arc::new(Metrics::new(node, counters));
        agent = agent.observe(metrics.clone());
        info!(addr = %server.local_addr(), "serving /metrics, /healthz and /readyz");
        // Its own token: the endpoints answer until the agent has stopped.
        let stop = CancellationToken::new();
        serving = Some((tokio::spawn(server.serve(metrics, stop.clone())), stop));
    }
    let result = crate::systemd::supervise(agent.run(), &cancel).await;
    // The agent, and with it the notifier's last handle, is gone: the delivery task ends once
    // the queue is empty, or is stopped after one request timeout.
    if let Some((mut task, stop)) = delivery
        && tokio::time::timeout(NotifierConfig::TIMEOUT, &mut task)
            .await
            .is_err()
    {
        stop.cancel();
        let _ = task.await;
    }
    if let Some((task, stop)) = serving {
        stop.cancel();
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "the metrics endpoint failed"),
            Err(e) => warn!(error = %e, "the metrics endpoint panicked"),
        }
    }
    result?;
    Ok(())
}

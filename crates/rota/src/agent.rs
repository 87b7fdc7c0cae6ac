//! `rota agent`: one node's agent, with shell commands as its node actions.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use backon::Retryable as _;
use rota_actions::{CommandActions, NodeActions, Reboot};
use rota_agent::{Agent, AgentConfig, SentinelCommand, WindowMarker};
use rota_blockers::{AlertFilter, AnnotationBlocker, Blocker, PodBlocker, PrometheusBlocker};
use rota_kube_actions::{DrainOptions, KubeActions};
use rota_kube_api::permissions::{self, Permission};
use rota_kube_api::preflight;
use rota_metrics::{Metrics, MetricsServer};
use rota_notify::{Notifier, NotifierConfig, NotifyObserver};
use rota_store::{Store, StoreUrl};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::{AgentArgs, NodeActionsKind, RebootMethod};
use crate::store::{Cluster, StoreLocation};

/// The agent's bound of a whole drain: --drain-timeout, or with --node-actions kube the
/// backstop behind the drain's own two bounds (see [`crate::kube_drain::BACKSTOP`]).
fn drain_bound(args: &AgentArgs) -> Duration {
    let drain_timeout: Duration = args.timing.drain_timeout.into();
    match args.node_actions {
        NodeActionsKind::Command => drain_timeout,
        NodeActionsKind::Kube => args.kube_drain.bound(drain_timeout),
    }
}

/// The one conversion of the command line into the agent's configuration: every default
/// comes from the constants that `AgentConfig::new` uses too.
fn config(args: AgentArgs) -> AgentConfig {
    let node_labels = args.node_labels();
    let drain_timeout = drain_bound(&args);
    let AgentArgs {
        store,
        node,
        host_root,
        concurrency,
        state_dir,
        exec_prefix,
        hours,
        failure_budget,
        batches,
        group,
        group_by,
        group_limit,
        groups_in_turn,
        sentinels,
        timing,
        backoff,
        blockers,
        ..
    } = args;
    let kube = store.store == StoreLocation::Kube;
    let mut config = AgentConfig::new(node);
    config.node_labels = node_labels;
    config.state_dir = state_dir;
    config.exec_prefix = exec_prefix.split_whitespace().map(String::from).collect();
    config.procedure_poll = timing.procedure_poll.unwrap_or(if kube {
        rota_store_kube::AGENT_PROCEDURE_POLL
    } else {
        rota_agent::PROCEDURE_POLL
    });
    // The flag's parser already refused malformed hours; no flag is no maintenance hours.
    config.hours = rota_core::MaintenanceHours::new(hours).ok();
    config.failure_budget = failure_budget;
    config.batches = batches;
    config.group = group;
    config.group_by = group_by;
    config.group_rules = crate::cli::parse::group_rules(&group_limit, groups_in_turn);
    config.blocker_interval = blockers.blocker_interval.into();
    config.host_root = host_root;
    config.reboot_sentinels = sentinels.reboot_sentinels;
    config.reboot_sentinel_command =
        sentinels
            .reboot_sentinel_command
            .map(|command| SentinelCommand {
                command,
                interval: sentinels.reboot_sentinel_command_interval.into(),
            });
    config.maintenance_required = sentinels.maintenance_sentinel;
    config.maintenance_in_progress = sentinels.maintenance_in_progress;
    config.boot_id_file = sentinels.boot_id_file;
    config.concurrency = concurrency;
    config.drain_timeout = drain_timeout;
    config.reboot_timeout = timing.reboot_timeout.into();
    config.verify_timeout = timing.verify_timeout.into();
    config.health_interval = timing.health_interval.into();
    config.release_delay = timing.release_delay.into();
    config.drain_delay = timing.drain_delay.into();
    config.reboot_delay = timing.reboot_delay.into();
    config.session_ttl = timing.session_ttl.into();
    // The Kubernetes store renews an idle node's session without a request already.
    config.idle_session_ttl = (!kube).then(|| timing.idle_session_ttl.into());
    config.backoff = backoff.policy();
    config.safety_recheck = timing.safety_recheck.into();
    config.store_poll = timing.store_poll.unwrap_or(if kube {
        rota_store_kube::AGENT_STORE_POLL
    } else {
        rota_agent::STORE_POLL
    });
    config
}

/// The node actions `--node-actions` asks for. An empty command means nothing to do.
async fn actions(
    args: &AgentArgs,
    drain: DrainOptions,
    cluster: &Cluster,
) -> Result<Arc<dyn NodeActions>> {
    let command = |c: &Option<String>| c.clone().filter(|c| !c.trim().is_empty());
    let reboot = match args.commands.reboot_method {
        RebootMethod::Command => Reboot::Command(args.commands.reboot_command.clone()),
        RebootMethod::Signal => Reboot::HOST_SYSTEMD,
    };
    Ok(match args.node_actions {
        NodeActionsKind::Command => {
            if let Some(flag) = args.kube_drain.first_given() {
                bail!(
                    "{flag} needs --node-actions kube; with --node-actions command rota does \
                     not use the Kubernetes API for the node (the --drain-command drains it)"
                );
            }
            Arc::new(CommandActions {
                node: Some(args.node.clone()),
                drain: command(&args.commands.drain_command),
                uncordon: command(&args.commands.uncordon_command),
                reboot: match reboot {
                    Reboot::Command(c) if c.trim().is_empty() => None,
                    reboot => Some(reboot),
                },
                health: command(&args.commands.health_command),
            })
        }
        NodeActionsKind::Kube => {
            if args.commands.drain_command.is_some() || args.commands.uncordon_command.is_some() {
                bail!(
                    "--drain-command and --uncordon-command need --node-actions command; \
                     with --node-actions kube rota cordons and drains through the API"
                );
            }
            let client = cluster.client().await?;
            Arc::new(
                KubeActions::new(
                    client,
                    args.node.clone(),
                    drain,
                    reboot,
                    command(&args.commands.health_command),
                )
                .health_pdbs(args.kube_drain.health_pdbs)
                .pending_taint(args.kube_drain.prefer_no_schedule_taint.clone())
                .annotate_nodes(args.kube_drain.annotate_nodes)
                .node_conditions(args.kube_drain.node_conditions),
            )
        }
    })
}

/// The blockers the flags ask for, each checked before anything starts: the agent never runs
/// with a half-understood configuration. In a cluster, the Node's pause annotation always
/// counts.
async fn blockers(args: &AgentArgs, cluster: &Cluster) -> Result<Vec<Arc<dyn Blocker>>> {
    let filter = AlertFilter::new(
        args.blockers.alert_filter_regexp.as_deref(),
        args.blockers.alert_filter_match_only,
        args.blockers.alert_firing_only,
    )?;
    let prometheus = match &args.blockers.prometheus_url {
        Some(url) => Some(PrometheusBlocker::new(url, filter)?),
        None => {
            let alert_flags = [
                (
                    "--alert-filter-regexp",
                    args.blockers.alert_filter_regexp.is_some(),
                ),
                (
                    "--alert-filter-match-only",
                    args.blockers.alert_filter_match_only,
                ),
                ("--alert-firing-only", args.blockers.alert_firing_only),
            ];
            if let Some((flag, _)) = alert_flags.iter().find(|(_, given)| *given) {
                bail!("{flag} needs --prometheus-url (the Prometheus whose alerts it filters)");
            }
            None
        }
    };
    let mut blockers: Vec<Arc<dyn Blocker>> = Vec::new();
    let selectors = args
        .blockers
        .blocking_pod_selectors
        .iter()
        .map(|s| rota_blockers::parse_selector(s))
        .collect::<Result<Vec<_>, _>>()?;
    match args.node_actions {
        NodeActionsKind::Kube => {
            let client = cluster.client().await?;
            // The annotation first, then the pods: the agent lists blocks in its blockers' order,
            // and the first one's kind is the one it reports.
            blockers.push(Arc::new(AnnotationBlocker::new(
                client.clone(),
                args.node.clone(),
            )));
            if !selectors.is_empty() {
                blockers.push(Arc::new(PodBlocker::new(
                    client,
                    args.node.clone(),
                    selectors,
                )));
            }
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
/// `rota_kube_api::preflight`), then every permission its service account will need. Those come
/// first: without credentials every review fails, and a missing CRD is what to fix before
/// RBAC. Waits while the API server is unavailable, as the store does.
async fn check_cluster(args: &AgentArgs, cluster: &Cluster) -> Result<()> {
    let client = cluster.client().await?;
    let mut wanted = permissions::agent_permissions(
        &args.store.namespace,
        args.node_actions == NodeActionsKind::Kube,
    );
    if !args.kube_drain.node_conditions {
        // Only the lifecycle conditions write the Node's status.
        wanted.retain(|p| !p.is_node_status());
    }
    let check = || async {
        match preflight::check(&client, &args.store.namespace).await {
            // The reviews name every permission it lacks, not only the first refused.
            Err(e) if e.is_forbidden() => {}
            checked => checked?,
        }
        let missing = permissions::missing(&client, &wanted).await?;
        if missing.iter().any(Permission::needed) {
            preflight::ready(&client).await?;
        }
        Ok(missing)
    };
    // Each error names what it checked (the missing piece, or the call that failed): one line
    // with nothing before it.
    let missing = check
        .retry(rota_store::retry_pauses())
        .when(|e: &rota_kube_api::ApiError| e.is_unavailable())
        .notify(|e, pause| {
            warn!(error = %e, pause = ?pause, "the API server is unavailable; checking the cluster again");
        })
        .await?;
    let (needed, courtesy): (Vec<_>, Vec<_>) = missing.into_iter().partition(|p| p.needed());
    if !courtesy.is_empty() {
        let mut without: Vec<&str> = courtesy
            .iter()
            .filter_map(permissions::Permission::courtesy)
            .collect();
        without.dedup();
        warn!(
            "the agent's service account lacks {}: {}",
            permissions::describe(&courtesy),
            without.join("; ")
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

/// A `--group-by` label this node does not carry: refused on bare metal, where its
/// `--node-label`s are all the labels there are (every node would take its turns in no group,
/// and the groups' limits would hold nobody); on Kubernetes, the label to look for on the
/// Nodes ([`check_group_by`]).
fn group_label_to_look_for(args: &AgentArgs) -> Result<Option<&str>> {
    let Some(key) = &args.group_by else {
        return Ok(None);
    };
    let own = args.node_labels();
    if own.contains_key(key) {
        return Ok(None);
    }
    if args.node_actions == NodeActionsKind::Command {
        bail!(
            "--group-by {key}: node {node} carries no label {key} (its --node-label labels: \
             {labels}); give one with --node-label {key}=<group>, or the node's group with --group",
            node = args.node,
            labels = described(own.keys()),
        );
    }
    Ok(Some(key))
}

/// Refuses a `--group-by` label that no Node carries, naming it. A label this Node lacks but
/// another carries is only warned about, as a fleet may mix pools. Waits while the API server
/// is unavailable, as the cluster's check does.
async fn check_group_by(args: &AgentArgs, cluster: &Cluster) -> Result<()> {
    let Some(key) = group_label_to_look_for(args)? else {
        return Ok(());
    };
    let client = cluster.client().await?;
    let look = || async {
        let labels = rota_kube_actions::labels(&client, args.node.as_str()).await?;
        if labels.contains_key(key) {
            return Ok(None);
        }
        Ok(Some((
            labels,
            rota_kube_actions::any_carries(&client, key).await?,
        )))
    };
    let looked = look
        .retry(rota_store::retry_pauses())
        .when(|e: &rota_kube_actions::Error| e.is_unavailable())
        .notify(|e, pause| {
            warn!(error = %e, pause = ?pause, "the API server is unavailable; looking for the --group-by label again");
        })
        .await?;
    match looked {
        None => {}
        Some((labels, false)) => bail!(
            "--group-by {key}: no Node carries the label {key}; give a label the Nodes carry, \
             such as topology.kubernetes.io/zone or a node pool's label (node {node}'s labels: \
             {labels})",
            node = args.node,
            labels = described(labels.keys()),
        ),
        Some((_, true)) => warn!(
            label = %key, node = %args.node,
            "this Node carries no --group-by label: it takes its turns in no group"
        ),
    }
    Ok(())
}

fn described<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let keys: Vec<&str> = keys.map(String::as_str).collect();
    if keys.is_empty() {
        "none".to_owned()
    } else {
        keys.join(", ")
    }
}

/// How long this agent waits before its first request to the store: a random part of
/// `--start-jitter` (by default 30 s on the shared stores, nothing on SQLite, one host's own),
/// or nothing when the host records its node in its window: a node back from its own reboot,
/// cordoned and holding its slot, is not held back for the fleet's sake.
fn start_delay(args: &AgentArgs, marker: &WindowMarker) -> Option<Duration> {
    let jitter = args.timing.start_jitter.unwrap_or(match &args.store.store {
        StoreLocation::Url(StoreUrl::Sqlite(_)) => Duration::ZERO,
        _ => rota_agent::START_JITTER,
    });
    if jitter.is_zero() {
        return None;
    }
    if marker.present() {
        info!(marker = %marker.path().display(), "the node is in its maintenance window: starting at once, without --start-jitter's delay");
        return None;
    }
    Some(jitter.mul_f64(fastrand::f64()))
}

/// The agent's first contact with its store, after its start's delay: the cluster's check and
/// the store's opening, each waiting while the store is unavailable. `None`: the agent was
/// told to stop before it had its store.
async fn first_contact(
    args: &AgentArgs,
    cluster: &Cluster,
    marker: &WindowMarker,
    cancel: &CancellationToken,
) -> Result<Option<Arc<dyn Store>>> {
    let contact = async {
        if let Some(delay) = start_delay(args, marker) {
            info!(delay = ?delay, "waiting before the first request to the store (--start-jitter), so that a fleet started together spreads out");
            tokio::time::sleep(delay).await;
        }
        // A node back in its window from its own reboot passed the check before it took its
        // slot; the check would cost its return four requests and a write.
        if !marker.present() {
            if args.store.store == StoreLocation::Kube {
                check_cluster(args, cluster).await?;
            }
            check_group_by(args, cluster).await?;
        }
        crate::store::open_for_agent(&args.store, cluster).await
    };
    tokio::select! {
        () = cancel.cancelled() => Ok(None),
        store = contact => store.map(Some),
    }
}

pub async fn run(args: AgentArgs) -> Result<()> {
    if !args.host_root.is_dir() {
        bail!(
            "--host-root {}: not a directory (give where the host's filesystem is mounted)",
            args.host_root.display()
        );
    }
    // Checked before anything connects anywhere.
    group_label_to_look_for(&args)?;
    let drain = args
        .kube_drain
        .drain_options(args.timing.drain_timeout.into())?;
    let cluster = Cluster::new(args.store.kubeconfig.clone());
    let blockers = blockers(&args, &cluster).await?;
    let actions = actions(&args, drain, &cluster).await?;
    // Bound before the store is opened: a taken port stops the agent before it does anything.
    let server = match args.metrics_addr {
        Some(addr) => Some(MetricsServer::bind(addr).await?),
        None => None,
    };
    let notify = crate::notify::config(&args)?;
    let config = config(args.clone());
    let marker = WindowMarker::new(&config.host_path(&config.state_dir));
    let cancel = CancellationToken::new();
    // The agent stops between passes of its loop and keeps its state; before its first pass,
    // at once.
    crate::signals::cancel_on_signals(cancel.clone())?;
    let node = args.node.clone();
    let mut notifier = None;
    let mut delivery = None;
    if let Some(notify) = notify {
        // Its own token: events queued when the agent stops still go out (see below).
        let stop = CancellationToken::new();
        let (started, task) = Notifier::start(notify, stop.clone())?;
        notifier = Some(started);
        delivery = Some((task, stop));
    }
    let mut metrics = None;
    let mut serving = None;
    if let Some(server) = server {
        let counters = notifier.as_ref().map(Notifier::counters);
        let served = Arc::new(Metrics::new(node.clone(), counters));
        info!(addr = %server.local_addr(), "serving /metrics, /healthz and /readyz");
        // Its own token: the endpoints answer until the agent has stopped, and from before
        // its first contact with the store (a liveness probe meanwhile asks /healthz).
        let stop = CancellationToken::new();
        serving = Some((
            tokio::spawn(server.serve(served.clone(), stop.clone())),
            stop,
        ));
        metrics = Some(served);
    }
    let result = match first_contact(&args, &cluster, &marker, &cancel).await {
        Ok(Some(store)) => {
            let mut agent = Agent::new(config, store, actions, cancel.clone());
            for blocker in blockers {
                agent = agent.block_with(blocker);
            }
            // systemd's READY=1 waits for what /readyz waits for.
            agent = agent.observe(Arc::new(crate::systemd::Readiness::default()));
            if let Some(notifier) = notifier {
                agent = agent.observe(Arc::new(NotifyObserver::new(node, notifier)));
            }
            if let Some(metrics) = metrics {
                agent = agent.observe(metrics);
            }
            crate::systemd::supervise(agent.run(), &cancel)
                .await
                .map_err(anyhow::Error::from)
        }
        Ok(None) => {
            info!("stopped before the first contact with the store");
            Ok(())
        }
        Err(e) => Err(e),
    };
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
    result
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use rota_core::NodeName;

    use super::*;
    use crate::cli::{Cli, Command};

    fn agent_args(extra: &[&str]) -> AgentArgs {
        let args = [
            "rota",
            "agent",
            "--node",
            "node-a",
            "--store",
            "sqlite://x.db",
        ];
        let cli = Cli::try_parse_from(args.iter().chain(extra)).expect("valid arguments");
        match cli.command {
            Command::Agent(args) => *args,
            other => panic!("parsed as {other:?}"),
        }
    }

    /// The flags' defaults and `AgentConfig::new`'s are the same constants: an agent started
    /// without flags behaves as one built in code.
    #[test]
    fn the_command_lines_defaults_are_the_configs() {
        let node = NodeName::new("node-a").expect("name");
        let built = AgentConfig::new(node);
        let parsed = config(agent_args(&[]));
        assert_eq!(parsed.host_root, built.host_root);
        assert_eq!(parsed.reboot_sentinels, built.reboot_sentinels);
        assert_eq!(parsed.maintenance_required, built.maintenance_required);
        assert_eq!(
            parsed.maintenance_in_progress,
            built.maintenance_in_progress
        );
        assert_eq!(parsed.boot_id_file, built.boot_id_file);
        assert_eq!(parsed.drain_timeout, built.drain_timeout);
        assert_eq!(parsed.reboot_timeout, built.reboot_timeout);
        assert_eq!(parsed.verify_timeout, built.verify_timeout);
        assert_eq!(parsed.health_interval, built.health_interval);
        assert_eq!(parsed.release_delay, built.release_delay);
        assert_eq!(parsed.drain_delay, built.drain_delay);
        assert_eq!(parsed.reboot_delay, built.reboot_delay);
        assert_eq!(parsed.session_ttl, built.session_ttl);
        assert_eq!(parsed.backoff, built.backoff);
        assert_eq!(parsed.safety_recheck, built.safety_recheck);
        assert_eq!(parsed.store_poll, built.store_poll);
        assert_eq!(parsed.procedure_poll, built.procedure_poll);
        assert_eq!(parsed.idle_session_ttl, Some(rota_agent::IDLE_SESSION_TTL));
        assert_eq!(parsed.blocker_interval, built.blocker_interval);
        assert_eq!(parsed.state_dir, built.state_dir);
        assert_eq!(parsed.exec_prefix, built.exec_prefix);
    }

    /// With --node-actions kube the drain bounds its evictions by --drain-timeout and its wait
    /// for wait-completed pods by --drain-wait-completed-timeout itself; the agent's bound is the
    /// backstop a minute behind the larger, and the flags reach the drain's options.
    #[test]
    fn a_kube_drain_bounds_itself_and_the_agent_backs_it_up() {
        let kube = |extra: &[&str]| {
            let mut args = vec!["--node-actions", "kube"];
            args.extend_from_slice(extra);
            agent_args(&args)
        };
        let hour = Duration::from_secs(3600);
        assert_eq!(
            config(kube(&[])).drain_timeout,
            hour + crate::kube_drain::BACKSTOP,
            "the default wait of 1h outlasts the default drain timeout of 10m"
        );
        let long_drain = kube(&[
            "--drain-timeout",
            "2h",
            "--drain-wait-completed-timeout",
            "30m",
        ]);
        assert_eq!(
            config(long_drain).drain_timeout,
            2 * hour + crate::kube_drain::BACKSTOP
        );
        assert_eq!(
            config(agent_args(&["--drain-wait-completed-timeout", "3h"])).drain_timeout,
            rota_agent::DRAIN_TIMEOUT,
            "with shell commands (where the flag is refused at start) nothing waits"
        );
        let waiting = kube(&[
            "--drain-wait-completed-selector",
            "app=ci-runner",
            "--drain-wait-completed-timeout",
            "3h",
        ]);
        assert_eq!(waiting.kube_drain.wait_completed_timeout(), 3 * hour);
        let selector = waiting
            .kube_drain
            .drain_wait_completed_selector
            .expect("a selector");
        assert_eq!(selector.to_string(), "app=ci-runner");
    }

    /// A shared store waits up to 30 s by default, SQLite not at all, a flag's 0 never, and a
    /// host whose node is in its window never.
    #[test]
    fn the_start_is_jittered_on_shared_stores_unless_the_node_is_in_its_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = WindowMarker::new(dir.path());
        let postgres = "postgres://rota@db.example.com/rota";
        let delay = |store: &str, extra: &[&str]| {
            let args = ["rota", "agent", "--node", "node-a", "--store", store];
            let cli = Cli::try_parse_from(args.iter().chain(extra)).expect("valid arguments");
            match cli.command {
                Command::Agent(args) => start_delay(&args, &marker),
                other => panic!("parsed as {other:?}"),
            }
        };
        assert_eq!(delay("sqlite://x.db", &[]), None, "SQLite");
        for store in [postgres, "kube"] {
            let waited = delay(store, &[]).expect("a delay");
            assert!(waited < rota_agent::START_JITTER, "{waited:?}");
        }
        let up_to_a_second = delay(postgres, &["--start-jitter", "1s"]).expect("a delay");
        assert!(up_to_a_second < Duration::from_secs(1));
        assert_eq!(delay(postgres, &["--start-jitter", "0s"]), None);
        std::fs::write(marker.path(), b"").expect("the marker");
        assert_eq!(delay(postgres, &[]), None, "in its window");
    }

    /// A malformed delay is refused with the flag, the value and what is allowed.
    #[test]
    fn a_malformed_start_jitter_is_refused() {
        let args = ["rota", "agent", "--node", "a", "--start-jitter", "soon"];
        let error = Cli::try_parse_from(args).expect_err("refused");
        let message = error.to_string();
        for named in ["--start-jitter", "soon", "such as 30s"] {
            assert!(message.contains(named), "{message}");
        }
    }

    /// Each group's flags land in their field of the configuration.
    #[test]
    fn grouped_flags_reach_the_config() {
        let parsed = config(agent_args(&[
            "--drain-timeout",
            "3m",
            "--backoff-initial",
            "10s",
            "--backoff-exponent",
            "1.5",
            "--blocker-interval",
            "7s",
            "--reboot-sentinel-command",
            "true",
            "--reboot-sentinel-command-interval",
            "42s",
            "--drain-delay",
            "90s",
            "--reboot-delay",
            "2m",
        ]));
        assert_eq!(parsed.drain_delay, Duration::from_secs(90));
        assert_eq!(parsed.reboot_delay, Duration::from_secs(120));
        assert_eq!(parsed.drain_timeout, Duration::from_secs(180));
        assert_eq!(parsed.backoff.initial, Duration::from_secs(10));
        assert!((parsed.backoff.exponent - 1.5).abs() < f64::EPSILON);
        assert_eq!(parsed.blocker_interval, Duration::from_secs(7));
        let sentinel = parsed.reboot_sentinel_command.expect("a sentinel command");
        assert_eq!(sentinel.interval, Duration::from_secs(42));
    }
}

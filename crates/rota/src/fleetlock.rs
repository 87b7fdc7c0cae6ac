//! `rota fleetlock`: the FleetLock server (rota-fleetlock) on the chosen store, until SIGTERM.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rota_fleetlock::{
    CommandPlatform, Config, FileIds, Hosts, Ids, NameIds, Platform, Server, Tls,
};
use rota_store::StoreExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::FleetlockArgs;
use crate::store::StoreLocation;

mod kube;

pub async fn run(args: FleetlockArgs) -> Result<()> {
    let mut config = config(&args)?;
    let kube = matches!(args.store.store, StoreLocation::Kube);
    kube::check_flags(&args, kube)?;
    let tokens = tokens(&args.group_tokens)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Tls::load(cert, key, args.client_ca.as_deref())?),
        _ => None,
    };
    let ids: Arc<dyn Ids> = match &args.ids {
        Some(path) => Arc::new(FileIds::read(path)?),
        None => Arc::new(NameIds),
    };
    let cluster = crate::store::Cluster::new(args.store.kubeconfig.clone());
    let store = crate::store::open_for_agent(&args.store, &cluster)
        .await
        .context("opening the store")?;
    if let Some(concurrency) = args.concurrency {
        store
            .set_concurrency(concurrency)
            .await
            .with_context(|| format!("--concurrency {concurrency}"))?;
    }
    let (platform, ids): (Arc<dyn Platform>, Arc<dyn Ids>) = if kube {
        kube::hosts(&args, &cluster, &mut config).await?
    } else {
        let platform = Arc::new(CommandPlatform {
            drain: args.drain_command.clone(),
            uncordon: args.uncordon_command.clone(),
            health: args.health_command.clone(),
        });
        (platform, ids)
    };
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone())?;
    let hosts = Hosts::new(store, platform, config, cancel.clone());
    hosts
        .resume()
        .await
        .context("taking over the FleetLock windows under way")?;
    if let Some(addr) = args.metrics_addr {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on --metrics-addr {addr}"))?;
        info!(metrics = %listener.local_addr()?, "serving /metrics");
        let metrics = hosts.metrics().serve(listener, cancel.clone());
        tokio::spawn(async move {
            if let Err(e) = metrics.await {
                tracing::warn!(error = %e, "serving /metrics stopped");
            }
        });
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on --listen {}", args.listen))?;
    info!(listen = %listener.local_addr()?, "serving FleetLock");
    let server = Arc::new(Server::new(hosts, ids, tokens));
    crate::systemd::supervise(server.serve(listener, tls, cancel.clone()), &cancel)
        .await
        .context("serving FleetLock")
}

fn config(args: &FleetlockArgs) -> Result<Config> {
    for (flag, value) in [
        ("--drain-timeout", args.drain_timeout),
        ("--reboot-timeout", args.reboot_timeout),
        ("--verify-timeout", args.verify_timeout),
        ("--health-interval", args.health_interval),
        ("--client-ttl", args.client_ttl),
        ("--lock-wait", args.lock_wait),
    ] {
        if value.is_zero() {
            bail!("{flag} 0s: expected a duration above zero");
        }
    }
    Ok(Config {
        drain_timeout: args.drain_timeout,
        reboot_timeout: args.reboot_timeout,
        verify_timeout: args.verify_timeout,
        health_interval: args.health_interval,
        client_ttl: args.client_ttl,
        lock_wait: args.lock_wait,
        backoff: args.backoff.policy(),
        hours: rota_core::MaintenanceHours::new(args.hours.clone()).ok(),
    })
}

/// `--group-token GROUP=PATH`s: each group's token, read from its file.
fn tokens(flags: &[String]) -> Result<HashMap<String, String>> {
    let mut tokens = HashMap::new();
    for flag in flags {
        let Some((group, path)) = flag.split_once('=') else {
            bail!("--group-token {flag:?}: expected GROUP=PATH");
        };
        if !rota_fleetlock::protocol::valid_group(group) {
            bail!("--group-token {flag:?}: group {group:?} must match ^[a-zA-Z0-9.-]+$");
        }
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("--group-token {flag:?}: reading {path}"))?;
        let token = token.trim();
        if token.is_empty() {
            bail!("--group-token {flag:?}: {path} holds no token");
        }
        if tokens.insert(group.to_owned(), token.to_owned()).is_some() {
            bail!("--group-token {flag:?}: group {group:?} is given twice");
        }
    }
    Ok(tokens)
}

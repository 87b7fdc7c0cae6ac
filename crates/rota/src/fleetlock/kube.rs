//! `rota fleetlock --store kube`: the hosts are the Nodes labelled rota.dev/fleetlock=true, each
//! the Node whose machine id gives its client's id, cordoned, drained and verified through the
//! API as `rota agent --node-actions kube` does its own (rota-fleetlock-kube).

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rota_fleetlock::{Config, Ids, Platform};
use rota_fleetlock_kube::{HOST_SELECTOR, KubePlatform, NodeActionsConfig, NodeIds};
use rota_kube_actions::{DrainOptions, NodeLabels};
use tracing::info;

use crate::agent::{KUBE_DRAIN_BACKSTOP, label_map};
use crate::cli::FleetlockArgs;
use crate::store::Cluster;

/// Refuses, before anything connects, the flags of the other kind of store: with `kube`, the
/// bare-metal ids and commands; without, the drain through the API.
pub fn check_flags(args: &FleetlockArgs, kube: bool) -> Result<()> {
    if !kube {
        if let Some(flag) = args.kube.first_given() {
            bail!("{flag} needs --store kube: on bare metal the --drain-command drains a host");
        }
        return Ok(());
    }
    for (flag, given) in [
        ("--ids", args.ids.is_some()),
        ("--drain-command", args.drain_command.is_some()),
        ("--uncordon-command", args.uncordon_command.is_some()),
    ] {
        if given {
            bail!(
                "{flag} needs a bare-metal store (sqlite://, postgres://): with --store kube the \
                 hosts are the Nodes labelled {HOST_SELECTOR}, each known by its machine id and \
                 drained through the API"
            );
        }
    }
    Ok(())
}

/// The Kubernetes platform and the map of ids, once the server's account is known to have
/// every permission it needs and the hosts' Nodes have been listed. The window's bound of a
/// drain becomes the backstop behind the drain's own bounds, which name the pods they wait for.
pub async fn hosts(
    args: &FleetlockArgs,
    cluster: &Cluster,
    config: &mut Config,
) -> Result<(Arc<dyn Platform>, Arc<dyn Ids>)> {
    let kube = &args.kube;
    let labels = NodeLabels::new(
        label_map("--cordon-label", &kube.cordon_labels)?,
        label_map("--uncordon-label", &kube.uncordon_labels)?,
    );
    if let Some(selector) = &kube.drain_pod_selector {
        rota_blockers::parse_selector_for("--drain-pod-selector", selector)?;
    }
    let wait_completed = kube
        .drain_wait_completed_timeout
        .unwrap_or(rota_kube_actions::WAIT_COMPLETED_TIMEOUT);
    let drain = DrainOptions {
        concurrency: kube
            .drain_concurrency
            .unwrap_or(DrainOptions::default().concurrency),
        force: kube.drain_force,
        delete_emptydir_data: kube.drain_delete_emptydir_data,
        grace_period: kube.drain_grace_period,
        skip_wait_for_delete: kube.drain_skip_wait_for_delete_timeout,
        pod_selector: kube.drain_pod_selector.clone(),
        timeout: Some(args.drain_timeout),
        wait_completed_selector: kube.drain_wait_completed_selector.clone(),
        wait_completed_timeout: wait_completed,
        labels,
        ..DrainOptions::default()
    };
    config.drain_timeout = args.drain_timeout.max(wait_completed) + KUBE_DRAIN_BACKSTOP;
    let client = cluster.client().await?;
    rota_fleetlock_kube::check_permissions(&client, &args.store.namespace).await?;
    let platform = KubePlatform::new(
        client.clone(),
        NodeActionsConfig {
            drain,
            health_pdbs: kube.health_pdbs,
            annotate_nodes: kube.annotate_nodes,
            node_conditions: kube.node_conditions,
            health: args.health_command.clone(),
        },
    );
    let ids = NodeIds::follow(client);
    info!(
        selector = HOST_SELECTOR,
        "listing the FleetLock hosts' Nodes"
    );
    ids.ready()
        .await
        .context("listing the FleetLock hosts' Nodes")?;
    Ok((Arc::new(platform), Arc::new(ids)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    async fn refusal(args: &[&str]) -> String {
        let cli =
            Cli::try_parse_from(["rota", "fleetlock"].iter().chain(args)).expect("valid arguments");
        let Command::Fleetlock(args) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        let error = crate::fleetlock::run(*args)
            .await
            .expect_err("refused before it connects");
        format!("{error:#}")
    }

    #[tokio::test]
    async fn each_store_refuses_the_flags_of_the_other() {
        for (args, expected) in [
            (
                &["--store", "sqlite:///nonexistent/rota.db", "--drain-force"][..],
                "--drain-force needs --store kube",
            ),
            (
                &[
                    "--store",
                    "sqlite:///nonexistent/rota.db",
                    "--node-conditions=false",
                ],
                "--node-conditions needs --store kube",
            ),
            (
                &["--store", "kube", "--ids", "/nonexistent/ids"],
                "--ids needs a bare-metal store",
            ),
            (
                &["--store", "kube", "--drain-command", "true"],
                "--drain-command needs a bare-metal store",
            ),
        ] {
            let error = refusal(args).await;
            assert!(error.contains(expected), "{args:?}: {error}");
        }
    }
}

//! `rota fleetlock --store kube`: the hosts are the Nodes labelled rota.dev/fleetlock=true, each
//! the Node whose machine id gives its client's id, cordoned, drained and verified through the
//! API as `rota agent --node-actions kube` does its own (rota-fleetlock-kube).

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rota_fleetlock::{Config, Ids, Platform};
use rota_fleetlock_kube::{HOST_SELECTOR, KubePlatform, NodeActionsConfig, NodeIds};
use tracing::info;

use crate::cli::FleetlockArgs;
use crate::store::Cluster;

/// Refuses, before anything connects, the flags of the other kind of store: with `kube`, the
/// bare-metal ids and commands; without, the drain through the API.
pub fn check_flags(args: &FleetlockArgs, kube: bool) -> Result<()> {
    if !kube {
        let conditions = (!args.kube.node_conditions).then_some("--node-conditions");
        if let Some(flag) = args.kube.first_given().or(conditions) {
            bail!("{flag} needs --store kube: on bare metal the --drain-command drains a host");
        }
        return Ok(());
    }
    if args.kube.prefer_no_schedule_taint.is_some() {
        bail!(
            "--prefer-no-schedule-taint: a FleetLock host's Node is not marked while it waits; \
             the flag is rota agent's"
        );
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
    let drain = args.kube.drain_options(args.drain_timeout)?;
    config.drain_timeout = args.kube.bound(args.drain_timeout);
    let client = cluster.client().await?;
    rota_fleetlock_kube::check_permissions(&client, &args.store.namespace).await?;
    let platform = KubePlatform::new(
        client.clone(),
        NodeActionsConfig {
            drain,
            health_pdbs: args.kube.health_pdbs,
            annotate_nodes: args.kube.annotate_nodes,
            node_conditions: args.kube.node_conditions,
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
            (
                &[
                    "--store",
                    "kube",
                    "--prefer-no-schedule-taint",
                    "rota.dev/pending",
                ],
                "--prefer-no-schedule-taint: a FleetLock host's Node is not marked",
            ),
        ] {
            let error = refusal(args).await;
            assert!(error.contains(expected), "{args:?}: {error}");
        }
    }
}

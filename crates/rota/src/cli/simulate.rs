//! `rota simulate`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse::{concurrency, duration, group_limit};
use crate::store::StoreLocation;

#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// How many nodes (each with its own real agent).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub nodes: u32,
    /// How many may be out at once.
    #[arg(long, value_name = "K", value_parser = concurrency)]
    pub concurrency: u32,
    /// How long a simulated reboot keeps a node down.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1s")]
    pub maintenance_time: Duration,
    /// The store to run against (default: SQLite in a temporary directory): sqlite://…,
    /// postgres://…, or kube (kwok nodes in a cluster, with real cordon, drain and uncordon).
    #[arg(long, value_name = "URL")]
    pub store: Option<StoreLocation>,
    /// With --store kube: the kubeconfig (default: in-cluster config, KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// With --store kube: the namespace to create for the run, deleted at the end; it must not
    /// exist (default: rota-simulate-<random>).
    #[arg(long, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Give every agent a store handle of its own, opened at each start, as on a real fleet
    /// (each agent its own process), instead of one shared handle. With --store kube, the
    /// requests the agents send are counted by verb and resource, and reported; on PostgreSQL,
    /// the server's own counts of their connections, transactions and statements.
    #[arg(long)]
    pub handle_per_agent: bool,
    /// With --handle-per-agent: how long every agent stays idle, once all have started, before
    /// the rollout; what they send meanwhile is reported on its own.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "0s")]
    pub idle: Duration,
    /// With --store kube --handle-per-agent: etcd's client or metrics URL (http(s)://HOST:PORT,
    /// its /metrics is read); what etcd wrote in each phase is reported, with a baseline counted
    /// before the agents start.
    #[arg(long, value_name = "URL")]
    pub etcd_metrics: Option<String>,
    /// Print one JSON object with the rollout's numbers instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Make `rota plan`'s forecast once every node asked for its turn, and report how the
    /// rollout kept to it: the order the windows opened in, and each window's end against its
    /// forecast. Its times come from the steps recorded before: run once on the same store
    /// (`--store sqlite://…`) to record them.
    #[arg(long)]
    pub plan: bool,
    /// The rollout's batches, as `rota agent --batches` takes them (default: all at once).
    #[arg(long, value_name = "BATCHES", value_parser = super::parse::batches)]
    pub batches: Option<rota_core::Batches>,
    /// Spread the nodes over Z zones, `zone-0` to `zone-<Z-1>` in turn, each node's zone the
    /// value of its `topology.kubernetes.io/zone` label, which its agent takes as its slot
    /// group (`rota agent --group-by`). The summary then shows each zone's most nodes out at
    /// once, from the store's history.
    #[arg(long, value_name = "Z", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub zones: Option<u32>,
    /// A limit of the zones (repeatable), as `rota agent --group-limit` takes it: `N` for every
    /// zone, `NAME=N` for one (needs --zones).
    #[arg(long, value_name = "[NAME=]N", value_parser = group_limit, requires = "zones")]
    pub group_limit: Vec<String>,
    /// One zone at a time, as `rota agent --groups-in-turn` (needs --zones).
    #[arg(long, requires = "zones")]
    pub groups_in_turn: bool,
}

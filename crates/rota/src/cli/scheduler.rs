//! `rota scheduler`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse::duration;

#[derive(Debug, Clone, Args)]
pub struct SchedulerArgs {
    /// The kubeconfig (default: in-cluster config, KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// rota's namespace: the slot Leases, the ConfigMap rota-config and the leader Lease
    /// rota-scheduler.
    #[arg(
        long,
        value_name = "NAME",
        env = "ROTA_NAMESPACE",
        default_value = "rota-system"
    )]
    pub namespace: String,
    /// This scheduler's name among the candidates for the lead (default: the host name, which
    /// is the Pod's name in a cluster).
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a leader that stopped renewing keeps the lead: a standby grants within it
    /// after the leader dies.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "15s")]
    pub lease_duration: Duration,
    /// How long a node's agent has to take its grant up before the slot is withdrawn and
    /// goes to the next node.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "60s")]
    pub take_up: Duration,
}

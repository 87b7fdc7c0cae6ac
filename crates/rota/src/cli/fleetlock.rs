//! `rota fleetlock`'s arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rota_core::Hours;
use rota_kube_actions::Selector;

use super::parse::{
    NodeLabelArg, duration, hours, node_labels, positive_duration, wait_completed_selector,
};
use super::{BackoffArgs, StoreArgs};

#[derive(Debug, Clone, Args)]
pub struct FleetlockArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The address the FleetLock endpoints listen on: Zincati's `fleet_lock.base_url` is
    /// `http://<this address>/`.
    #[arg(
        long,
        value_name = "ADDR",
        env = "ROTA_FLEETLOCK_LISTEN",
        default_value = "127.0.0.1:8470"
    )]
    pub listen: SocketAddr,
    /// The hosts' ids: a file of lines `<node> <id> [<address>]` (a host shows its Zincati id
    /// with `systemd-id128 machine-id --app-specific=de35106b6ec24688b63afddaa156679b`; with
    /// an address, only requests from it may use the id). Without it, the id is the node's
    /// name.
    #[arg(long, value_name = "PATH", env = "ROTA_FLEETLOCK_IDS")]
    pub ids: Option<PathBuf>,
    /// A group's token, GROUP=PATH (the file holds the token): requests of the group must
    /// carry `Authorization: Bearer <token>`. Once any is given, groups without one are
    /// refused. Repeat for each group.
    #[arg(long = "group-token", value_name = "GROUP=PATH")]
    pub group_tokens: Vec<String>,
    /// Serve over TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate signed by this CA (PEM), valid for the host's node name:
    /// a host may then lock and unlock only for its own node. Needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Sets the fleet's number of slots (as `rota agent --concurrency` does) when given.
    #[arg(long, value_name = "N", env = "ROTA_CONCURRENCY")]
    pub concurrency: Option<u32>,
    /// Run with `sh -c` to drain a host (`ROTA_NODE` names it) once it holds a slot.
    #[arg(long, value_name = "COMMAND", env = "ROTA_FLEETLOCK_DRAIN_COMMAND")]
    pub drain_command: Option<String>,
    /// Run to return a host to service at the end of its window.
    #[arg(long, value_name = "COMMAND", env = "ROTA_FLEETLOCK_UNCORDON_COMMAND")]
    pub uncordon_command: Option<String>,
    /// Must succeed after a host's reboot for its window to end healthy.
    #[arg(long, value_name = "COMMAND", env = "ROTA_FLEETLOCK_HEALTH_COMMAND")]
    pub health_command: Option<String>,
    /// Serve /metrics (Prometheus) on this address, such as 0.0.0.0:9747: the hosts' nodes
    /// under the agents' metric names, and the answers by kind (default: off).
    #[arg(long, value_name = "IP:PORT", env = "ROTA_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// A drain that takes longer fails (the node is uncordoned and backs off).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10m")]
    pub drain_timeout: Duration,
    /// A host not back this long after its lock was granted fails closed.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "15m")]
    pub reboot_timeout: Duration,
    /// How long a host may stay unhealthy after its reboot before it fails closed.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10m")]
    pub verify_timeout: Duration,
    /// How often a host's health and boot id are checked.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "5s")]
    pub health_interval: Duration,
    /// How long a waiting host keeps its place in the queue without asking again (Zincati
    /// asks every 5 to 5.5 minutes).
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "15m")]
    pub client_ttl: Duration,
    /// How long a drained host has to ask again and take its lock before its window ends.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "15m")]
    pub lock_wait: Duration,
    /// Maintenance hours, as `rota agent --hours`: hosts take slots and reboot only within them.
    #[arg(long = "hours", value_name = "HOURS", value_parser = hours)]
    pub hours: Vec<Hours>,
    #[command(flatten)]
    pub backoff: BackoffArgs,
    #[command(flatten)]
    pub kube: FleetlockKubeArgs,
}

/// How the server cordons, drains and verifies a host's Node through the Kubernetes API: each
/// flag as `rota agent`'s of the same name with `--node-actions kube`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes drain (--store kube)")]
pub struct FleetlockKubeArgs {
    /// Evictions in progress at once (default 5).
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
    pub drain_concurrency: Option<usize>,
    /// Also evict pods no controller manages (nothing recreates them).
    #[arg(long)]
    pub drain_force: bool,
    /// Also evict pods with emptyDir volumes (their data is lost).
    #[arg(long)]
    pub drain_delete_emptydir_data: bool,
    /// Override the pods' termination grace period.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub drain_grace_period: Option<Duration>,
    /// A pod still terminating this long after its grace period ended is not waited for
    /// (default: wait for every pod).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub drain_skip_wait_for_delete_timeout: Option<Duration>,
    /// Only the host's pods matching this label selector are evicted and waited for (default:
    /// every pod).
    #[arg(long, value_name = "SELECTOR")]
    pub drain_pod_selector: Option<String>,
    /// The host's pods matching this label selector are wait-completed: not evicted; the drain
    /// waits until they have completed (default: none but those annotated
    /// rota.dev/drain=wait-completed).
    #[arg(long, value_name = "SELECTOR", value_parser = wait_completed_selector)]
    pub drain_wait_completed_selector: Option<Selector>,
    /// How long the drain waits for its wait-completed pods to complete (default 1h).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub drain_wait_completed_timeout: Option<Duration>,
    /// A label set on the Node in rota's cordon, such as rota.dev/maintenance=true
    /// (repeatable, or several separated by commas).
    #[arg(long = "cordon-label", value_name = "KEY=VALUE", value_parser = node_labels)]
    pub cordon_labels: Vec<NodeLabelArg>,
    /// A label set on the Node in rota's uncordon (repeatable, or several separated by commas).
    #[arg(long = "uncordon-label", value_name = "KEY=VALUE", value_parser = node_labels)]
    pub uncordon_labels: Vec<NodeLabelArg>,
    /// rota's annotations of the reboot on the Node: rota.dev/reboot-in-progress,
    /// rota.dev/last-reboot-started and rota.dev/last-reboot-finished.
    #[arg(long)]
    pub annotate_nodes: bool,
    /// The node lifecycle conditions of KEP-5683 on the Node through its window (on by
    /// default; --node-conditions=false turns them off).
    #[arg(
        long,
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub node_conditions: bool,
    /// Also wait, before the slot goes back, until every PodDisruptionBudget in the cluster is
    /// satisfied again.
    #[arg(long)]
    pub health_pdbs: bool,
}

impl FleetlockKubeArgs {
    /// The first of these flags given, if any: each needs --store kube.
    pub fn first_given(&self) -> Option<&'static str> {
        [
            ("--drain-concurrency", self.drain_concurrency.is_some()),
            ("--drain-force", self.drain_force),
            (
                "--drain-delete-emptydir-data",
                self.drain_delete_emptydir_data,
            ),
            ("--drain-grace-period", self.drain_grace_period.is_some()),
            (
                "--drain-skip-wait-for-delete-timeout",
                self.drain_skip_wait_for_delete_timeout.is_some(),
            ),
            ("--drain-pod-selector", self.drain_pod_selector.is_some()),
            (
                "--drain-wait-completed-selector",
                self.drain_wait_completed_selector.is_some(),
            ),
            (
                "--drain-wait-completed-timeout",
                self.drain_wait_completed_timeout.is_some(),
            ),
            ("--cordon-label", !self.cordon_labels.is_empty()),
            ("--uncordon-label", !self.uncordon_labels.is_empty()),
            ("--annotate-nodes", self.annotate_nodes),
            ("--node-conditions", !self.node_conditions),
            ("--health-pdbs", self.health_pdbs),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}

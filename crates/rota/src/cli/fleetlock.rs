//! `rota fleetlock`'s arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rota_core::Hours;

use super::parse::{duration, hours};
use super::{BackoffArgs, KubeDrainArgs, StoreArgs};

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
    /// As `rota agent`'s with `--node-actions kube`; without --prefer-no-schedule-taint.
    #[command(flatten, next_help_heading = "Kubernetes drain (--store kube)")]
    pub kube: KubeDrainArgs,
}

//! `rota bench`'s arguments.

use std::time::Duration;

use clap::{Args, ValueEnum};
use rota_store::StoreUrl;

use super::parse::{concurrency, positive_duration};

/// What `rota bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Slot acquire+release cycles, then history appends.
    All,
    /// Slot cycles: request, queue, wait for a slot, open the window, finish it.
    Slots,
    /// History appends: windows that fail closed and are retried.
    History,
    /// A `rota fleetlock` server, in this process, asked `pre-reboot` by --hosts simulated
    /// Fedora CoreOS hosts (Zincati's requests) at --rate a second, on schedule whether or not
    /// earlier requests were answered. Not part of `all`.
    Fleetlock,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The store to measure; it must hold no fleet's nodes (e.g. a new database). Default: a
    /// new SQLite file in a temporary directory, removed at the end.
    #[arg(long, value_name = "URL")]
    pub store: Option<StoreUrl>,
    /// Concurrent sessions (one node each).
    #[arg(long, value_name = "N", default_value = "32",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub sessions: usize,
    /// How long each workload runs.
    #[arg(long, value_name = "S", default_value = "10",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub seconds: u64,
    /// Which workload to run.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: Workload,
    /// Slots the sessions of the slot workload compete for; the fleetlock workload's
    /// concurrency.
    #[arg(long, value_name = "K", value_parser = concurrency, default_value = "4")]
    pub concurrency: u32,
    /// Store handles the sessions are spread over (as agents in separate processes would be).
    #[arg(long, value_name = "N", default_value = "1",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub handles: usize,
    /// The fleetlock workload's hosts, whose ids are their nodes' names (`host-00001`, …):
    /// each asks every hosts/rate seconds.
    #[arg(long, value_name = "N", default_value = "10000",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub hosts: usize,
    /// The fleetlock workload's `pre-reboot` requests a second, all hosts together.
    #[arg(long, value_name = "N", default_value = "500",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: u32,
    /// The fleetlock workload: a host answered 200 reboots for this long, then calls
    /// `steady-state` as Zincati does at its start, and asks no more (its window ends and its
    /// slot goes to the next host). Without it, a granted host keeps asking and is granted
    /// again (the lock is recursive), and the slots stay held.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub reboot_time: Option<Duration>,
    /// The fleetlock workload: before the measured load, every host asks once, 16 at a time
    /// (its first request queues its node: two writes), and only the hosts' later requests are
    /// measured: a fleet that waits and retries. Without it, the measured load starts with every
    /// host's first request.
    #[arg(long)]
    pub warm_up: bool,
    /// The fleetlock workload: a request not answered within this is an error (a timeout).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "10s")]
    pub request_timeout: Duration,
}

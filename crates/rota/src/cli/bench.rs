//! `rota bench`'s arguments.

use clap::{Args, ValueEnum};
use rota_store::StoreUrl;

use super::parse::concurrency;

/// What `rota bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Slot acquire+release cycles, then history appends.
    All,
    /// Slot cycles: request, queue, wait for a slot, open the window, finish it.
    Slots,
    /// History appends: windows that fail closed and are retried.
    History,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The store to measure; it must hold no fleet's nodes (e.g. a new database).
    #[arg(long, value_name = "URL")]
    pub store: StoreUrl,
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
    /// Slots the sessions of the slot workload compete for.
    #[arg(long, value_name = "K", value_parser = concurrency, default_value = "4")]
    pub concurrency: u32,
    /// Store handles the sessions are spread over (as agents in separate processes would be).
    #[arg(long, value_name = "N", default_value = "1",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub handles: usize,
}

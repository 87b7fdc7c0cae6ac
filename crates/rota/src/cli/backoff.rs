//! The backoff flags, shared by `rota agent` and `rota mop submit`.

use clap::Args;
use humantime::Duration as HumanDuration;
use rota_core::BackoffPolicy;

use super::parse::{exponent, span};

/// The backoff after failures, for the agent's own processes and for a procedure.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Backoff")]
pub struct BackoffArgs {
    /// Backoff after the first failure of a process on a node.
    ///
    /// Each later failure backs off min(--backoff-max, previous × --backoff-exponent), rounded up
    /// to whole seconds; only a success clears it.
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(BackoffPolicy::DEFAULT.initial))]
    pub backoff_initial: HumanDuration,
    /// The longest backoff.
    #[arg(long, value_name = "DURATION", value_parser = span,
          default_value_t = HumanDuration::from(BackoffPolicy::DEFAULT.maximum))]
    pub backoff_max: HumanDuration,
    /// Each further failure multiplies the backoff by this.
    #[arg(long, value_name = "X", value_parser = exponent, default_value_t = BackoffPolicy::DEFAULT.exponent)]
    pub backoff_exponent: f64,
}

impl BackoffArgs {
    pub fn policy(&self) -> BackoffPolicy {
        BackoffPolicy {
            initial: self.backoff_initial.into(),
            maximum: self.backoff_max.into(),
            exponent: self.backoff_exponent,
        }
    }
}

//! How long to wait before asking an unavailable store (a database that restarts, an API server
//! that is down or overloaded) again.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The first pause, before any randomness is added.
pub const FIRST_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Where the pause stops doubling, before any randomness is added.
pub const LONGEST_RETRY_PAUSE: Duration = Duration::from_secs(8);

/// The pauses between attempts at a store that stays unavailable: 1 s, then twice as long after
/// each failed attempt up to 8 s, each lengthened by a random part of up to itself, so 1–2 s,
/// 2–4 s, 4–8 s and then 8–16 s. A fleet that lost its store at once then neither asks again at
/// once nor keeps asking every second: an overloaded API server or database gets fewer requests
/// the longer it struggles, not the same number again. Each retrying caller keeps its own and
/// resets it after a success.
#[derive(Debug)]
pub struct RetryPauses {
    pauses: ExponentialBackoff,
}

/// The same pauses for [`backon::Retryable`]: an attempt that fails while the store (or API
/// server) is unavailable is made again after them, for as long as it takes.
pub fn retry_pauses() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(FIRST_RETRY_PAUSE)
        .with_max_delay(LONGEST_RETRY_PAUSE)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

fn pauses() -> ExponentialBackoff {
    retry_pauses().build()
}

impl RetryPauses {
    pub fn new() -> RetryPauses {
        RetryPauses { pauses: pauses() }
    }

    /// The pause before the next attempt; each one after a failure grows until the longest.
    pub fn next_pause(&mut self) -> Duration {
        self.pauses
            .next()
            .unwrap_or(LONGEST_RETRY_PAUSE.saturating_mul(2))
    }

    /// The store answered: the next failure starts over at the first pause.
    pub fn reset(&mut self) {
        self.pauses = pauses();
    }
}

impl Default for RetryPauses {
    fn default() -> RetryPauses {
        RetryPauses::new()
    }
}

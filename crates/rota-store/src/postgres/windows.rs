//! A window change's writes beyond the node's row: the parameters of `rota_write_window`.

use std::time::Duration;

use rota_core::HistoryEvent;

use crate::model::{RequestState, WindowChange};

/// What one window change does to the node's requests, history, backoff and slot: the
/// parameters of `rota_write_window` in the migrations.
pub(super) struct WindowWrite {
    /// Requests in this state are the ones the change is about.
    pub(super) from: RequestState,
    /// Where they move, or `None` when they stay (a failure that keeps its slot).
    pub(super) to: Option<RequestState>,
    pub(super) event: HistoryEvent,
    pub(super) cause: Option<String>,
    /// Whether an entry is written for the node's process when no request was involved.
    pub(super) fallback: bool,
    pub(super) clears_backoff: bool,
    pub(super) releases: bool,
    /// The normalised backoff policy of a failure: initial and maximum seconds, exponent.
    pub(super) backoff: Option<(i64, i64, f64)>,
}

/// The node's `last_result` after a window change, if it sets one.
pub(super) fn window_result(window: &WindowChange) -> Option<String> {
    match window {
        WindowChange::Finish => Some("finished".to_string()),
        WindowChange::Fail { cause, .. } => Some(format!("failed: {cause}")),
        WindowChange::Cancel { reason } => Some(format!("canceled: {reason}")),
        WindowChange::Postpone { reason } => Some(format!("postponed: {reason}")),
        _ => None,
    }
}

pub(super) fn whole_seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// The writes of a window change, or `None` when it writes nothing beyond the node's row.
pub(super) fn window_write(window: &WindowChange) -> Option<WindowWrite> {
    Some(match window {
        // The node's own row (and its place in the queue) is written with the transition.
        WindowChange::None | WindowChange::Queue { .. } => return None,
        WindowChange::Open | WindowChange::Join => WindowWrite {
            from: RequestState::Pending,
            to: Some(RequestState::Active),
            event: HistoryEvent::Started,
            cause: None,
            fallback: false,
            clears_backoff: false,
            releases: false,
            backoff: None,
        },
        WindowChange::Finish => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Done),
            event: HistoryEvent::Finished,
            cause: None,
            fallback: true,
            clears_backoff: true,
            releases: true,
            backoff: None,
        },
        WindowChange::Fail {
            cause,
            keep_slot,
            policy,
        } => {
            // rota_backoff_next computes BackoffPolicy::next of the normalised policy.
            let policy = policy.normalized();
            WindowWrite {
                from: RequestState::Active,
                to: (!keep_slot).then_some(RequestState::Pending),
                event: HistoryEvent::Failed,
                cause: Some(cause.clone()),
                fallback: true,
                clears_backoff: false,
                releases: !keep_slot,
                backoff: Some((
                    whole_seconds(policy.initial),
                    whole_seconds(policy.maximum),
                    policy.exponent,
                )),
            }
        }
        WindowChange::Cancel { reason } => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Canceled),
            event: HistoryEvent::Canceled,
            cause: Some(reason.clone()),
            fallback: true,
            clears_backoff: false,
            releases: true,
            backoff: None,
        },
        WindowChange::Postpone { reason } => WindowWrite {
            from: RequestState::Active,
            to: Some(RequestState::Pending),
            event: HistoryEvent::Postponed,
            cause: Some(reason.clone()),
            fallback: true,
            clears_backoff: false,
            releases: true,
            backoff: None,
        },
    })
}

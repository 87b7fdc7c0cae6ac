//! `rota simulate --plan`: the forecast of `rota plan`, made once every node asked for its
//! turn, held against the rollout that then happens: the order the windows opened in, and how
//! far each window's end was from its forecast.

use std::collections::BTreeMap;

use rota_core::{HistoryEvent, NodeName, NodeState};
use rota_store::forecast::{Forecast, forecast};
use rota_store::{HistoryEntry, Millis, Store, StoreExt, now_millis};
use serde::Serialize;

use crate::Result;

/// How the rollout kept to its forecast.
#[derive(Clone, Debug, Serialize)]
pub struct PlanCheck {
    /// Windows in the forecast (those open when it was made included).
    pub windows: usize,
    /// Whether the windows not yet open opened in the forecast's order: none before a window
    /// forecast to open earlier (windows forecast to open together may open in any order among
    /// themselves, as their agents get there).
    pub order_kept: bool,
    /// The forecast's typical window, from the steps recorded before.
    pub window_p50_ms: Millis,
    /// From the forecast to its last window's end, as forecast and as it happened.
    pub forecast_span_ms: Millis,
    pub actual_span_ms: Millis,
    /// |forecast − actual| of each window's end.
    pub finish_error_p50_ms: Millis,
    pub finish_error_max_ms: Millis,
}

/// The forecast, once every one of the store's nodes asked for its turn since `started` (it
/// is queued or in its window, or already back): `None` until then.
pub(crate) async fn when_all_asked(
    store: &dyn Store,
    started: Millis,
) -> Result<Option<(Millis, Forecast)>> {
    let nodes = store.nodes().await?;
    let asked = nodes
        .iter()
        .all(|n| n.state != NodeState::Idle || n.since >= started);
    if !asked {
        return Ok(None);
    }
    let now = now_millis();
    Ok(Some((now, forecast(store, now).await?)))
}

/// Holds `forecast`, made at `made`, against the history of the rollout that began at
/// `started`.
pub(crate) fn check(
    started: Millis,
    made: Millis,
    forecast: &Forecast,
    history: &[HistoryEntry],
) -> PlanCheck {
    // Each node's window in this rollout: when it opened and when it ended.
    let mut actual: BTreeMap<&NodeName, (Option<Millis>, Option<Millis>)> = BTreeMap::new();
    for entry in history.iter().filter(|e| e.at >= started) {
        let times = actual.entry(&entry.node).or_default();
        match entry.event {
            HistoryEvent::Started => {
                times.0.get_or_insert(entry.at);
            }
            HistoryEvent::Finished | HistoryEvent::Failed => times.1 = Some(entry.at),
            _ => {}
        }
    }
    let windows = &forecast.plan.windows;
    let waiting: Vec<_> = windows.iter().filter(|w| !w.open).collect();
    let mut opened: Vec<(Millis, Millis)> = waiting
        .iter()
        .map(|w| {
            let at = actual.get(&w.node).and_then(|t| t.0).unwrap_or(Millis::MAX);
            (at, w.start)
        })
        .collect();
    opened.sort_unstable();
    let order_kept = opened.windows(2).all(|pair| pair[0].1 <= pair[1].1);
    let mut errors: Vec<Millis> = windows
        .iter()
        .map(|w| {
            let ended = actual.get(&w.node).and_then(|t| t.1).unwrap_or(Millis::MAX);
            ended.saturating_sub(w.finish).saturating_abs()
        })
        .collect();
    errors.sort_unstable();
    let actual_end = windows
        .iter()
        .filter_map(|w| actual.get(&w.node).and_then(|t| t.1))
        .max()
        .unwrap_or(made);
    PlanCheck {
        windows: windows.len(),
        order_kept,
        window_p50_ms: forecast.durations.window(),
        forecast_span_ms: forecast.plan.finish().unwrap_or(made) - made,
        actual_span_ms: actual_end - made,
        finish_error_p50_ms: crate::metrics::percentile(&errors, 50),
        finish_error_max_ms: errors.last().copied().unwrap_or(0),
    }
}

//! `rota plan`: the turns to come, forecast from the store without writing anything
//! (`rota_store::forecast`): the order the waiting nodes take their windows in, by rota-core's
//! own rule (`rota_core::plan`, which plays `schedule` forward), each window as long as the
//! fleet's typical one (the p50 of every recorded drain, maintenance, reboot and verification),
//! and the nodes held back now.

use anyhow::{Result, bail};
use rota_core::plan::{Plan, Rules, StepDurations};
use rota_core::{NodeName, NodeState};
use rota_store::forecast::forecast;
use rota_store::{Millis, now_millis};
use serde::Serialize;

use crate::cli::{Format, PlanArgs};
use crate::output;

pub async fn run(args: PlanArgs) -> Result<()> {
    let (svg, html) = crate::report_file::pair(args.svg.as_deref(), args.html.as_deref())?;
    let store = crate::open_store(&args.store).await?;
    let now = now_millis();
    let made = forecast(&*store, now).await?;
    if made.nodes == 0 {
        bail!(
            "the store {} holds no nodes: no agent has recorded one, so there is nothing to plan",
            args.store.store
        );
    }
    let forecast = shown(&made.plan, &made.rules, &made.durations, now);
    if svg.is_some() || html.is_some() {
        let timeline = timeline(&forecast, now)?;
        if let Some(file) = svg {
            file.write(&rota_timeline::render_svg(&timeline))?;
        }
        if let Some(file) = html {
            file.write(&rota_timeline::render_html(
                &timeline,
                "rota plan: the forecast of the turns to come",
            ))?;
        }
    }
    let text = match args.output {
        Format::Table => render_table(&forecast),
        Format::Json => output::json(&forecast)?,
    };
    output::emit(&text)
}

/// What `rota plan` shows.
#[derive(Clone, Debug, Serialize)]
struct Forecast {
    pub at: Millis,
    /// The typical length of each window state, in milliseconds (empty: none recorded yet,
    /// and the plan has its order but no times).
    pub step_p50_ms: Vec<(NodeState, Millis)>,
    pub window_p50_ms: Millis,
    pub concurrency: u32,
    pub batches: String,
    pub windows: Vec<Window>,
    pub held_back: Vec<HeldBack>,
    /// When the last planned window is expected to end.
    pub finish: Option<Millis>,
}

#[derive(Clone, Debug, Serialize)]
struct Window {
    pub turn: usize,
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub slot: u32,
    pub open: bool,
    pub start: Millis,
    pub finish: Millis,
}

#[derive(Clone, Debug, Serialize)]
struct HeldBack {
    pub node: String,
    pub reason: String,
}

fn shown(planned: &Plan, rules: &Rules, durations: &StepDurations, now: Millis) -> Forecast {
    Forecast {
        at: now,
        step_p50_ms: durations.by_state.iter().map(|(s, d)| (*s, *d)).collect(),
        window_p50_ms: durations.window(),
        concurrency: rules.concurrency,
        batches: rules.batches.to_string(),
        windows: planned
            .windows
            .iter()
            .map(|w| Window {
                turn: w.turn,
                node: w.node.to_string(),
                group: w.group.clone(),
                slot: w.slot,
                open: w.open,
                start: w.start,
                finish: w.finish,
            })
            .collect(),
        held_back: planned
            .held_back
            .iter()
            .map(|(node, reason)| HeldBack {
                node: node.to_string(),
                reason: reason.clone(),
            })
            .collect(),
        finish: planned.finish(),
    }
}

/// The summary line, the windows, then the nodes held back.
fn render_table(forecast: &Forecast) -> String {
    let known = !forecast.step_p50_ms.is_empty();
    let mut text = if forecast.windows.is_empty() {
        "no node waits for a window\n".to_string()
    } else if known {
        let steps: Vec<String> = forecast
            .step_p50_ms
            .iter()
            .map(|(state, ms)| format!("{state} {}", crate::steps::duration(*ms)))
            .collect();
        format!(
            "{} windows, concurrency {}, batches {}; a window takes about {} ({}); all done about {}\n",
            forecast.windows.len(),
            forecast.concurrency,
            forecast.batches,
            crate::steps::duration(forecast.window_p50_ms),
            steps.join(", "),
            forecast
                .finish
                .map_or_else(|| "-".to_string(), output::rfc3339_seconds),
        )
    } else {
        format!(
            "{} windows, concurrency {}, batches {}; no window recorded yet, so no times\n",
            forecast.windows.len(),
            forecast.concurrency,
            forecast.batches
        )
    };
    if !forecast.windows.is_empty() {
        text.push('\n');
        let time = |at: Millis| {
            if known {
                output::rfc3339_seconds(at)
            } else {
                "-".to_string()
            }
        };
        // The GROUP column only in a fleet with groups.
        let grouped = forecast.windows.iter().any(|w| w.group.is_some());
        let header: &[&str] = if grouped {
            &["TURN", "NODE", "GROUP", "SLOT", "START", "FINISH"]
        } else {
            &["TURN", "NODE", "SLOT", "START", "FINISH"]
        };
        text.push_str(&output::table(
            header,
            forecast.windows.iter().map(|w| {
                let mut cells = vec![w.turn.to_string(), w.node.clone()];
                if grouped {
                    cells.push(output::cell(w.group.as_deref()));
                }
                cells.extend([
                    w.slot.to_string(),
                    if w.open {
                        format!("open since {}", output::rfc3339_seconds(w.start))
                    } else {
                        time(w.start)
                    },
                    time(w.finish),
                ]);
                cells
            }),
        ));
    }
    if !forecast.held_back.is_empty() {
        text.push_str("\nheld back:\n");
        for held in &forecast.held_back {
            text.push_str(&format!("  {}: {}\n", held.node, held.reason));
        }
    }
    text
}

/// The forecast as a timeline: each node waits from now until its window is forecast to open
/// (a window open now is drawn from its current state's start), then its window.
fn timeline(forecast: &Forecast, now: Millis) -> Result<rota_timeline::Timeline> {
    use rota_timeline::{Segment, SegmentKind};
    let mut segments = Vec::new();
    for window in &forecast.windows {
        let node = NodeName::new(&window.node)?;
        if !window.open && window.start > now {
            segments.push(Segment::new(
                node.clone(),
                SegmentKind::Wait,
                now,
                window.start,
            ));
        }
        segments.push(Segment::new(
            node,
            SegmentKind::Window,
            window.start,
            window.finish.max(window.start),
        ));
    }
    Ok(rota_timeline::Timeline::new(segments, Vec::new())?.forecast())
}

#[cfg(test)]
mod tests {
    use rota_timeline::SegmentKind;

    use super::*;

    fn window(turn: usize, node: &str, open: bool, start: Millis, finish: Millis) -> Window {
        Window {
            turn,
            node: node.into(),
            group: None,
            slot: 0,
            open,
            start,
            finish,
        }
    }

    #[test]
    fn the_forecast_is_drawn_as_waits_then_windows_under_its_own_heading() {
        let forecast = Forecast {
            at: 1_000,
            step_p50_ms: vec![(NodeState::Rebooting, 2_000)],
            window_p50_ms: 2_000,
            concurrency: 1,
            batches: "all".into(),
            windows: vec![
                window(1, "node-a", true, 500, 2_500),
                window(2, "node-b", false, 2_500, 4_500),
            ],
            held_back: Vec::new(),
            finish: Some(4_500),
        };
        let timeline = timeline(&forecast, 1_000).expect("a timeline");
        let drawn: Vec<(&str, SegmentKind, Millis, Millis)> = timeline
            .segments()
            .iter()
            .map(|s| (s.node.as_str(), s.kind, s.start, s.end))
            .collect();
        assert_eq!(
            drawn,
            [
                ("node-a", SegmentKind::Window, 500, 2_500),
                ("node-b", SegmentKind::Wait, 1_000, 2_500),
                ("node-b", SegmentKind::Window, 2_500, 4_500),
            ]
        );
        let svg = rota_timeline::render_svg(&timeline);
        assert!(svg.contains(">rota forecast, "), "{svg}");
        assert!(svg.contains(">window (forecast)<"), "{svg}");
        assert!(!svg.contains("rota rollout,"), "{svg}");
    }

    #[test]
    fn a_plan_of_a_grouped_fleet_shows_each_windows_group() {
        let mut grouped = window(1, "node-a", false, 2_000, 4_000);
        grouped.group = Some("zone-a".into());
        let forecast = Forecast {
            at: 1_000,
            step_p50_ms: vec![(NodeState::Rebooting, 2_000)],
            window_p50_ms: 2_000,
            concurrency: 1,
            batches: "all".into(),
            windows: vec![grouped, window(2, "node-b", false, 4_000, 6_000)],
            held_back: vec![HeldBack {
                node: "node-c".into(),
                reason: "the fleet is paused: kernel triage".into(),
            }],
            finish: Some(6_000),
        };
        let table = render_table(&forecast);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[2].starts_with("TURN  NODE    GROUP"), "{table}");
        assert!(lines[3].contains("node-a  zone-a"), "{table}");
        assert!(
            table.contains("held back:\n  node-c: the fleet is paused: kernel triage"),
            "{table}"
        );
    }
}

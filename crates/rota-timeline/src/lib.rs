//! rota's rollout timeline (`rota history --svg FILE`, `--html FILE`): one lane per node, with
//! wait, drain, maintenance, reboot and verify segments in distinct colours and patterns,
//! failure and postponement markers with their causes, a strip of the slots in use and a time
//! axis fitted to the rollout, so an operator can see at a glance how a rollout went.
//!
//! Pure: no I/O and no clock reads.
//! - [`model`]: what is drawn ([`Timeline`], [`Segment`], [`Marker`]);
//! - [`history`]: a timeline derived from the store's history, whose started, finished,
//!   failed and canceled entries give each node's maintenance windows but not the steps inside
//!   them;
//! - [`steps`]: segments from a node's steps (the states it entered, and when), to draw over
//!   those windows;
//! - [`summary`]: where the time went, per kind of step: p50, p99 and the slowest nodes;
//! - [`usage`]: the slots in use over time;
//! - [`svg`] and [`html`]: the renderers, with [`legend`] (how each kind looks);
//! - [`axis`]: time-axis ticks at round intervals, from milliseconds to years.

pub mod axis;
mod format;
pub mod history;
pub mod html;
pub mod legend;
pub mod model;
pub mod steps;
pub mod summary;
pub mod svg;
pub mod usage;

pub use history::from_history;
pub use html::render_html;
pub use model::{Marker, MarkerKind, Millis, Segment, SegmentKind, Timeline, TimelineError};
pub use steps::from_steps;
pub use svg::render_svg;

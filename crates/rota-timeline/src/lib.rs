//! rota's rollout timeline (`rota history --svg FILE`): one lane per node, with
//! drain, maintenance, reboot and verify segments in distinct colours, failure markers and a
//! time axis, so an operator can see at a glance how a rollout went.
//!
//! Pure: no I/O and no clock reads.
//! - [`model`]: what is drawn ([`Timeline`], [`Segment`], [`Marker`]);
//! - [`history`]: a timeline derived from the store's history, whose started, finished,
//!   failed and canceled entries give each node's maintenance windows but not the steps inside
//!   them;
//! - [`svg`]: the renderer;
//! - [`axis`]: time-axis ticks at sensible intervals.

pub mod axis;
pub mod history;
pub mod model;
pub mod svg;

pub use history::from_history;
pub use model::{Marker, MarkerKind, Millis, Segment, SegmentKind, Timeline, TimelineError};
pub use svg::render_svg;

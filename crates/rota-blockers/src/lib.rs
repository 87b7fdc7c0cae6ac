//! rota's blockers: what holds a node back before it takes a slot and again right before its
//! reboot. A blocker that cannot be answered blocks too, and says so: rota never takes "no
//! answer" for "nothing blocks".
//!
//! - `blocker`: the [`Blocker`] trait, [`Block`] and [`BlockKind`];
//! - `pods`: [`PodBlocker`], pods matching a blocking selector on the node (kured's
//!   `--blocking-pod-selector`), and [`parse_selector`] (also for `--drain-pod-selector`);
//! - `annotation`: [`AnnotationBlocker`], the [`PAUSE_ANNOTATION`] on the node's Node;
//! - `prometheus`: [`PrometheusBlocker`], active Prometheus alerts (kured's `--prometheus-url`),
//!   and its [`AlertFilter`];
//! - `error`: what a blocker's configuration or question can get wrong.

mod annotation;
mod blocker;
mod error;
mod pods;
mod prometheus;

pub use annotation::{AnnotationBlocker, PAUSE_ANNOTATION};
pub use blocker::{Block, BlockKind, Blocker};
pub use error::{ConfigError, QueryError};
pub use pods::{PodBlocker, parse_selector, parse_selector_for};
pub use prometheus::{AlertFilter, PrometheusBlocker};

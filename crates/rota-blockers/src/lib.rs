//! rota's blockers outside Kubernetes: a node holds back while Prometheus has active alerts
//! (kured's `--prometheus-url` with its alert filters). A Prometheus that cannot be asked blocks
//! too, and says so: rota never takes "no answer" for "no alerts".
//!
//! - `prometheus`: [`PrometheusBlocker`] and its [`AlertFilter`];
//! - `error`: what a blocker's configuration or query can get wrong.

mod error;
mod prometheus;

pub use error::{ConfigError, QueryError};
pub use prometheus::{AlertFilter, PrometheusBlocker};

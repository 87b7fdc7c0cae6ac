//! Disruptions in the middle of a rollout, set off by its progress: the tests that end the
//! database's connections or cut the API server off ([`crate::proxy`]) time them with this.

use std::future::Future;

use tokio::sync::mpsc;

/// Runs `disrupt` each time the count of finished nodes that `progress` reports first reaches
/// the next of `thresholds`; returns after the last one (or when `progress` closes first), with
/// the count that set each off and what `disrupt` returned.
pub async fn at_thresholds<T, F, Fut>(
    thresholds: Vec<usize>,
    mut progress: mpsc::UnboundedReceiver<usize>,
    mut disrupt: F,
) -> Vec<(usize, T)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let mut done = Vec::new();
    for threshold in thresholds {
        while let Some(completed) = progress.recv().await {
            if completed >= threshold {
                done.push((completed, disrupt().await));
                break;
            }
        }
    }
    done
}

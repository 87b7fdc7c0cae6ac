use std::fmt;
use std::time::Duration;

use rota_kube_client::CallError;

use crate::drain::{Progress, waiting_for};

/// A pod that the drain will not evict without an explicit flag, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `namespace/name`.
    pub pod: String,
    pub reason: RefusalReason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// No controller would recreate the pod (`--force` allows it).
    Unmanaged,
    /// The pod's emptyDir data is lost with it (`--delete-emptydir-data` allows it).
    EmptyDir,
    /// The pod's [`crate::DRAIN_ANNOTATION`] has this value, which rota does not know: a
    /// misspelt wait-completed must not get the pod evicted.
    DrainAnnotation(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            RefusalReason::Unmanaged => write!(
                f,
                "pod {} has no controller to recreate it (evicted only with the force option, \
                 like kubectl drain --force)",
                self.pod
            ),
            RefusalReason::EmptyDir => write!(
                f,
                "pod {} has emptyDir data that eviction deletes (evicted only with the \
                 delete-emptydir-data option, like kubectl drain --delete-emptydir-data)",
                self.pod
            ),
            RefusalReason::DrainAnnotation(value) => write!(
                f,
                "pod {} has the annotation {}={value:?}, which rota does not know (the one \
                 value is {:?}: the drain waits for the pod to complete instead of evicting \
                 it); correct or remove it",
                self.pod,
                crate::DRAIN_ANNOTATION,
                crate::WAIT_COMPLETED,
            ),
        }
    }
}

fn list(refusals: &[Refusal]) -> String {
    refusals
        .iter()
        .map(Refusal::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("node {node} does not exist")]
    NodeNotFound { node: String },
    #[error("node {node} is not Ready: {detail}")]
    NodeNotReady { node: String, detail: String },
    #[error(
        "node {node} is not ready to hand its slot on: {}",
        .reasons.join("; ")
    )]
    NotRestored { node: String, reasons: Vec<String> },
    #[error(
        "node {node}: annotation {annotation} is not what rota wrote ({detail}); remove it with \
         kubectl annotate node {node} {annotation}- to stop waiting for what it lists"
    )]
    BadAnnotation {
        node: String,
        annotation: &'static str,
        detail: String,
    },
    #[error(
        "node {node}: its taints changed under every one of {attempts} compare-and-swaps; \
         trying again later: {detail}"
    )]
    TaintsContended {
        node: String,
        attempts: usize,
        detail: String,
    },
    #[error("invalid node label {label:?}: {reason}")]
    BadLabel { label: String, reason: String },
    #[error("invalid taint key {key:?}: {reason}")]
    BadTaintKey { key: String, reason: String },
    #[error("node {node} cannot be drained safely: {}", list(.refusals))]
    Refused {
        node: String,
        refusals: Vec<Refusal>,
    },
    /// The wait-completed pods still ran when the drain's wait for them timed out; they are
    /// not evicted.
    #[error(
        "node {node}: the wait-completed timeout of {} passed, still {}; not evicting {}",
        span(*.timeout),
        waiting_for(.pods),
        if .pods.len() == 1 { "it" } else { "them" }
    )]
    WaitCompletedTimeout {
        node: String,
        timeout: Duration,
        /// `namespace/name`, sorted.
        pods: Vec<String>,
    },
    /// The evictions, or the wait for the evicted pods to go, took longer than the drain's
    /// timeout; `progress` is what the drain was still waiting for.
    #[error(
        "node {node} did not drain within the drain timeout of {}: {progress}",
        span(*.timeout)
    )]
    DrainTimeout {
        node: String,
        timeout: Duration,
        progress: Progress,
    },
}

/// `1h`, `10m 30s`: a duration as the flags take it.
fn span(duration: Duration) -> String {
    match jiff::SignedDuration::try_from(duration) {
        Ok(d) => format!("{d:#}"),
        Err(_) => format!("{duration:?}"),
    }
}

impl Error {
    /// Whether a request failed because the API server could not be reached or could not serve
    /// it for now (a restart, an overload): the same request may work a moment later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Call(call) if call.is_unavailable())
    }

    /// Wraps a failed request to `verb` a `resource` (`object` names which one).
    pub(crate) fn api(
        verb: &'static str,
        resource: &'static str,
        object: impl Into<String>,
        source: kube::Error,
    ) -> Error {
        Error::Call(CallError::new(verb, resource, object, source))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

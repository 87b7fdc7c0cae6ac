//! What may hold a node back before it takes a slot and again right before its reboot: the
//! [`Blocker`] trait and what a block says. The binary composes the blockers (pods and a node
//! annotation in a cluster, Prometheus alerts anywhere); the fleet's pause is the agent's own,
//! read from its store every time, and says so with [`BlockKind::Paused`].

use std::fmt;

use async_trait::async_trait;

/// The kind of a block: a small fixed set, used as the metric's label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// A pod matching a blocking selector runs on the node.
    Pod,
    /// A Prometheus alert is active.
    Alert,
    /// Prometheus could not be asked: rota cannot tell that nothing blocks.
    PrometheusUnreachable,
    /// The node carries the pause annotation.
    NodeAnnotation,
    /// The whole fleet is paused (`rota pause`).
    Paused,
}

impl BlockKind {
    pub const ALL: [BlockKind; 5] = [
        BlockKind::Pod,
        BlockKind::Alert,
        BlockKind::PrometheusUnreachable,
        BlockKind::NodeAnnotation,
        BlockKind::Paused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::Pod => "pod",
            BlockKind::Alert => "alert",
            BlockKind::PrometheusUnreachable => "prometheus-unreachable",
            BlockKind::NodeAnnotation => "node-annotation",
            BlockKind::Paused => "paused",
        }
    }
}

/// Why the node must not be disrupted now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: BlockKind,
    /// For operators: names what blocks (the pod, the alerts, the annotation's value).
    pub reason: String,
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// One source of blocks. A blocker that cannot find out says so with a block of its own: an
/// unanswered question never lets a node go.
#[async_trait]
pub trait Blocker: Send + Sync {
    /// Everything that holds the node back now; empty when nothing does.
    async fn blocks(&self) -> Vec<Block>;
}

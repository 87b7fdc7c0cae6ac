//! [`AnnotationBlocker`]: the `rota.dev/pause` annotation on the node's Node holds it back.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;
use rota_core::NodeName;

use crate::blocker::{Block, BlockKind, Blocker};
use crate::error::QueryError;

/// The Node annotation that pauses rota on that node; its value is shown as the reason.
pub const PAUSE_ANNOTATION: &str = "rota.dev/pause";

/// Blocks while the node's Node carries [`PAUSE_ANNOTATION`]. A Node that cannot be read
/// blocks too: rota never takes "no answer" for "not paused".
pub struct AnnotationBlocker {
    client: Client,
    node: NodeName,
}

impl AnnotationBlocker {
    pub fn new(client: Client, node: NodeName) -> AnnotationBlocker {
        AnnotationBlocker { client, node }
    }

    async fn pause(&self) -> Result<Option<String>, QueryError> {
        let node = self.node.as_str();
        let object = Api::<Node>::all(self.client.clone())
            .get_opt(node)
            .await
            .map_err(|e| QueryError::api("get", "nodes", node, e))?
            .ok_or_else(|| QueryError::NodeNotFound {
                node: node.to_owned(),
            })?;
        Ok(object
            .metadata
            .annotations
            .and_then(|mut annotations| annotations.remove(PAUSE_ANNOTATION)))
    }
}

#[async_trait]
impl Blocker for AnnotationBlocker {
    async fn blocks(&self) -> Vec<Block> {
        let reason = match self.pause().await {
            Ok(None) => return Vec::new(),
            Ok(Some(value)) => format!("node annotation {PAUSE_ANNOTATION}: {value}"),
            Err(e) => format!("cannot read the node's {PAUSE_ANNOTATION} annotation: {e}"),
        };
        vec![Block {
            kind: BlockKind::NodeAnnotation,
            reason,
        }]
    }
}

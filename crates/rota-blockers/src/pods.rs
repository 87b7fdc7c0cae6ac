//! [`PodBlocker`]: pods matching a blocking selector running on the node hold it back
//! (kured's `--blocking-pod-selector`). A list the API server does not answer blocks too: rota
//! never takes "no answer" for "no pods".

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use rota_core::{NodeName, check_label_key, check_label_value};

use crate::blocker::{Block, BlockKind, Blocker};
use crate::error::{ConfigError, QueryError};

/// Checks a label selector as the API server parses it (`k8s.io/apimachinery/pkg/labels`):
/// comma-separated requirements `key`, `!key`, `key=value`, `key==value`, `key!=value`,
/// `key in (v1,v2)`, `key notin (v1,v2)`. Returns it trimmed.
pub fn parse_selector(value: &str) -> Result<String, ConfigError> {
    parse_selector_for("--blocking-pod-selector", value)
}

/// [`parse_selector`] for the selector of another `flag`, which its error names.
pub fn parse_selector_for(flag: &'static str, value: &str) -> Result<String, ConfigError> {
    let fail = |reason: String| ConfigError::Invalid {
        flag,
        value: value.to_string(),
        reason: format!(
            "{reason} (give a label selector such as `app=backup`, `tier in (db,cache)`, \
             `!drain-ok`)"
        ),
    };
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(fail(
            "the selector is empty (it would match every pod)".into(),
        ));
    }
    let mut depth = 0i32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in trimmed.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&trimmed[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(fail("unbalanced parentheses".into()));
        }
    }
    if depth != 0 {
        return Err(fail("unbalanced parentheses".into()));
    }
    parts.push(&trimmed[start..]);
    for part in parts {
        requirement(part.trim()).map_err(&fail)?;
    }
    Ok(trimmed.to_string())
}

fn requirement(part: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err("an empty requirement (two commas in a row, or one at an end)".into());
    }
    if let Some(key) = part.strip_prefix('!') {
        return check_label_key(key.trim());
    }
    for op in ["!=", "==", "="] {
        if let Some((key, value)) = part.split_once(op) {
            check_label_key(key.trim())?;
            return check_label_value(value.trim());
        }
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    let Some(rest) = words.next().map(str::trim_start) else {
        return check_label_key(key);
    };
    check_label_key(key)?;
    let set = rest
        .strip_prefix("notin")
        .or_else(|| rest.strip_prefix("in"))
        .ok_or_else(|| format!("{part:?}: expected =, ==, !=, in or notin after the key {key:?}"))?
        .trim();
    let values = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("{part:?}: in and notin take a parenthesised list"))?;
    if values.trim().is_empty() {
        return Err(format!("{part:?}: the list of values is empty"));
    }
    values
        .split(',')
        .try_for_each(|v| check_label_value(v.trim()))
}

/// Blocks while a pod matching one of the selectors runs on the node.
pub struct PodBlocker {
    client: Client,
    node: NodeName,
    selectors: Vec<String>,
}

impl PodBlocker {
    /// `selectors` must have passed [`parse_selector`].
    pub fn new(client: Client, node: NodeName, selectors: Vec<String>) -> PodBlocker {
        PodBlocker {
            client,
            node,
            selectors,
        }
    }

    async fn pods(&self, selector: &str) -> Result<Vec<String>, QueryError> {
        // Pods that ended hold nothing back (kured's rule).
        let fields = format!(
            "spec.nodeName={},status.phase!=Succeeded,status.phase!=Failed",
            self.node
        );
        let pods = Api::<Pod>::all(self.client.clone())
            .list_metadata(&ListParams::default().labels(selector).fields(&fields))
            .await
            .map_err(|e| QueryError::api("list", "pods", selector, e))?;
        Ok(pods
            .items
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect())
    }
}

#[async_trait]
impl Blocker for PodBlocker {
    async fn blocks(&self) -> Vec<Block> {
        let mut blocks = Vec::new();
        for selector in &self.selectors {
            match self.pods(selector).await {
                Ok(pods) if pods.is_empty() => {}
                Ok(pods) => blocks.push(Block {
                    kind: BlockKind::Pod,
                    reason: format!(
                        "pods matching {selector} run on the node: {}",
                        pods.join(", ")
                    ),
                }),
                Err(e) => blocks.push(Block {
                    kind: BlockKind::Pod,
                    reason: format!("cannot list the pods matching {selector}: {e}"),
                }),
            }
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_parse_as_the_api_server_parses_them() {
        for good in [
            "app=backup",
            "app==backup",
            "app!=backup",
            "rota.dev/hold",
            "!drain-ok",
            "tier in (db, cache)",
            "tier notin (db,cache),app=x",
            " app = backup , example.com/role=",
        ] {
            assert!(
                parse_selector(good).is_ok(),
                "{good}: {:?}",
                parse_selector(good)
            );
        }
    }

    #[test]
    fn malformed_selectors_name_the_flag_the_value_and_why() {
        for (bad, why) in [
            ("", "empty"),
            ("app=backup,", "empty requirement"),
            ("app=back up", "label value"),
            ("-app=x", "label key"),
            ("Example.COM/app=x", "DNS subdomain"),
            ("tier in db", "parenthesised"),
            ("tier in ()", "empty"),
            ("tier in (a", "unbalanced"),
            ("app backup", "expected =, ==, !=, in or notin"),
        ] {
            let error = parse_selector(bad).expect_err(bad).to_string();
            assert!(
                error.starts_with(&format!("--blocking-pod-selector {bad:?}: "))
                    && error.contains(why),
                "{bad}: {error}"
            );
        }
    }
}

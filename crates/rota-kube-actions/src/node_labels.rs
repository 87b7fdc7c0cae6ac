//! Labels rota puts on a Node while it has it out of service, and once it gives it back
//! (kured's `--pre-reboot-node-labels` and `--post-reboot-node-labels`): other systems (load
//! balancers, monitoring, schedulers of batch work) can follow a node's maintenance by its
//! labels. They go in the cordon's and the uncordon's own writes, so they cost no request and
//! always agree with the cordon.

use std::collections::BTreeMap;

use rota_core::{check_label_key, check_label_value};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The labels of [`crate::cordon`] and [`crate::uncordon`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLabels {
    cordon: BTreeMap<String, String>,
    uncordon: BTreeMap<String, String>,
}

impl NodeLabels {
    /// `cordon` is set with rota's cordon; `uncordon` with its uncordon, which also removes the
    /// keys of `cordon` that `uncordon` does not set: a node back in service carries none of
    /// the labels that said it was out.
    pub fn new(cordon: BTreeMap<String, String>, uncordon: BTreeMap<String, String>) -> Self {
        NodeLabels { cordon, uncordon }
    }

    /// The `metadata.labels` of the cordon's merge patch.
    pub(crate) fn on_cordon(&self) -> Value {
        Value::Object(
            self.cordon
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    }

    /// The `metadata.labels` of the uncordon's merge patch: `null` removes a key.
    pub(crate) fn on_uncordon(&self) -> Value {
        let mut labels: Map<String, Value> = self
            .cordon
            .keys()
            .filter(|k| !self.uncordon.contains_key(*k))
            .map(|k| (k.clone(), Value::Null))
            .collect();
        labels.extend(
            self.uncordon
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone()))),
        );
        Value::Object(labels)
    }
}

/// Parses `KEY=VALUE`, or several separated by commas as kured takes them
/// (`a=b,example.com/c=d`), checking each against Kubernetes' rules for label keys and values,
/// so that a label the API server would refuse stops the agent at start instead of failing
/// every drain.
pub fn parse_labels(text: &str) -> Result<Vec<(String, String)>> {
    text.split(',')
        .map(|label| {
            let bad = |reason: String| Error::BadLabel {
                label: label.to_owned(),
                reason,
            };
            let (key, value) = label.split_once('=').ok_or_else(|| {
                bad("expected KEY=VALUE, such as rota.dev/maintenance=true".into())
            })?;
            check_label_key(key).map_err(&bad)?;
            check_label_value(value).map_err(&bad)?;
            Ok((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Checks a taint's key, which follows the rules of label keys.
pub fn parse_taint_key(text: &str) -> Result<String> {
    check_label_key(text).map_err(|reason| Error::BadTaintKey {
        key: text.to_owned(),
        reason,
    })?;
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn labels_parse_one_or_several_separated_by_commas() {
        assert_eq!(
            parse_labels("kured=rebooting").ok(),
            Some(vec![("kured".to_owned(), "rebooting".to_owned())])
        );
        assert_eq!(
            parse_labels("example.com/state=out,empty=").ok(),
            Some(vec![
                ("example.com/state".to_owned(), "out".to_owned()),
                ("empty".to_owned(), String::new()),
            ])
        );
    }

    #[test]
    fn labels_kubernetes_would_refuse_are_refused_naming_the_label_and_the_rule() {
        for (text, names) in [
            ("no-equals-sign", "KEY=VALUE"),
            ("=value", "key's name \"\""),
            ("-bad=x", "key's name \"-bad\""),
            ("Example.com/state=x", "prefix \"Example.com\""),
            ("/state=x", "prefix \"\""),
            ("state=has space", "value \"has space\""),
            ("ok=x,state=-x", "value \"-x\""),
        ] {
            let message = match parse_labels(text) {
                Ok(parsed) => panic!("{text:?} parsed as {parsed:?}"),
                Err(e) => e.to_string(),
            };
            assert!(
                message.contains(names),
                "{text:?}: {message:?} should name {names:?}"
            );
        }
        let long = format!("state={}", "x".repeat(64));
        assert!(parse_labels(&long).is_err(), "a 64-character value");
    }

    #[test]
    fn taint_keys_follow_the_rules_of_label_keys() {
        assert_eq!(
            parse_taint_key("rota.dev/pending").ok().as_deref(),
            Some("rota.dev/pending")
        );
        for bad in ["", "rota.dev/", "a=b", "Rota.dev/pending", "pending!"] {
            let message = match parse_taint_key(bad) {
                Ok(key) => panic!("{bad:?} accepted as {key:?}"),
                Err(e) => e.to_string(),
            };
            assert!(message.contains(&format!("{bad:?}")), "{message}");
        }
    }

    #[test]
    fn the_uncordon_sets_its_labels_and_removes_the_cordons_others() {
        let labels = NodeLabels::new(
            labels(&[("kured", "rebooting"), ("example.com/out", "true")]),
            labels(&[("kured", "done")]),
        );
        assert_eq!(
            labels.on_cordon(),
            json!({ "kured": "rebooting", "example.com/out": "true" })
        );
        assert_eq!(
            labels.on_uncordon(),
            json!({ "kured": "done", "example.com/out": null })
        );
        assert_eq!(NodeLabels::default().on_uncordon(), json!({}));
    }
}

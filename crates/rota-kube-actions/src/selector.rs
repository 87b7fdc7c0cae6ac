//! [`Selector`]: a label selector as the API server reads one (`k8s.io/apimachinery/pkg/labels`),
//! matched here against a pod's labels: the drain sorts the pods it lists by it, without
//! another request.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use rota_core::{check_label_key, check_label_value};

/// What a selector may look like, for the errors that refuse one.
const ALLOWED: &str = "expected a label selector such as `app=ci-runner`, `tier in (batch,ci)` \
                       or `!drain-ok`: comma-separated requirements `key`, `!key`, `key=value`, \
                       `key==value`, `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`";

/// A label selector: every one of its requirements holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// As given, trimmed: what [`Selector`]'s `Display` shows.
    text: String,
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    DoesNotExist(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
}

impl Requirement {
    /// As the API server matches: `!=` and `notin` also hold for a pod without the key.
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
            Requirement::Equals(key, value) => labels.get(key) == Some(value),
            Requirement::NotEquals(key, value) => labels.get(key) != Some(value),
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
        }
    }
}

impl Selector {
    /// Parses `text`; the error says what is wrong and what a selector may look like. An empty
    /// selector is refused: it would select every pod.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let fail = |reason: String| format!("{reason}; {ALLOWED}");
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(fail(
                "the selector is empty (it would select every pod)".into(),
            ));
        }
        let mut requirements = Vec::new();
        for part in split(trimmed).map_err(&fail)? {
            requirements.push(requirement(part.trim()).map_err(&fail)?);
        }
        Ok(Selector {
            text: trimmed.to_owned(),
            requirements,
        })
    }

    /// Whether `labels` (a pod's) satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl FromStr for Selector {
    type Err = String;

    fn from_str(text: &str) -> Result<Selector, String> {
        Selector::parse(text)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The requirements of `text`: split at the commas outside parentheses.
fn split(text: &str) -> Result<Vec<&str>, String> {
    let mut depth = 0u32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            ')' if depth == 1 => depth = 0,
            '(' | ')' => return Err("unbalanced parentheses".into()),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn key(key: &str) -> Result<String, String> {
    let key = key.trim();
    check_label_key(key)?;
    Ok(key.to_owned())
}

fn value(value: &str) -> Result<String, String> {
    let value = value.trim();
    check_label_value(value)?;
    Ok(value.to_owned())
}

fn requirement(part: &str) -> Result<Requirement, String> {
    if part.is_empty() {
        return Err("an empty requirement (two commas in a row, or one at an end)".into());
    }
    if let Some(name) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key(name)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, value(v)?));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::Equals(key(k)?, value(v)?));
    }
    let Some((name, rest)) = part.split_once(char::is_whitespace) else {
        return Ok(Requirement::Exists(key(part)?));
    };
    let rest = rest.trim_start();
    let (negated, set) = if let Some(set) = rest.strip_prefix("notin") {
        (true, set)
    } else if let Some(set) = rest.strip_prefix("in") {
        (false, set)
    } else {
        return Err(format!(
            "{part:?}: expected =, ==, !=, in or notin after the key {name:?}"
        ));
    };
    let values = set
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("{part:?}: in and notin take a parenthesised list"))?;
    if values.trim().is_empty() {
        return Err(format!("{part:?}: the list of values is empty"));
    }
    let values = values.split(',').map(value).collect::<Result<_, _>>()?;
    let name = key(name)?;
    Ok(if negated {
        Requirement::NotIn(name, values)
    } else {
        Requirement::In(name, values)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn matches(selector: &str, pairs: &[(&str, &str)]) -> bool {
        Selector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
            .matches(&labels(pairs))
    }

    /// Each operator as `kubectl get pods -l` reads it.
    #[test]
    fn requirements_match_as_the_api_server_matches_them() {
        let ci = [("app", "ci-runner"), ("tier", "batch")];
        assert!(matches("app=ci-runner", &ci));
        assert!(matches("app == ci-runner", &ci));
        assert!(!matches("app=web", &ci));
        assert!(matches("app!=web", &ci));
        assert!(matches("team!=infra", &ci), "!= holds without the key");
        assert!(matches("tier", &ci));
        assert!(!matches("!tier", &ci));
        assert!(matches("!gpu", &ci));
        assert!(matches("tier in (batch, ci)", &ci));
        assert!(matches("tier in(batch)", &ci));
        assert!(!matches("tier notin (batch)", &ci));
        assert!(
            matches("team notin (infra)", &ci),
            "notin holds without the key"
        );
        assert!(!matches("team in (infra)", &ci));
        assert!(matches(" app=ci-runner , tier in (batch,ci) ", &ci));
        assert!(!matches("app=ci-runner,!tier", &ci));
        assert!(matches(
            "example.com/drain=wait-completed",
            &[("example.com/drain", "wait-completed")]
        ));
        assert!(matches("app=", &[("app", "")]));
    }

    #[test]
    fn malformed_selectors_are_refused_saying_what_is_allowed() {
        for bad in [
            "",
            "  ",
            "app=ci,",
            ",app",
            "app in (a,b",
            "app in a,b)",
            "app in ()",
            "app in a",
            "app is ci",
            "app=-bad-",
            "Bad_Prefix/app=x",
            "tier in (a,(b))",
            "app=a b",
        ] {
            let error = Selector::parse(bad).expect_err(bad);
            assert!(
                error.contains("such as `app=ci-runner`"),
                "{bad:?}: {error}"
            );
        }
        assert_eq!(
            Selector::parse(" app=ci-runner ").map(|s| s.to_string()),
            Ok("app=ci-runner".to_owned())
        );
    }

    proptest! {
        /// Untrusted text never panics the parser, and a refusal says what is allowed.
        #[test]
        fn any_text_is_parsed_or_refused(text in "[ -~]{0,40}|\\PC{0,20}") {
            if let Err(error) = Selector::parse(&text) {
                prop_assert!(error.contains("expected a label selector"), "{error}");
            }
        }
    }
}

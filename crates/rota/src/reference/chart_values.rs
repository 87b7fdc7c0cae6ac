//! The chart's values reference, `docs/reference/chart-values.md`: every value the schema
//! `charts/rota/values.schema.json` knows, its type from the schema, its default from
//! `charts/rota/values.yaml` (read by a YAML parser), and its meaning from the schema's
//! description or else from the comment above the key in `values.yaml`.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::markdown::{escape, pipes};
use super::{assert_current, check_or_write, repo_root};

/// What a line scan of `values.yaml` finds: the comment block right above each key, by its
/// dotted path, and the keys in the file's order. A scan because the YAML parser drops
/// comments; the file's style is the chart's own (indentation, one key a line).
#[derive(Default)]
struct Keys {
    comments: HashMap<String, Vec<String>>,
    order: Vec<String>,
}

fn scan(yaml: &str) -> Keys {
    let mut keys = Keys::default();
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut block: Vec<String> = Vec::new();
    for line in yaml.lines() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        if let Some(comment) = text.strip_prefix('#') {
            block.push(comment.strip_prefix(' ').unwrap_or(comment).to_owned());
            continue;
        }
        let key = text
            .split_once(':')
            .map(|(k, _)| k)
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        match key {
            Some(key) if !text.starts_with('-') => {
                path.retain(|(i, _)| *i < indent);
                path.push((indent, key.to_owned()));
                let dotted = path
                    .iter()
                    .map(|(_, k)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(".");
                if !block.is_empty() {
                    keys.comments
                        .insert(dotted.clone(), std::mem::take(&mut block));
                }
                keys.order.push(dotted);
            }
            _ => {}
        }
        block.clear();
    }
    keys
}

/// A comment as one table cell: prose joined, indented example lines as code on lines of
/// their own.
fn comment_cell(lines: &[String]) -> String {
    let mut out = String::new();
    for line in lines {
        if line.starts_with("  ") {
            let _ = write!(out, "<br>`{}`", line.trim_end());
        } else if !line.trim().is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&escape(line.trim()));
        }
    }
    pipes(&out)
}

fn resolve<'a>(schema: &'a Value, root: &'a Value) -> (&'a Value, Option<&'a str>) {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap_or(reference);
            (
                root.pointer(&format!("/$defs/{name}")).unwrap_or(schema),
                Some(name),
            )
        }
        None => (schema, None),
    }
}

fn type_of(schema: &Value, root: &Value) -> String {
    let (resolved, name) = resolve(schema, root);
    if let Some(values) = resolved.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(", ");
    }
    if let Some(branches) = schema.get("anyOf").or(schema.get("oneOf")) {
        return branches
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| type_of(b, root))
            .collect::<Vec<_>>()
            .join(" or ");
    }
    let base = match resolved.get("type") {
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        Some(Value::String(t)) => t.clone(),
        _ => "any".to_owned(),
    };
    let base = match (base.as_str(), resolved.get("items")) {
        ("array", Some(items)) => format!("array of {}", type_of(items, root)),
        _ => base,
    };
    match name {
        Some(name) => format!("{base} ({name})"),
        None => base,
    }
}

fn default_cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "`null`".to_owned(),
        Some(Value::String(s)) if s.is_empty() => "`\"\"`".to_owned(),
        Some(Value::String(s)) => format!("`{}`", pipes(s)),
        Some(other) => format!("`{}`", pipes(&other.to_string())),
    }
}

/// One table row per value, by its dotted path.
fn walk(
    rows: &mut Vec<(String, String)>,
    properties: &serde_json::Map<String, Value>,
    prefix: &str,
    values: Option<&Value>,
    root: &Value,
    keys: &Keys,
) {
    for (key, schema) in properties {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let (resolved, _) = resolve(schema, root);
        // The comment in values.yaml says most; a description of the type ($defs) least.
        let meaning = keys
            .comments
            .get(&path)
            .map(|c| comment_cell(c))
            .filter(|c| !c.is_empty())
            .or_else(|| {
                schema
                    .get("description")
                    .or(resolved.get("description"))
                    .and_then(Value::as_str)
                    .map(|d| pipes(&escape(d)))
            })
            .unwrap_or_default();
        let value = values.and_then(|v| v.get(key));
        match resolved.get("properties").and_then(Value::as_object) {
            Some(children) => {
                if !meaning.is_empty() {
                    rows.push((path.clone(), format!("| `{path}` | object | | {meaning} |")));
                }
                walk(rows, children, &path, value, root, keys);
            }
            None => {
                let row = format!(
                    "| `{path}` | {} | {} | {meaning} |",
                    type_of(schema, root),
                    default_cell(value)
                );
                rows.push((path, row));
            }
        }
    }
}

fn chart_values_markdown() -> String {
    let root = repo_root();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("charts/rota/values.schema.json")).expect("schema"),
    )
    .expect("the schema is JSON");
    let yaml = std::fs::read_to_string(root.join("charts/rota/values.yaml")).expect("values");
    let values: Value = serde_saphyr::from_str(&yaml).expect("values.yaml is YAML");
    let mut out = String::from(
        "# Chart values\n\n\
         <!-- Generated from charts/rota/values.schema.json and values.yaml by \
         crates/rota/src/reference/chart_values.rs; do not edit. -->\n\n\
         Every value of the chart `charts/rota` that its schema knows, with its default from \
         `values.yaml`. `helm template` and `helm install` refuse a value the schema does not \
         allow, naming it. The values of `agent`, `drain`, `blockers` and `notifications` are \
         `rota agent` flags: see the [command-line reference](cli.md#rota-agent).\n\n\
         | value | type | default | meaning |\n|---|---|---|---|\n",
    );
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .expect("the schema has properties");
    let keys = scan(&yaml);
    let mut rows = Vec::new();
    walk(&mut rows, properties, "", Some(&values), &schema, &keys);
    // In values.yaml's order, which groups what belongs together; the rest after it.
    let place = |path: &str| {
        keys.order
            .iter()
            .position(|p| p == path)
            .unwrap_or(usize::MAX)
    };
    rows.sort_by_key(|(path, _)| place(path));
    for (_, row) in rows {
        out.push_str(&row);
        out.push('\n');
    }
    out
}

#[test]
fn the_chart_values_reference_is_current() {
    let path = repo_root().join("docs/reference/chart-values.md");
    let stale: Vec<String> = check_or_write(&path, chart_values_markdown().as_bytes())
        .into_iter()
        .collect();
    assert_current(
        "the chart values reference (charts/rota/values.schema.json or values.yaml changed)",
        &stale,
    );
}

#[test]
fn a_comment_above_a_nested_key_describes_that_key() {
    let keys = scan("a:\n  # the b\n  b: 1\n# the c\nc:\n  - x\n  # not d\n\n  d: 2\n");
    let found = keys.comments;
    assert_eq!(found.get("a.b"), Some(&vec!["the b".to_owned()]));
    assert_eq!(found.get("c"), Some(&vec!["the c".to_owned()]));
    assert_eq!(found.get("c.d"), None, "a blank line ends a comment block");
    assert_eq!(keys.order, ["a", "a.b", "c", "c.d"]);
}

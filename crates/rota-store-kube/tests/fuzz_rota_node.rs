//! Untrusted input (issue 29): a RotaNode edited by hand (`kubectl edit rotanode`) or written
//! by a newer rota, and a slot Lease with nonsense in it, as the store decodes them. One field
//! of a full object at a time is replaced by nonsense of any JSON kind, or removed; the object
//! is decoded as kube decodes an API server's answer. Nothing may panic; a RotaNode that does
//! not decode says which field (`status.history[0].event: unknown variant …`), and one that
//! does survives its own round trip. `fuzz/` runs the same decoding under libFuzzer.
//!
//! Cases per property: [`CASES`].

use k8s_openapi::api::coordination::v1::Lease;
use proptest::prelude::*;
use rota_kube_api::RotaNode;
use rota_kube_api::slots;
use serde_json::{Value, json};

/// Cases per property.
const CASES: u32 = 2000;

/// A RotaNode as the API server returns it, with every field of the status set.
fn rota_node() -> Value {
    let at = "2026-11-29T10:15:30.250Z";
    let request = json!({
        "id": 1, "process": "reboot", "source": "sentinel", "createdAt": at, "state": "active",
    });
    json!({
        "apiVersion": "rota.dev/v1alpha1",
        "kind": "RotaNode",
        "metadata": {"name": "node-3", "resourceVersion": "12"},
        "spec": {"node": "node-3"},
        "status": {
            "state": "rebooting", "since": at, "process": "reboot", "slot": 0,
            "session": {"id": 5, "deadline": at},
            "preCordoned": false, "cordonedByRota": true, "bootId": "b-1",
            "rebootStartedAt": at, "rebootDeadline": at, "lastRebootAt": at, "queuedAt": at,
            "lastResult": "finished", "blocked": {"reason": "pods", "since": at}, "tag": 8200,
            "requests": [request],
            "backoff": [{"process": "mop/kernel", "until": at, "lastIntervalSeconds": 60, "cause": "exit 1"}],
            "history": [{"id": 2, "process": "reboot", "event": "started", "at": at, "cause": "c", "slot": 0, "released": false}],
            "procedureRequests": [{
                "id": 3, "process": "mop/kernel", "source": "procedure", "createdAt": at,
                "state": "done", "finishedAt": at,
            }],
        },
    })
}

/// Every value under `value` (itself too), as (JSON pointer, path as the errors print it).
fn places(value: &Value, pointer: String, path: String, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let sep = if path.is_empty() { "" } else { "." };
                places(
                    field,
                    format!("{pointer}/{key}"),
                    format!("{path}{sep}{key}"),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                places(item, format!("{pointer}/{i}"), format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
    out.push((pointer, path));
}

fn status_places() -> Vec<(String, String)> {
    let node = rota_node();
    let mut out = Vec::new();
    places(&node["status"], "/status".into(), "status".into(), &mut out);
    out
}

/// Nonsense of every JSON kind, and the near misses a hand or a newer rota writes: an event
/// or state this rota does not know, times in forms the API server's date-time accepts but
/// RFC 3339 does not, numbers beyond a field's range.
fn nonsense() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|x| json!(x)),
        prop::sample::select(
            &[
                "drained",
                "frozen",
                "mop/Kernel",
                "x",
                "",
                "2026-11-29T10:15:30",
                "2026-11-29 10:15:30Z",
                "10000-01-01T00:00:00Z",
                "2026-11-29T10:15:30+0100",
            ][..]
        )
        .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!([{"id": "1"}])),
    ]
}

/// What becomes of one place: a new value, or (`None`) no value.
fn edit() -> impl Strategy<Value = (usize, Option<Value>)> {
    (
        0..status_places().len(),
        prop::option::weighted(0.9, nonsense()),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn a_rota_node_edited_by_hand_decodes_or_names_its_field((place, value) in edit()) {
        let (pointer, path) = &status_places()[place];
        let mut node = rota_node();
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer below the status");
        let edited = match (&value, node.pointer_mut(parent)) {
            (Some(value), _) => node.pointer_mut(pointer).map(|v| *v = value.clone()).is_some(),
            (None, Some(Value::Object(fields))) => fields.remove(key).is_some(),
            (None, _) => false,
        };
        prop_assume!(edited);
        match decode(&node) {
            Err(e) => {
                let message = e.to_string();
                match value {
                    // A missing field is named in its object's message.
                    None => prop_assert!(message.contains(&format!("`{key}`")), "{message:?} does not name {key}"),
                    Some(_) => prop_assert!(
                        message.strip_prefix(path.as_str()).is_some_and(|rest| rest.starts_with([':', '.', '['])),
                        "{message:?} does not start with {path}"
                    ),
                }
            }
            Ok(decoded) => {
                let written = serde_json::to_value(&decoded).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let again = decode(&written);
                prop_assert!(again.as_ref().is_ok_and(|a| a.status == decoded.status), "{again:?}");
            }
        }
    }

    #[test]
    fn a_slot_lease_with_any_holder_reads_or_names_its_field(
        holder in prop_oneof![any::<String>(), "[a-z0-9.-]{0,6}"],
        name in "(rota-slot-)?[0-9a-z-]{0,4}",
    ) {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "rota-system"},
            "spec": {"holderIdentity": holder, "acquireTime": "2026-11-29T10:15:30.250000Z"},
        })).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let slot = name.strip_prefix(slots::SLOT_PREFIX).and_then(|n| n.parse::<u32>().ok());
        match (slots::slot_holder(&lease), slot) {
            (None, _) => prop_assert!(slot.is_none() || holder.is_empty()),
            (Some(Ok(held)), Some(slot)) => {
                prop_assert_eq!(held.slot, slot);
                prop_assert_eq!(held.node.as_str(), holder.as_str());
            }
            (Some(Err(e)), Some(_)) => {
                let message = e.to_string();
                let expected = format!(
                    "Lease rota-system/{name}: spec.holderIdentity: invalid node name {holder:?}: expected"
                );
                prop_assert!(message.starts_with(&expected), "{message:?}");
            }
            (Some(_), None) => prop_assert!(false, "{name} is no slot"),
        }
    }

    #[test]
    fn a_lease_of_any_json_decodes_or_is_refused(text in any::<String>()) {
        if let Ok(lease) = serde_json::from_str::<Lease>(&text) {
            let _ = slots::slot_holder(&lease);
            let _ = slots::released_at(&lease);
        }
    }
}

/// `node` decoded as kube decodes the API server's answer: its JSON text, with serde_json.
fn decode(node: &Value) -> Result<RotaNode, serde_json::Error> {
    serde_json::from_str(&node.to_string())
}

/// A history entry of a newer rota (an event this one does not know) names the entry and the
/// field, and what this rota knows.
#[test]
fn a_history_event_of_a_newer_rota_names_its_field() {
    let mut node = rota_node();
    node["status"]["history"][0]["event"] = json!("drained");
    let message = decode(&node).expect_err("an unknown event").to_string();
    assert!(
        message.starts_with(
            "status.history[0].event: unknown variant `drained`, expected one of `started`, \
             `finished`, `failed`, `canceled`, `released`, `postponed`"
        ),
        "{message}"
    );
}

/// A slot beyond any slot's number, which the CRD's schema lets through (it has no maximum).
#[test]
fn a_slot_out_of_range_names_its_field() {
    let mut node = rota_node();
    node["status"]["slot"] = json!(5_000_000_000u64);
    let message = decode(&node).expect_err("too large").to_string();
    assert!(
        message.starts_with("status.slot: invalid value: integer `5000000000`"),
        "{message}"
    );
}

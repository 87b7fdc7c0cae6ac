//! Untrusted input (issue 29): `--cordon-label`/`--uncordon-label` values, `--pending-taint`
//! keys, and the `rota.dev/evicted` annotation that a drain leaves on the Node (and that anyone
//! with `kubectl annotate` can change) meet arbitrary text and near-valid text. None may panic;
//! each refusal names the value (the annotation's, the node and the annotation) and says what
//! to do. `fuzz/` runs the label and taint parsers under libFuzzer.
//!
//! Cases per property: [`CASES`].

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use rota_kube_actions::{
    EVICTED_ANNOTATION, Error, Evicted, check_gate, parse_labels, parse_taint_key,
};
use tokio::runtime::Runtime;

/// Cases per property.
const CASES: u32 = 2000;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// Labels as people write them, several separated by commas, with prefixes, empty parts and
/// characters no label allows.
const NEAR_LABELS: &str =
    "(([a-z]{1,3}\\.)?[a-zA-Z0-9_.-]{0,4}/?[a-zA-Z0-9_.-]{0,4}=?=?[a-zA-Z0-9_. ä-]{0,4},?){1,3}";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn labels_and_taint_keys_from_any_text(text in prop_oneof![text(), NEAR_LABELS]) {
        match parse_labels(&text) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(message.starts_with("invalid node label \""), "{message:?}");
                prop_assert!(message.contains("must") || message.contains("expected"), "{message:?}");
            }
            Ok(labels) => {
                let joined: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                prop_assert_eq!(joined.join(","), text.clone());
            }
        }
        match parse_taint_key(&text) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(message.contains(&format!("invalid taint key {text:?}")), "{message:?}");
            }
            Ok(key) => prop_assert_eq!(key, text),
        }
    }
}

/// The annotation as a hand edit may leave it: rota's JSON with fields replaced by nonsense,
/// or anything at all.
fn annotation() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        Just("\"x\"".to_owned()),
        Just("null".to_owned()),
        Just("[]".to_owned()),
        Just(r#"[{"kind":"Deployment","namespace":"default"}]"#.to_owned()),
    ];
    prop_oneof![
        text(),
        (
            prop::sample::select(&["count", "unmanaged", "controllers", "extra"][..]),
            value
        )
            .prop_map(|(field, value)| format!(r#"{{"count":1,"{field}":{value}}}"#)),
    ]
}

/// A client of an API server that is not there, on the runtime it lives on: a refused
/// annotation is refused before any request, and an accepted one without controllers needs
/// none. One for all cases: building a client (its TLS setup) is what a case would cost.
static CLIENT: LazyLock<(Runtime, kube::Client)> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let url = "http://127.0.0.1:9".parse().expect("a URL");
    let client = runtime
        .block_on(async { kube::Client::try_from(kube::Config::new(url)) })
        .expect("a client");
    (runtime, client)
});

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn the_evicted_annotation_from_any_text(text in annotation()) {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                annotations: Some(BTreeMap::from([(EVICTED_ANNOTATION.to_owned(), text.clone())])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let (runtime, client) = &*CLIENT;
        let rota_reads = serde_json::from_str::<Evicted>(&text);
        match runtime.block_on(check_gate(client, &node, false)) {
            Err(e @ Error::BadAnnotation { .. }) => {
                let message = e.to_string();
                prop_assert!(rota_reads.is_err(), "{text:?} reads, yet {message:?}");
                prop_assert!(
                    message.starts_with("node node-1: annotation rota.dev/evicted is not what rota wrote ("),
                    "{message:?}"
                );
                prop_assert!(message.contains("kubectl annotate node node-1 rota.dev/evicted-"), "{message:?}");
            }
            // A controller's check asked the API server that is not there.
            Err(_) | Ok(()) => prop_assert!(rota_reads.is_ok(), "{text:?} does not read"),
        }
    }
}

//! Label selectors and labels as rota takes them from flags: `--blocking-pod-selector`,
//! `--cordon-label`/`--uncordon-label` (and the label rules under them), `--pending-taint`.
//! Any text; every refusal quotes the value. Checks as in the crates' `tests/fuzz_*.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rota_blockers::parse_selector;
use rota_core::{check_label_key, check_label_value};
use rota_kube_actions::{parse_labels, parse_taint_key};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let quoted = format!("{text:?}");
    match parse_selector(&text) {
        Ok(selector) => assert_eq!(selector, text.trim()),
        Err(e) => assert!(e.to_string().contains(&quoted), "{e}"),
    }
    if check_label_key(&text).is_ok() {
        assert!(!text.is_empty() && text.len() <= 253 + 1 + 63);
    }
    if check_label_value(&text).is_ok() {
        assert!(text.len() <= 63);
    }
    match parse_labels(&text) {
        Ok(labels) => {
            let joined: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            assert_eq!(joined.join(","), text);
        }
        Err(e) => assert!(e.to_string().starts_with("invalid node label \""), "{e}"),
    }
    match parse_taint_key(&text) {
        Ok(key) => assert_eq!(key, text),
        Err(e) => assert!(e.to_string().contains(&quoted), "{e}"),
    }
});

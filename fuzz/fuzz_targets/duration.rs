//! Durations and times as rota reads them: the flags' and procedures' durations (humantime),
//! a procedure's timeout and backoff as a store reads them back, and a RotaNode's timestamps.
//! Any text; what is read must be written back as what reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rota_core::{BackoffPolicy, ProcedureSpec};
use rota_kube_api::crd::Timestamp;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(duration) = humantime::parse_duration(&text) {
        let shown = humantime::format_duration(duration).to_string();
        assert_eq!(
            humantime::parse_duration(&shown).ok(),
            Some(duration),
            "{text:?} shown as {shown}"
        );
    }
    let stored = json!({
        "name": "p",
        "script": "true",
        "timeout": text,
        "backoff": {"initial": text, "maximum": text, "exponent": 2},
    });
    match ProcedureSpec::read(stored) {
        Ok(spec) => {
            let policy = BackoffPolicy::from(&spec.backoff);
            assert!(policy.next(Some(policy.next(None))) >= policy.next(None));
            let written = serde_json::to_string(&spec).expect("a spec serialises");
            let back = ProcedureSpec::read(&mut serde_json::Deserializer::from_str(&written));
            assert_eq!(back.ok(), Some(spec), "{written}");
        }
        Err(message) => assert!(
            message.starts_with("timeout: ") || message.starts_with("backoff."),
            "{message}"
        ),
    }
    if let Ok(at) = serde_json::from_value::<Timestamp>(json!(text)) {
        let written = serde_json::to_value(at).expect("a read time is written");
        assert_eq!(serde_json::from_value::<Timestamp>(written).ok(), Some(at));
    }
});

//! Procedures as the stores read them back: a SQL row's JSON spec, and a Procedure object's
//! spec (its body without the name). Any input; what reads is checked, written back and read
//! back unchanged, and asked what the agent asks of it.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use rota_core::{BackoffPolicy, NodeName};
use rota_store::ProcedureRecord;
use rota_kube_api::ProcedureBody;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(record) = ProcedureRecord::from_stored(&text, 0) {
        let spec = &record.spec;
        if spec.validate().is_ok() {
            assert!(spec.process().is_ok());
        }
        let node = NodeName::new("node-1").expect("a node name");
        let _ = spec.matches(&node, &BTreeMap::new());
        let _ = spec.check_pin(record.script.as_deref().unwrap_or_default());
        let policy = BackoffPolicy::from(&spec.backoff);
        let _ = policy.next(Some(policy.next(None)));
        let stored = ProcedureRecord::stored_spec(spec).expect("a spec serialises");
        let again = ProcedureRecord::from_stored(&stored, 0).expect("a written spec reads back");
        assert_eq!(&again.spec, spec, "{stored}");
    }
    if let Ok(fields) = serde_json::from_slice(data) {
        let body = ProcedureBody { fields };
        if let Ok(spec) = body.to_spec("p") {
            assert_eq!(ProcedureBody::of(&spec).to_spec("p").ok(), Some(spec));
        }
    }
});

//! RotaNode objects as the store decodes the API server's answer: any JSON. What decodes is
//! written back and decodes to the same status; a status that does not decode names its field.
//! Checks as in crates/rota-store-kube/tests/fuzz_rota_node.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rota_kube_api::RotaNode;

fuzz_target!(|data: &[u8]| {
    if let Ok(node) = serde_json::from_slice::<RotaNode>(data) {
        let written = serde_json::to_vec(&node).expect("a decoded RotaNode encodes");
        let again = serde_json::from_slice::<RotaNode>(&written).expect("and decodes again");
        assert_eq!(again.status, node.status);
        assert_eq!(again.spec, node.spec);
    }
});

//! Slot Leases and the `rota.dev/evicted` Node annotation as rota reads them: any JSON. A
//! Lease's holder reads as a node or names the Lease and the field; a read annotation is
//! written back as what reads back the same.
#![no_main]

use k8s_openapi::api::coordination::v1::Lease;
use libfuzzer_sys::fuzz_target;
use rota_kube_actions::Evicted;
use rota_kube_api::slots;

fuzz_target!(|data: &[u8]| {
    if let Ok(lease) = serde_json::from_slice::<Lease>(data) {
        match slots::slot_holder(&lease) {
            Some(Ok(held)) => assert_eq!(Some(held.node.as_str()), slots::holder(&lease)),
            Some(Err(e)) => assert!(
                e.to_string()
                    .contains("spec.holderIdentity: invalid node name"),
                "{e}"
            ),
            None => assert!(slots::slot_of(&lease).is_none() || slots::holder(&lease).is_none()),
        }
        let _ = (slots::released_at(&lease), slots::owner_node(&lease));
    }
    if let Ok(evicted) = serde_json::from_slice::<Evicted>(data) {
        let written = serde_json::to_string(&evicted).expect("a read annotation is written");
        assert_eq!(
            serde_json::from_str::<Evicted>(&written).ok(),
            Some(evicted)
        );
    }
});

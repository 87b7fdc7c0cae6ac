//! Names read from flags, rows and objects: node names, processes, history events, node
//! states, priorities (as text, and as the JSON of a stored procedure's priority). Any input;
//! a refusal quotes the value, an acceptance is the value. Checks as in
//! crates/rota-core/tests/fuzz_parsers.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rota_core::{HistoryEvent, NodeName, NodeState, Priority, Process};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let quoted = format!("{text:?}");
    let refused = |message: String| assert!(message.contains(&quoted), "{message}");
    match NodeName::new(text.as_ref()) {
        Ok(name) => assert_eq!(name.as_str(), text),
        Err(e) => refused(e.to_string()),
    }
    match text.parse::<Process>() {
        Ok(process) => assert_eq!(process.to_string(), text),
        Err(e) => refused(e.to_string()),
    }
    match text.parse::<HistoryEvent>() {
        Ok(event) => assert_eq!(event.as_str(), text),
        Err(e) => refused(e.to_string()),
    }
    match text.parse::<NodeState>() {
        Ok(state) => assert_eq!(state.as_str(), text),
        Err(e) => refused(e.to_string()),
    }
    match text.parse::<Priority>() {
        Ok(priority) => assert!(priority.value() <= 99),
        Err(e) => refused(e.to_string()),
    }
    if let Ok(priority) = serde_json::from_slice::<Priority>(data) {
        assert!(priority.value() <= 99);
    }
});

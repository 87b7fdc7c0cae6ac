//! Untrusted input (issue 29): message templates, notification event names and webhook URLs
//! meet arbitrary text and near-valid text. None may panic; each refusal names the value it
//! refuses and says what is allowed; an accepted template renders any event. `fuzz/` runs the
//! same entry points under libFuzzer.
//!
//! Cases per property: [`CASES`].

use proptest::prelude::*;
use rota_core::{NodeName, Process};
use rota_notify::{Event, EventKind, Template, Webhook};

/// Cases per property.
const CASES: u32 = 2000;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// Templates as people write them: text, placeholders (known and unknown), escaped and stray
/// braces, multi-byte characters next to them.
const NEAR_TEMPLATE: &str = "([a-zü :]{0,3}|\\{(node|process|event|cause|slot|at|state|)\\}|\\{\\{|\\}\\}|\\{|\\}|ä\\{){0,6}";

/// The message must quote `value` and tell what to write instead.
fn names_value(message: &str, value: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        message.contains(&format!("{value:?}")),
        "{message:?} does not name {value:?}"
    );
    prop_assert!(
        message.contains("expected") || message.contains("write {{ and }}"),
        "{message:?} does not say what is allowed"
    );
    Ok(())
}

fn check_template(
    text: &str,
    cause: Option<String>,
    slot: Option<u32>,
) -> Result<(), TestCaseError> {
    match text.parse::<Template>() {
        Err(e) => names_value(&e.to_string(), text),
        Ok(template) => {
            prop_assert_eq!(template.as_str(), text);
            let event = Event {
                kind: EventKind::Failed,
                node: NodeName::new("node-1").map_err(|e| TestCaseError::fail(e.to_string()))?,
                process: Process::Reboot,
                cause,
                slot,
                at: jiff::Timestamp::UNIX_EPOCH,
            };
            let message = template.render(&event);
            // Without braces a template is its own message.
            if !text.contains(['{', '}']) {
                prop_assert_eq!(message, text);
            }
            Ok(())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn templates_from_any_text(text in text(), cause in proptest::option::of(text()), slot in any::<Option<u32>>()) {
        check_template(&text, cause, slot)?;
    }

    #[test]
    fn templates_from_near_valid_text(text in NEAR_TEMPLATE, cause in proptest::option::of(text()), slot in any::<Option<u32>>()) {
        check_template(&text, cause, slot)?;
    }

    #[test]
    fn event_kinds_from_any_text(text in prop_oneof![text(), "(drain-started|reboot|finished|failed|postponed)\\PC?"]) {
        match text.parse::<EventKind>() {
            Err(e) => names_value(&e.to_string(), &text)?,
            Ok(kind) => prop_assert_eq!(kind.as_str(), text),
        }
    }

    #[test]
    fn webhook_urls_from_any_text(url in prop_oneof![text(), "(https?|ftp|)(://)?[a-z.:@]{0,8}(/[\\PC]{0,4})?"]) {
        match Webhook::json(&url) {
            Err(e) => names_value(&e.to_string(), &url)?,
            Ok(webhook) => prop_assert!(matches!(webhook.url().scheme(), "http" | "https")),
        }
    }
}

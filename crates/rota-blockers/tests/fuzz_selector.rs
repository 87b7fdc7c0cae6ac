//! Untrusted input (issue 29): `--blocking-pod-selector` meets arbitrary text and near-valid
//! label selectors. It may not panic; a refusal names the flag and the value and shows a
//! selector that would do; an accepted selector is the value trimmed. `fuzz/` runs the same
//! entry point under libFuzzer.
//!
//! Cases per property: [`CASES`].

use proptest::prelude::*;
use rota_blockers::parse_selector;

/// Cases per property.
const CASES: u32 = 2000;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// Selectors as people write them: keys with and without prefixes, every operator, sets,
/// with stray commas, parentheses, spaces and characters no label allows.
const NEAR_SELECTOR: &str = "(( ?!?([a-z]{1,3}\\.)?[a-zA-Z0-9_.-]{0,4}/?[a-zA-Z0-9_.-]{0,4} ?\
    (=|==|!=| in | notin |)? ?(\\(?[a-z0-9 ,-]{0,6}\\)?)? ?|ä|\\)|\\()(,|,,)?){0,4}";

fn check(value: &str) -> Result<(), TestCaseError> {
    match parse_selector(value) {
        Err(e) => {
            let message = e.to_string();
            prop_assert!(
                message.starts_with("--blocking-pod-selector ")
                    && message.contains(&format!("{value:?}")),
                "{message:?} does not name the flag and {value:?}"
            );
            prop_assert!(message.contains("such as `app=backup`"), "{message:?}");
        }
        Ok(selector) => {
            prop_assert_eq!(selector.as_str(), value.trim());
            prop_assert!(!selector.is_empty());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn selectors_from_any_text(value in text()) {
        check(&value)?;
    }

    #[test]
    fn selectors_from_near_valid_text(value in NEAR_SELECTOR) {
        check(&value)?;
    }
}

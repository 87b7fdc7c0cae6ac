//! Untrusted input (issue 29): rota-core's parsers meet arbitrary text (any Unicode, and bytes
//! read as lossy UTF-8) and near-valid text (their grammar with wrong pieces mixed in). None
//! may panic; each refusal names the value it refuses and says what is allowed; and what is
//! accepted survives its own round trip. `fuzz/` runs the same entry points under libFuzzer.
//!
//! Cases per property: [`CASES`] (the whole file runs in about a second in the debug profile).

use jiff::Timestamp;
use proptest::prelude::*;
use rota_core::{
    BackoffPolicy, HistoryEvent, Hours, MaintenanceHours, NodeName, NodeState, Priority,
    ProcedureSpec, Process,
};

/// Cases per property.
const CASES: u32 = 2000;

/// Any text: arbitrary Unicode, or arbitrary bytes as a reader of a file would decode them.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// A refusal must quote the value (as `{:?}` prints it) and say what is allowed.
fn names_value(message: &str, value: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        message.contains(&format!("{value:?}")),
        "{message:?} does not name {value:?}"
    );
    prop_assert!(
        message.contains("expected"),
        "{message:?} does not say what is allowed"
    );
    Ok(())
}

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const ZONES: [&str; 5] = [
    "UTC",
    "Europe/Berlin",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
];

/// Valid maintenance hours: some days, a start, a length (seconds included), a zone.
fn valid_hours() -> impl Strategy<Value = String> {
    (
        0u8..=127,
        0u32..86_400,
        1u32..86_400,
        prop::option::of(prop::sample::select(&ZONES[..])),
    )
        .prop_map(|(days, start, length, zone)| {
            let clock = |s: u32| format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
            let days: Vec<&str> = (0..7)
                .filter(|i| days & (1 << i) != 0)
                .map(|i| DAYS[i])
                .collect();
            let mut text = format!(
                "{} {}-{}",
                days.join(","),
                clock(start),
                clock((start + length) % 86_400)
            );
            if let Some(zone) = zone {
                text.push(' ');
                text.push_str(zone);
            }
            text
        })
}

/// `text` with one character inserted, removed or replaced, at a place and of a kind chosen
/// by the strategy: the near misses people type.
fn mutated(text: String, (place, c, kind): (prop::sample::Index, char, u8)) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let at = place.index(chars.len() + 1);
    match kind {
        0 => chars.insert(at, c),
        1 if at < chars.len() => {
            chars.remove(at);
        }
        _ if at < chars.len() => chars[at] = c,
        _ => chars.push(c),
    }
    chars.into_iter().collect()
}

/// Maintenance hours as people write them: valid ones, and valid ones with one or two typos
/// (any character, or one of those the syntax gives a meaning).
fn near_hours() -> impl Strategy<Value = String> {
    let edit = (
        any::<prop::sample::Index>(),
        prop_oneof![
            any::<char>(),
            prop::sample::select(&[' ', ',', '-', ':', '*', '0', '9', '/'][..])
        ],
        0u8..3,
    );
    (valid_hours(), prop::collection::vec(edit, 0..3))
        .prop_map(|(text, edits)| edits.into_iter().fold(text, mutated))
}

/// Any instant jiff can represent, so that the hours' arithmetic meets the ends of time too.
fn instant() -> impl Strategy<Value = Timestamp> {
    (Timestamp::MIN.as_second()..=Timestamp::MAX.as_second())
        .prop_map(|s| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Maintenance hours: refused with their text named, or accepted, printed canonically, parsed
/// back to themselves, and asked whether they contain `at` without a panic.
fn check_hours(text: &str, at: Timestamp) -> Result<(), TestCaseError> {
    match text.parse::<Hours>() {
        Err(e) => names_value(&e.to_string(), text),
        Ok(hours) => {
            let canonical = hours.to_string();
            let again = canonical.parse::<Hours>();
            prop_assert_eq!(again.as_ref(), Ok(&hours));
            let within = hours.contains(at);
            if let Some(next) = hours.next_start(at) {
                prop_assert!(next >= at);
                prop_assert_eq!(next == at, within, "{} at {}", canonical, at);
            }
            if let Some(end) = hours.ends_at(at) {
                prop_assert!(within && end > at, "{} at {}: ends {}", canonical, at, end);
            }
            let all = MaintenanceHours::parse([text, canonical.as_str()]);
            prop_assert!(all.is_ok_and(|h| h.contains(at) == within));
            Ok(())
        }
    }
}

/// A name: refused with the value named, or accepted as exactly what was given.
fn check_names(text: &str) -> Result<(), TestCaseError> {
    match NodeName::new(text) {
        Err(e) => names_value(&e.to_string(), text)?,
        Ok(name) => {
            prop_assert_eq!(name.as_str(), text);
            prop_assert!((1..=NodeName::MAX_LEN).contains(&text.len()));
        }
    }
    match text.parse::<Process>() {
        Err(e) => names_value(&e.to_string(), text)?,
        Ok(process) => prop_assert_eq!(process.to_string(), text),
    }
    match text.parse::<HistoryEvent>() {
        Err(e) => names_value(&e.to_string(), text)?,
        Ok(event) => prop_assert_eq!(event.as_str(), text),
    }
    match text.parse::<NodeState>() {
        Err(e) => names_value(&e.to_string(), text)?,
        Ok(state) => prop_assert_eq!(state.as_str(), text),
    }
    match text.parse::<Priority>() {
        Err(e) => names_value(&e.to_string(), text)?,
        Ok(priority) => prop_assert!(priority.value() <= 99),
    }
    Ok(())
}

/// One JSON value for a procedure field: a right one for some field, or nonsense.
fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("true".to_owned()),
        Just("null".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just(r#"{"initial":"1s","maximum":"10000000000000000000s","exponent":1e308}"#.to_owned()),
        Just(r#"{"name":"cm","key":"run.sh"}"#.to_owned()),
        Just(r#"{"zone":"a","":"-"}"#.to_owned()),
        Just(r#"["node-1","-bad"]"#.to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| serde_json::json!(x).to_string()),
        "[0-9]{1,22}(ns|ms|s|m|h|d|w|M|y|years|x)?( [0-9]{1,3}[a-z]{0,2})?"
            .prop_map(|d| serde_json::json!(d).to_string()),
        text().prop_map(|t| serde_json::json!(t).to_string()),
    ]
}

const PROCEDURE_FIELDS: [&str; 15] = [
    "name",
    "priority",
    "script",
    "scriptConfigMap",
    "sha256",
    "nodeSelector",
    "nodes",
    "drain",
    "reboot",
    "timeout",
    "backoff",
    "exclusive",
    "retry",
    "drian",
    "",
];

/// A procedure's stored JSON: a valid one with some fields replaced by [`field_value`]s, and
/// the fields replaced.
fn near_procedure() -> impl Strategy<Value = (String, Vec<&'static str>)> {
    prop::collection::vec(
        (prop::sample::select(&PROCEDURE_FIELDS[..]), field_value()),
        0..5,
    )
    .prop_map(|fields| {
        let mut object = serde_json::json!({"name": "kernel", "script": "true"});
        let keys = fields.iter().map(|(key, _)| *key).collect();
        for (key, value) in fields {
            let value = serde_json::from_str(&value).unwrap_or(serde_json::Value::Null);
            object[key] = value;
        }
        (object.to_string(), keys)
    })
}

/// A procedure as a store reads it back: refused naming one of the fields in `edited` (when
/// given) or, once read, by `validate` naming its field; or accepted, written back and read
/// back unchanged, with a backoff whose waits can be computed.
fn check_procedure(json: &str, edited: Option<&[&str]>) -> Result<(), TestCaseError> {
    let spec = match ProcedureSpec::read(&mut serde_json::Deserializer::from_str(json)) {
        Ok(spec) => spec,
        Err(message) => {
            if let Some(edited) = edited {
                prop_assert!(
                    edited.iter().any(|field| message.contains(field)),
                    "{message:?} names none of {edited:?}"
                );
            }
            return Ok(());
        }
    };
    if let Err(e) = spec.validate() {
        let message = e.to_string();
        prop_assert!(message.contains(e.field), "{message:?} names no field");
        return Ok(());
    }
    let written = serde_json::to_string(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back = serde_json::from_str::<ProcedureSpec>(&written);
    prop_assert!(
        back.as_ref().is_ok_and(|b| b == &spec),
        "{written} reads back as {back:?}"
    );
    let policy = BackoffPolicy::from(&spec.backoff);
    let first = policy.next(None);
    prop_assert!(policy.next(Some(first)) >= first);
    prop_assert!(spec.process().is_ok());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn hours_from_any_text(text in text(), at in instant()) {
        check_hours(&text, at)?;
    }

    #[test]
    fn hours_from_near_valid_text(text in near_hours(), at in instant()) {
        check_hours(&text, at)?;
    }

    #[test]
    fn names_from_any_text(text in text()) {
        check_names(&text)?;
    }

    #[test]
    fn names_from_near_valid_text(
        text in "(mop/)?[a-zA-Z0-9._ /-]{0,8}|(reboot|maintenance|started|idle|failed|0?[0-9]{1,3})\\PC?",
    ) {
        check_names(&text)?;
    }

    #[test]
    fn procedures_from_any_json(json in text()) {
        check_procedure(&json, None)?;
    }

    #[test]
    fn procedures_from_near_valid_json((json, edited) in near_procedure()) {
        check_procedure(&json, Some(&edited))?;
    }
}

//! Notification settings: message templates (`--notify-template`), rendered for an event with
//! any cause; event names; webhook URLs. The input is the text, then optionally a NUL and the
//! cause. Checks as in crates/rota-notify/tests/fuzz_template.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rota_core::{NodeName, Process};
use rota_notify::{Event, EventKind, Template, Webhook};

fuzz_target!(|data: &[u8]| {
    let (text, cause) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (
            &data[..nul],
            Some(String::from_utf8_lossy(&data[nul + 1..]).into_owned()),
        ),
        None => (data, None),
    };
    let text = String::from_utf8_lossy(text);
    let quoted = format!("{text:?}");
    match text.parse::<Template>() {
        Ok(template) => {
            let event = Event {
                kind: EventKind::Failed,
                node: NodeName::new("node-1").expect("a node name"),
                process: Process::Reboot,
                cause,
                slot: Some(u32::MAX),
                at: jiff::Timestamp::MAX,
            };
            let message = template.render(&event);
            if !text.contains(['{', '}']) {
                assert_eq!(message, text);
            }
        }
        Err(e) => assert!(e.to_string().contains(&quoted), "{e}"),
    }
    if let Err(e) = text.parse::<EventKind>() {
        assert!(e.to_string().contains(&quoted), "{e}");
    }
    match Webhook::slack(&text) {
        Ok(webhook) => assert!(matches!(webhook.url().scheme(), "http" | "https")),
        Err(e) => assert!(e.to_string().contains(&quoted), "{e}"),
    }
});

//! Maintenance windows (`--window`, `ROTA_WINDOW`): any text, and once parsed, when the window
//! is open at any instant jiff can hold. The input is the window's text, then optionally a NUL
//! and up to eight bytes of the instant. Checks as in crates/rota-core/tests/fuzz_parsers.rs.
#![no_main]

use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use rota_core::{MaintenanceWindow, MaintenanceWindows};

fuzz_target!(|data: &[u8]| {
    let (text, at) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut seconds = [0; 8];
    for (to, from) in seconds.iter_mut().zip(at) {
        *to = *from;
    }
    let (first, last) = (Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    let at = Timestamp::from_second(first + i64::from_le_bytes(seconds).rem_euclid(last - first))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    match text.parse::<MaintenanceWindow>() {
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains(&format!("{text:?}")), "{message}");
            assert!(message.contains("expected"), "{message}");
        }
        Ok(window) => {
            let canonical = window.to_string();
            assert_eq!(
                canonical.parse::<MaintenanceWindow>().ok(),
                Some(window.clone())
            );
            let open = window.is_open(at);
            if let Some(next) = window.next_open(at) {
                assert!(
                    next >= at && (next == at) == open,
                    "{canonical} at {at}: {next}"
                );
            }
            if let Some(close) = window.closes_at(at) {
                assert!(open && close > at, "{canonical} at {at}: closes {close}");
            }
            let windows = MaintenanceWindows::parse([&*text]).expect("one window");
            assert_eq!(windows.is_open(at), open);
        }
    }
});

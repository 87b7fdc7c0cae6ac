//! Maintenance hours (`--hours`, `ROTA_HOURS`): any text, and once parsed, whether the hours
//! contain any instant jiff can hold. The input is the hours' text, then optionally a NUL and up
//! to eight bytes of the instant. Checks as in crates/rota-core/tests/fuzz_parsers.rs.
#![no_main]

use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use rota_core::{Hours, MaintenanceHours};

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
    match text.parse::<Hours>() {
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains(&format!("{text:?}")), "{message}");
            assert!(message.contains("expected"), "{message}");
        }
        Ok(hours) => {
            let canonical = hours.to_string();
            assert_eq!(canonical.parse::<Hours>().ok(), Some(hours.clone()));
            let within = hours.contains(at);
            if let Some(next) = hours.next_start(at) {
                assert!(
                    next >= at && (next == at) == within,
                    "{canonical} at {at}: {next}"
                );
            }
            if let Some(end) = hours.ends_at(at) {
                assert!(within && end > at, "{canonical} at {at}: ends {end}");
            }
            let all = MaintenanceHours::parse([&*text]).expect("one span of hours");
            assert_eq!(all.contains(at), within);
        }
    }
});

//! Zincati's client id: the host's app-specific machine id, as systemd's
//! `sd_id128_get_machine_app_specific` computes it: HMAC-SHA256 keyed with the machine id
//! (`/etc/machine-id`, a Kubernetes Node's `status.nodeInfo.machineID`) over Zincati's app id,
//! cut to 128 bits and marked as a version 4 UUID. A host shows its own with
//! `systemd-id128 machine-id --app-specific=de35106b6ec24688b63afddaa156679b`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Zincati's app id.
pub const ZINCATI_APP_ID: &str = "de35106b6ec24688b63afddaa156679b";

/// 128 bits written as 32 hexadecimal digits, the way `/etc/machine-id` holds them (a UUID's
/// dashes are accepted too).
fn id128(text: &str) -> Option<[u8; 16]> {
    let digits: String = text.trim().chars().filter(|c| *c != '-').collect();
    if digits.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(digits.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(bytes)
}

/// The id Zincati sends for a host whose machine id is `machine_id`; `None` when that is not
/// 128 bits in hexadecimal.
pub fn zincati_id(machine_id: &str) -> Option<String> {
    let key = id128(machine_id)?;
    let app = id128(ZINCATI_APP_ID)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(&app);
    let digest = mac.finalize().into_bytes();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_one_systemd_computes() {
        // Read from systemd 252's `systemd-id128 machine-id --app-specific=de35106b…` on a
        // host with this machine id.
        assert_eq!(
            zincati_id("3d1219c7c4c5404aaa1f6d2a48adfda4").as_deref(),
            Some("975228d46dc94622b9bbe16671e2b58d")
        );
        assert_eq!(
            zincati_id("3d1219c7-c4c5-404a-aa1f-6d2a48adfda4\n").as_deref(),
            Some("975228d46dc94622b9bbe16671e2b58d")
        );
    }

    #[test]
    fn a_machine_id_that_is_not_128_bits_has_no_id() {
        for bad in ["", "3d1219c7", "zz1219c7c4c5404aaa1f6d2a48adfda4", "é"] {
            assert_eq!(zincati_id(bad), None, "{bad}");
        }
    }
}

//! `--store` URLs: any text. A refusal names the URL with its password hidden; an accepted
//! PostgreSQL URL never shows its password. Checks as in crates/rota-store/tests/fuzz_store_url.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rota_store::StoreUrl;

/// `url` with the password of `scheme://user:password@…` as `***`.
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest
        .split_once('@')
        .map(|(userinfo, host)| (userinfo.split_once(':'), host))
    {
        Some((Some((user, _)), host)) => format!("{scheme}://{user}:***@{host}"),
        _ => url.to_owned(),
    }
}

fuzz_target!(|data: &[u8]| {
    let url = String::from_utf8_lossy(data);
    match url.parse::<StoreUrl>() {
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with(&format!("invalid store URL {:?}: ", shown(&url))),
                "{message}"
            );
        }
        Ok(parsed @ StoreUrl::Postgres(_)) => assert_eq!(parsed.to_string(), shown(&url)),
        Ok(StoreUrl::Sqlite(path)) => assert!(!path.as_os_str().is_empty()),
    }
});

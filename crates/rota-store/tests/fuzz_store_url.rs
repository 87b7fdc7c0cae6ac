//! Untrusted input (issue 29): `--store` URLs meet arbitrary text and near-valid URLs. None
//! may panic; a refusal names the URL (its password hidden) and the forms allowed; an accepted
//! PostgreSQL URL never shows its password. `fuzz/` runs the same entry point under libFuzzer.
//!
//! Cases per property: [`CASES`].

use proptest::prelude::*;
use rota_store::StoreUrl;

/// Cases per property.
const CASES: u32 = 2000;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// URLs as people write them: both schemes and others, user and password or not, empty
/// hosts and paths, options, and characters that belong nowhere.
const NEAR_URL: &str = "(sqlite|postgres|postgresql|mysql|kube|)(://|:/|:)?\
    ([a-z]{0,3}(:[a-z@]{0,4})?@)?[a-z0-9.:ä]{0,6}(/[a-z/.]{0,6})?(\\?[a-z=&]{0,6})?";

/// `url` as an error or a log may show it: `scheme://user:password@…` with the password
/// (whatever stands between the user's `:` and the first `@`) as `***`.
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

fn check(url: &str) -> Result<(), TestCaseError> {
    match url.parse::<StoreUrl>() {
        Err(e) => {
            let message = e.to_string();
            prop_assert!(
                message.starts_with(&format!("invalid store URL {:?}: ", shown(url))),
                "{message:?} does not name {url:?} with its password hidden"
            );
            prop_assert!(
                message.contains("expected sqlite://PATH")
                    && message.contains("postgres://USER@HOST"),
                "{message:?} does not say what is allowed"
            );
        }
        Ok(StoreUrl::Postgres(given)) => {
            prop_assert_eq!(&given, url);
            let displayed = StoreUrl::Postgres(given).to_string();
            prop_assert_eq!(displayed, shown(url));
        }
        Ok(StoreUrl::Sqlite(path)) => {
            prop_assert!(!path.as_os_str().is_empty());
            prop_assert!(url.starts_with("sqlite://"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn store_urls_from_any_text(url in text()) {
        check(&url)?;
    }

    #[test]
    fn store_urls_from_near_valid_text(url in NEAR_URL) {
        check(&url)?;
    }
}

/// The password of a URL that is refused stays out of the error, which is logged.
#[test]
fn a_refused_url_hides_its_password() {
    let err = "postgres://rota:s3cret@/rota"
        .parse::<StoreUrl>()
        .expect_err("no host")
        .to_string();
    assert!(!err.contains("s3cret"), "{err}");
    assert!(
        err.starts_with("invalid store URL \"postgres://rota:***@/rota\": no host"),
        "{err}"
    );
}

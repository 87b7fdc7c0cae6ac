//! The values a store is named and gives: store URLs, the pauses before asking an unavailable
//! store again, and the operators' commands.

use std::time::Duration;

use rota_store::{FIRST_RETRY_PAUSE, LONGEST_RETRY_PAUSE, OperatorCommand, RetryPauses, StoreUrl};

#[test]
fn parses_relative_and_absolute_sqlite_paths() {
    assert_eq!(
        "sqlite://rota.db".parse::<StoreUrl>().ok(),
        Some(StoreUrl::Sqlite("rota.db".into()))
    );
    assert_eq!(
        "sqlite:///var/lib/rota.db".parse::<StoreUrl>().ok(),
        Some(StoreUrl::Sqlite("/var/lib/rota.db".into()))
    );
}

#[test]
fn each_store_is_named_by_its_kind() {
    let sqlite: StoreUrl = "sqlite://rota.db".parse().expect("valid");
    let postgres: StoreUrl = "postgresql://rota@db/rota".parse().expect("valid");
    assert_eq!((sqlite.kind(), postgres.kind()), ("sqlite", "postgres"));
}

#[test]
fn parses_postgres_urls_and_hides_the_password() {
    for good in [
        "postgres://rota@127.0.0.1:5432/rota",
        "postgresql://rota:secret@db.example/rota?sslmode=disable",
    ] {
        assert_eq!(
            good.parse::<StoreUrl>().ok(),
            Some(StoreUrl::Postgres(good.to_string()))
        );
    }
    let url: StoreUrl = "postgres://rota:secret@db/rota".parse().expect("valid");
    assert_eq!(url.to_string(), "postgres://rota:***@db/rota");
}

#[test]
fn rejects_unknown_schemes_naming_the_value() {
    for bad in [
        "mysql://x",
        "rota.db",
        "sqlite://",
        "ftp://host/db",
        "postgres://",
        "postgres:///rota",
        "postgresql://rota@/rota",
    ] {
        let err = bad.parse::<StoreUrl>().expect_err(bad).to_string();
        assert!(err.contains(bad), "{err}");
        assert!(err.contains("sqlite://PATH"), "{err}");
        assert!(err.contains("postgres://USER@HOST"), "{err}");
    }
}

/// The pause before randomness for the `n`th attempt in a row (from 0).
fn base(n: u32) -> Duration {
    FIRST_RETRY_PAUSE
        .saturating_mul(2u32.saturating_pow(n))
        .min(LONGEST_RETRY_PAUSE)
}

#[test]
fn pauses_double_up_to_the_longest_with_up_to_as_much_again_at_random() {
    let mut pauses = RetryPauses::new();
    for n in 0..10 {
        let pause = pauses.next_pause();
        assert!(
            pause >= base(n) && pause < base(n) * 2,
            "attempt {n}: {pause:?} outside [{:?}, {:?})",
            base(n),
            base(n) * 2
        );
    }
}

#[test]
fn a_success_starts_the_pauses_over() {
    let mut pauses = RetryPauses::new();
    for _ in 0..5 {
        pauses.next_pause();
    }
    pauses.reset();
    let pause = pauses.next_pause();
    assert!(pause < FIRST_RETRY_PAUSE * 2, "{pause:?}");
}

#[test]
fn a_fleet_does_not_come_back_all_at_once() {
    let firsts: Vec<Duration> = (0..50).map(|_| RetryPauses::new().next_pause()).collect();
    let earliest = firsts.iter().min().copied().unwrap_or_default();
    let latest = firsts.iter().max().copied().unwrap_or_default();
    assert!(
        latest - earliest > Duration::from_millis(300),
        "50 first pauses all within {:?}",
        latest - earliest
    );
}

#[test]
fn command_names_read_back_and_nonsense_is_refused_by_name() {
    for command in OperatorCommand::ALL {
        assert_eq!(command.as_str().parse::<OperatorCommand>(), Ok(command));
    }
    let message = "reboot"
        .parse::<OperatorCommand>()
        .expect_err("not an operator command")
        .to_string();
    assert!(
        message.contains("\"reboot\"") && message.contains("unlock, retry"),
        "{message}"
    );
}

#[test]
fn a_postgres_url_is_shown_without_its_password_alone() {
    let shown = |url: &str| url.parse::<StoreUrl>().expect(url).to_string();
    assert_eq!(
        shown("postgres://rota:secret@db:5432/rota"),
        "postgres://rota:***@db:5432/rota"
    );
    assert_eq!(
        shown("postgres://rota@127.0.0.1/rota"),
        "postgres://rota@127.0.0.1/rota"
    );
    assert_eq!(shown("postgresql://db/rota"), "postgresql://db/rota");
}

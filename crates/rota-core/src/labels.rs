//! Kubernetes' rules for label keys and values, which rota checks before it sends a label (or
//! a selector, or a taint key) to the API server, so that a value the server would refuse stops
//! the agent at start instead of failing every drain.

/// A label key: an optional DNS subdomain prefix and `/`, then a name of 1-63 characters.
/// The error names the part that breaks the rule and the rule.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let valid = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !valid {
            return Err(format!(
                "the label key's prefix {prefix:?} must be a DNS subdomain: at most 253 \
                 characters, lowercase letters, digits, '-' and '.', each part 1-63 of them \
                 starting and ending with a letter or digit"
            ));
        }
    }
    if name.is_empty() || !is_label_word(name) {
        return Err(format!(
            "the label key's name {name:?} must be 1-63 characters: letters, digits, '-', '_' \
             and '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A label value: empty, or 1-63 characters by the rule of a key's name.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_word(value) {
        return Ok(());
    }
    Err(format!(
        "the label value {value:?} must be empty or 1-63 characters: letters, digits, '-', '_' \
         and '.', starting and ending with a letter or digit"
    ))
}

/// Kubernetes' `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters, not empty.
fn is_label_word(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kubernetes_rules() {
        for good in [
            "app",
            "rota.dev/maintenance",
            "a.b-c/x_y.z",
            &"k".repeat(63),
        ] {
            assert_eq!(check_label_key(good), Ok(()), "{good}");
        }
        for (bad, names) in [
            ("", "name \"\""),
            ("-app", "name \"-app\""),
            ("app-", "name \"app-\""),
            (&"k".repeat(64), "1-63"),
            ("Example.com/app", "prefix \"Example.com\""),
            ("/app", "prefix \"\""),
            ("rota.dev/", "name \"\""),
            ("a/b/c", "name \"b/c\""),
            (&format!("{}.dev/app", "p".repeat(64)), "DNS subdomain"),
        ] {
            let error = check_label_key(bad).expect_err(bad);
            assert!(error.contains(names), "{bad}: {error}");
        }
    }

    #[test]
    fn values_may_be_empty_but_follow_the_rule_of_names() {
        for good in ["", "true", "a-b_c.d", &"v".repeat(63)] {
            assert_eq!(check_label_value(good), Ok(()), "{good}");
        }
        for bad in ["-x", "x-", "has space", &"v".repeat(64)] {
            let error = check_label_value(bad).expect_err(bad);
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }
}

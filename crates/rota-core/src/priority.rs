//! Procedure priorities (docs/design.md §2 and §5).
//!
//! A priority is a two-digit value `00..99` following the systemd convention: the **lower**
//! value is the **more important** one, and the default is `99`.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A procedure priority, `00..99`; lower is more important.
///
/// `Ord` compares the numeric value, so the *smaller* priority is the *more important* one:
/// `Priority::new(0)? < Priority::new(99)?` reads "00 is more important than 99".
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Priority(u8);

/// A value that is not a valid priority.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid priority {input:?}: expected 00..99 (two digits, or an integer 0..99; lower is more important)"
)]
pub struct PriorityError {
    input: String,
}

impl PriorityError {
    fn new(input: impl Into<String>) -> Self {
        Self {
            input: input.into(),
        }
    }

    /// The rejected input, as it was given.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl Priority {
    /// The least important priority, used when a procedure names none.
    pub const DEFAULT: Priority = Priority(99);
    /// The most important priority.
    pub const MOST_IMPORTANT: Priority = Priority(0);
    /// The largest allowed value.
    pub const MAX_VALUE: u8 = 99;

    /// A priority from its numeric value, `0..=99`.
    pub fn new(value: u8) -> Result<Priority, PriorityError> {
        if value <= Self::MAX_VALUE {
            Ok(Priority(value))
        } else {
            Err(PriorityError::new(value.to_string()))
        }
    }

    /// The numeric value, `0..=99`.
    pub fn value(self) -> u8 {
        self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl From<Priority> for u8 {
    fn from(priority: Priority) -> u8 {
        priority.0
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}", self.0)
    }
}

impl FromStr for Priority {
    type Err = PriorityError;

    /// Accepts exactly one or two ASCII digits; signs, spaces and decimals are rejected so that
    /// marker file names (`/var/<priority>.maintenance`) have one spelling per priority.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits_only = !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits_only {
            return Err(PriorityError::new(s));
        }
        s.parse::<u8>()
            .map_err(|_| PriorityError::new(s))
            .and_then(|v| Priority::new(v).map_err(|_| PriorityError::new(s)))
    }
}

impl TryFrom<i64> for Priority {
    type Error = PriorityError;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u8::try_from(value)
            .ok()
            .and_then(|v| Priority::new(v).ok())
            .ok_or_else(|| PriorityError::new(value.to_string()))
    }
}

impl Serialize for Priority {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct PriorityVisitor;

impl Visitor<'_> for PriorityVisitor {
    type Value = Priority;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a priority: a two-digit string \"00\"..\"99\" or an integer 0..99")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Priority, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Priority, E> {
        Priority::try_from(v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Priority, E> {
        i64::try_from(v)
            .map_err(|_| PriorityError::new(v.to_string()))
            .and_then(Priority::try_from)
            .map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PriorityVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_one_or_two_digits() {
        for (input, value) in [
            ("00", 0),
            ("0", 0),
            ("7", 7),
            ("07", 7),
            ("42", 42),
            ("99", 99),
        ] {
            assert_eq!(
                input.parse::<Priority>().map(Priority::value),
                Ok(value),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_everything_else() {
        for input in [
            "100", "-1", "ab", "9 9", "", " 1", "1 ", "+1", "1.0", "007", "٣", "0x1",
        ] {
            let err = input.parse::<Priority>().expect_err(input);
            assert_eq!(err.input(), input);
        }
    }

    #[test]
    fn error_names_value_and_range() {
        let err = "ab".parse::<Priority>().expect_err("ab is invalid");
        assert_eq!(
            err.to_string(),
            "invalid priority \"ab\": expected 00..99 (two digits, or an integer 0..99; lower is more important)"
        );
    }

    #[test]
    fn new_and_try_from_bounds() {
        assert!(Priority::new(99).is_ok());
        assert!(Priority::new(100).is_err());
        assert_eq!(Priority::try_from(0_i64), Ok(Priority::MOST_IMPORTANT));
        assert_eq!(Priority::try_from(99_i64), Ok(Priority::DEFAULT));
        assert!(Priority::try_from(-1_i64).is_err());
        assert!(Priority::try_from(100_i64).is_err());
        assert!(Priority::try_from(i64::MAX).is_err());
        assert_eq!(Priority::default(), Priority::DEFAULT);
    }

    #[test]
    fn displays_two_digits() {
        assert_eq!(Priority::new(7).map(|p| p.to_string()), Ok("07".to_owned()));
        assert_eq!(Priority::DEFAULT.to_string(), "99");
    }

    #[test]
    fn smaller_is_more_important() {
        assert!(Priority::MOST_IMPORTANT < Priority::DEFAULT);
    }

    #[test]
    fn serde_string_and_integer() -> Result<(), serde_json::Error> {
        let p: Priority = serde_json::from_str("\"07\"")?;
        assert_eq!(p.value(), 7);
        assert_eq!(serde_json::to_string(&p)?, "\"07\"");
        let p: Priority = serde_json::from_str("42")?;
        assert_eq!(p.value(), 42);
        for bad in [
            "100",
            "-1",
            "\"100\"",
            "\"x\"",
            "1.5",
            "null",
            "18446744073709551615",
        ] {
            assert!(serde_json::from_str::<Priority>(bad).is_err(), "{bad}");
        }
        let err = serde_json::from_str::<Priority>("\"ab\"").expect_err("invalid");
        assert!(err.to_string().contains("invalid priority \"ab\""), "{err}");
        Ok(())
    }

    proptest! {
        #[test]
        fn display_round_trips(v in 0_u8..=99) {
            let p = Priority::new(v).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(p.to_string().parse::<Priority>(), Ok(p));
        }

        #[test]
        fn from_str_never_panics(s in ".{0,4}") {
            if let Ok(p) = s.parse::<Priority>() {
                prop_assert!(p.value() <= 99);
            }
        }
    }
}

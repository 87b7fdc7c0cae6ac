//! Exponential backoff after failed work (docs/design.md §6, Monogon BMDB's formula).

use std::time::Duration;

/// How long a process waits before it may try a node again after a failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffPolicy {
    /// The wait after the first failure.
    pub initial: Duration,
    /// The longest wait.
    pub maximum: Duration,
    /// The factor from one wait to the next.
    pub exponent: f64,
}

/// Absolute slack when deciding that a product is a whole number of seconds: `60 × 1.1` is
/// `66.00000000000001` in `f64` and must round up to 66, not 67.
const ABSOLUTE_TOLERANCE: f64 = 1e-9;
/// Relative slack for large products, where one `f64` rounding error exceeds the absolute slack.
const RELATIVE_TOLERANCE: f64 = 1e-12;

/// Rounds a duration up to whole seconds, saturating at the largest representable duration.
fn ceil_to_seconds(d: Duration) -> Duration {
    if d.subsec_nanos() == 0 {
        d
    } else {
        Duration::from_secs(d.as_secs().saturating_add(1))
    }
}

/// Rounds a non-negative number of seconds up, treating values within floating-point error of
/// a whole number as that number. Saturates at `u64::MAX` (the `as` cast saturates).
fn ceil_seconds_f64(x: f64) -> u64 {
    let nearest = x.round();
    let tolerance = ABSOLUTE_TOLERANCE.max(x * RELATIVE_TOLERANCE);
    if (x - nearest).abs() <= tolerance {
        nearest as u64
    } else {
        x.ceil() as u64
    }
}

impl BackoffPolicy {
    /// The policy without flags: a minute, doubling, at most an hour.
    pub const DEFAULT: BackoffPolicy = BackoffPolicy {
        initial: Duration::from_secs(60),
        maximum: Duration::from_secs(3600),
        exponent: 2.0,
    };

    /// The policy with docs/design.md §6's normalisation applied: an exponent below 1 (or NaN)
    /// becomes 1, an initial wait below 1 s becomes 1 s, and a maximum below the initial wait
    /// becomes the initial wait. Both durations are also rounded up to whole seconds, because
    /// backoff is stored and computed in whole seconds.
    pub fn normalized(self) -> Self {
        let exponent = if self.exponent.is_nan() || self.exponent < 1.0 {
            1.0
        } else {
            self.exponent
        };
        let initial = ceil_to_seconds(self.initial.max(Duration::from_secs(1)));
        let maximum = ceil_to_seconds(self.maximum).max(initial);
        BackoffPolicy {
            initial,
            maximum,
            exponent,
        }
    }

    /// The wait after a failure, given the previous wait (`None` for the first failure):
    /// `initial`, then `min(maximum, previous × exponent)` rounded up to whole seconds. A result
    /// that would be smaller than `previous` (through overflow or lost precision) is `maximum`.
    pub fn next(&self, previous: Option<Duration>) -> Duration {
        let policy = self.normalized();
        let Some(previous) = previous else {
            return policy.initial;
        };
        let previous = ceil_to_seconds(previous);
        let product = previous.as_secs() as f64 * policy.exponent;
        // NaN cannot occur (previous is finite, the exponent is ≥ 1) but is treated as overflow.
        if product.is_nan() || product >= policy.maximum.as_secs() as f64 {
            return policy.maximum;
        }
        let next = Duration::from_secs(ceil_seconds_f64(product)).min(policy.maximum);
        if next < previous {
            policy.maximum
        } else {
            next
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn sequence(policy: BackoffPolicy, len: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut previous = None;
        for _ in 0..len {
            let next = policy.next(previous);
            out.push(next.as_secs());
            previous = Some(next);
        }
        out
    }

    #[test]
    fn design_example_one_point_one() {
        let policy = BackoffPolicy {
            initial: secs(60),
            maximum: secs(120),
            exponent: 1.1,
        };
        assert_eq!(
            sequence(policy, 9),
            vec![60, 66, 73, 81, 90, 99, 109, 120, 120]
        );
    }

    #[test]
    fn design_example_doubling() {
        let policy = BackoffPolicy {
            initial: secs(1),
            maximum: secs(5),
            exponent: 2.0,
        };
        assert_eq!(sequence(policy, 5), vec![1, 2, 4, 5, 5]);
    }

    #[test]
    fn normalisation() {
        let n = BackoffPolicy {
            initial: Duration::from_millis(10),
            maximum: Duration::ZERO,
            exponent: 0.5,
        }
        .normalized();
        assert_eq!(
            n,
            BackoffPolicy {
                initial: secs(1),
                maximum: secs(1),
                exponent: 1.0
            }
        );
        let n = BackoffPolicy {
            initial: secs(30),
            maximum: secs(10),
            exponent: f64::NAN,
        }
        .normalized();
        assert_eq!(
            (n.initial, n.maximum, n.exponent),
            (secs(30), secs(30), 1.0)
        );
        let n = BackoffPolicy {
            initial: Duration::from_millis(1500),
            maximum: Duration::from_millis(9200),
            exponent: 3.0,
        }
        .normalized();
        assert_eq!((n.initial, n.maximum, n.exponent), (secs(2), secs(10), 3.0));
    }

    #[test]
    fn exponent_one_is_constant() {
        let policy = BackoffPolicy {
            initial: secs(7),
            maximum: secs(100),
            exponent: 1.0,
        };
        assert_eq!(sequence(policy, 3), vec![7, 7, 7]);
    }

    #[test]
    fn rounds_up_genuine_fractions() {
        let policy = BackoffPolicy {
            initial: secs(3),
            maximum: secs(100),
            exponent: 1.5,
        };
        assert_eq!(sequence(policy, 4), vec![3, 5, 8, 12]);
    }

    #[test]
    fn huge_values_saturate() {
        let policy = BackoffPolicy {
            initial: Duration::MAX,
            maximum: Duration::MAX,
            exponent: f64::INFINITY,
        };
        let n = policy.normalized();
        assert_eq!(n.initial, secs(u64::MAX));
        assert_eq!(policy.next(None), secs(u64::MAX));
        assert_eq!(policy.next(Some(Duration::MAX)), secs(u64::MAX));
        let policy = BackoffPolicy {
            initial: secs(1),
            maximum: Duration::MAX,
            exponent: 1e300,
        };
        assert_eq!(policy.next(Some(secs(2))), secs(u64::MAX));
    }

    #[test]
    fn previous_above_maximum_falls_back_to_maximum() {
        let policy = BackoffPolicy {
            initial: secs(1),
            maximum: secs(10),
            exponent: 2.0,
        };
        assert_eq!(policy.next(Some(secs(1000))), secs(10));
    }

    fn arb_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (0_u64..10_000, 0_u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            (any::<u64>(), 0_u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ]
    }

    fn arb_exponent() -> impl Strategy<Value = f64> {
        prop_oneof![0.0_f64..4.0, any::<f64>()]
    }

    proptest! {
        #[test]
        fn bounded_and_non_decreasing(
            initial in arb_duration(),
            maximum in arb_duration(),
            exponent in arb_exponent(),
            failures in 1_usize..40,
        ) {
            let policy = BackoffPolicy { initial, maximum, exponent };
            let normalized = policy.normalized();
            let mut previous: Option<Duration> = None;
            for _ in 0..failures {
                let next = policy.next(previous);
                prop_assert!(next >= Duration::from_secs(1));
                prop_assert!(next <= normalized.maximum);
                prop_assert_eq!(next.subsec_nanos(), 0);
                if let Some(previous) = previous {
                    prop_assert!(next >= previous, "{:?} after {:?}", next, previous);
                }
                previous = Some(next);
            }
        }

        #[test]
        fn never_panics(
            initial in arb_duration(),
            maximum in arb_duration(),
            exponent in arb_exponent(),
            previous in proptest::option::of(arb_duration()),
        ) {
            let policy = BackoffPolicy { initial, maximum, exponent };
            let next = policy.next(previous);
            prop_assert!(next <= policy.normalized().maximum);
        }

        #[test]
        fn normalized_is_idempotent(
            initial in arb_duration(),
            maximum in arb_duration(),
            exponent in arb_exponent(),
        ) {
            let once = BackoffPolicy { initial, maximum, exponent }.normalized();
            prop_assert_eq!(once.normalized(), once);
            prop_assert!(once.exponent >= 1.0);
            prop_assert!(once.initial >= Duration::from_secs(1));
            prop_assert!(once.maximum >= once.initial);
        }
    }
}

//! A fleet's slot groups rules: a limit for every group (`*=1`), limits of named groups
//! (`zone-a=2`), and whether the groups go in turn (`in-turn`), as one setting that the stores
//! keep as one line and [`schedule`](crate::schedule()) applies through [`Limits`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::labels::check_label_value;
use crate::schedule::Limits;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupRules {
    /// The limit of every group not named in `limits`.
    pub each: Option<u32>,
    pub limits: BTreeMap<String, u32>,
    pub in_turn: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "group rules {value:?}: {problem}; expected `;`-separated parts such as `*=1` (a limit for \
     every group), `zone-a=2` (a group's own limit, a label value) and `in-turn` (one group at a \
     time)"
)]
pub struct GroupRulesError {
    pub value: String,
    pub problem: String,
}

/// A group's limit above the fleet's concurrency: the concurrency would always hold its nodes
/// back first, so the limit is a mistake (a group meant to take every slot needs no limit).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{part} is above the concurrency of {concurrency}: a group's limit is a whole number from 0 \
     to the concurrency ({concurrency})"
)]
pub struct GroupLimitAboveConcurrency {
    /// The rule as written: `*=5` or `zone-a=5`.
    pub part: String,
    pub limit: u32,
    pub concurrency: u32,
}

impl GroupRules {
    /// Refuses a limit above `concurrency`, naming the first such rule.
    pub fn check(&self, concurrency: u32) -> Result<(), GroupLimitAboveConcurrency> {
        let each = self.each.map(|limit| ("*", limit));
        let named = self.limits.iter().map(|(g, l)| (g.as_str(), *l));
        match each
            .into_iter()
            .chain(named)
            .find(|(_, l)| *l > concurrency)
        {
            Some((group, limit)) => Err(GroupLimitAboveConcurrency {
                part: format!("{group}={limit}"),
                limit,
                concurrency,
            }),
            None => Ok(()),
        }
    }

    pub fn is_default(&self) -> bool {
        *self == GroupRules::default()
    }

    /// `limits` with these rules.
    pub fn limits(&self, limits: Limits) -> Limits {
        Limits {
            groups: self.limits.clone(),
            each_group: self.each,
            in_turn: self.in_turn,
            ..limits
        }
    }

    /// One part of the rules (`*=1`, `zone-a=2`, `in-turn`) added to these.
    pub fn add(&mut self, part: &str) -> Result<(), GroupRulesError> {
        let error = |problem: String| GroupRulesError {
            value: part.to_owned(),
            problem,
        };
        let part = part.trim();
        if part == "in-turn" {
            self.in_turn = true;
            return Ok(());
        }
        let Some((group, limit)) = part.split_once('=') else {
            return Err(error(format!("{part:?} is no rule")));
        };
        let limit: u32 = limit
            .trim()
            .parse()
            .map_err(|_| error(format!("{:?} is not a whole number of nodes", limit.trim())))?;
        match group.trim() {
            "*" => self.each = Some(limit),
            name => {
                check_label_value(name).map_err(|e| error(e.to_string()))?;
                if name.is_empty() {
                    return Err(error("a group has a name".into()));
                }
                self.limits.insert(name.to_owned(), limit);
            }
        }
        Ok(())
    }
}

impl FromStr for GroupRules {
    type Err = GroupRulesError;

    fn from_str(value: &str) -> Result<GroupRules, GroupRulesError> {
        let mut rules = GroupRules::default();
        for part in value.split(';').filter(|p| !p.trim().is_empty()) {
            rules.add(part).map_err(|e| GroupRulesError {
                value: value.to_owned(),
                problem: e.problem,
            })?;
        }
        Ok(rules)
    }
}

/// As the stores keep it: `*=1;zone-a=2;in-turn`, the named limits in the order of their text
/// (as the chart's `sortAlpha` renders the rules it lets the agents store).
impl fmt::Display for GroupRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(each) = self.each {
            parts.push(format!("*={each}"));
        }
        let mut named: Vec<String> = self
            .limits
            .iter()
            .map(|(g, l)| format!("{g}={l}"))
            .collect();
        named.sort();
        parts.extend(named);
        if self.in_turn {
            parts.push("in-turn".into());
        }
        f.write_str(&parts.join(";"))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rules_read_as_stored_and_bad_ones_say_what_is_expected() {
        let rules: GroupRules = "*=1; zone-a=2;in-turn".parse().expect("rules");
        assert_eq!(rules.each, Some(1));
        assert_eq!(rules.limits, BTreeMap::from([("zone-a".to_string(), 2)]));
        assert!(rules.in_turn);
        assert_eq!(rules.to_string(), "*=1;zone-a=2;in-turn");
        let limits = rules.limits(Limits::fleet(3));
        assert_eq!(limits.concurrency, 3);
        assert_eq!(limits.of_group("zone-a"), Some(2));
        assert_eq!(limits.of_group("zone-b"), Some(1));
        assert!(limits.in_turn);
        assert_eq!("".parse::<GroupRules>(), Ok(GroupRules::default()));
        for bad in ["*=x", "zone a=1", "zone-a", "=1", "*=-1", "in-turns"] {
            let error = bad.parse::<GroupRules>().expect_err(bad).to_string();
            assert!(
                error.contains(&format!("{bad:?}")) && error.contains("expected"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_limit_above_the_concurrency_is_refused_naming_the_rule() {
        let cases = [
            ("*=2;zone-a=3", 3, None),
            ("*=4", 3, Some("*=4 is above the concurrency of 3")),
            (
                "*=1;zone-b=5",
                3,
                Some("zone-b=5 is above the concurrency of 3"),
            ),
            ("in-turn", 1, None),
            ("zone-a=0", 1, None),
        ];
        for (rules, concurrency, refused) in cases {
            let rules: GroupRules = rules.parse().expect("rules");
            match (rules.check(concurrency), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(start)) => {
                    let text = e.to_string();
                    assert!(text.starts_with(start), "{text}");
                    assert!(text.contains("from 0 to the concurrency (3)"), "{text}");
                }
                (got, want) => panic!("{rules}: got {got:?}, wanted a refusal: {want:?}"),
            }
        }
    }

    proptest! {
        #[test]
        fn no_rule_above_the_concurrency_is_let_through(
            each in proptest::option::of(0u32..8),
            limits in proptest::collection::btree_map("[a-z]{1,4}", 0u32..8, 0..4),
            concurrency in 1u32..6,
        ) {
            let rules = GroupRules { each, limits, in_turn: false };
            let highest = rules.each.into_iter().chain(rules.limits.values().copied()).max();
            prop_assert_eq!(rules.check(concurrency).is_ok(), highest.is_none_or(|h| h <= concurrency));
        }

        #[test]
        fn rules_written_read_back_alike(
            each in proptest::option::of(0u32..5),
            limits in proptest::collection::btree_map("[a-z][a-z0-9.-]{0,8}[a-z0-9]", 0u32..5, 0..4),
            in_turn in any::<bool>(),
        ) {
            let rules = GroupRules { each, limits, in_turn };
            prop_assert_eq!(rules.to_string().parse::<GroupRules>(), Ok(rules));
        }

        #[test]
        fn any_text_is_read_or_refused_without_a_panic(text in ".{0,40}") {
            let _ = text.parse::<GroupRules>();
        }
    }
}

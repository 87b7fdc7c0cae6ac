//! Value parsers of the command line: each error names the value and what is allowed.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use humantime::Duration as HumanDuration;
use rota_core::{Batches, FailureBudget, GroupRules, Hours, Priority};
use rota_notify::{EventKind, Template, Webhook};
use rota_store::Millis;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub(super) fn non_empty_reason(value: &str) -> Result<String, String> {
    let reason = value.trim();
    if reason.is_empty() {
        Err("the reason must not be empty: say why the node's window is canceled".to_owned())
    } else {
        Ok(reason.to_owned())
    }
}

/// A point in time on the command line: an RFC 3339 timestamp, or a duration meaning "that long
/// before now".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    At(Millis),
    Ago(Duration),
}

impl TimeArg {
    /// The point in time as unix milliseconds, relative durations counted back from `now`.
    pub fn resolve(self, now: Millis) -> Millis {
        match self {
            TimeArg::At(at) => at,
            TimeArg::Ago(ago) => {
                let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
                now.saturating_sub(ago)
            }
        }
    }
}

impl FromStr for TimeArg {
    type Err = String;

    fn from_str(s: &str) -> Result<TimeArg, String> {
        let s = s.trim();
        if let Ok(at) = OffsetDateTime::parse(s, &Rfc3339) {
            let millis = at.unix_timestamp_nanos() / 1_000_000;
            return i64::try_from(millis)
                .map(TimeArg::At)
                .map_err(|_| format!("time {s:?} is out of range"));
        }
        humantime::parse_duration(s).map(TimeArg::Ago).map_err(|_| {
            format!(
                "invalid time {s:?}: expected an RFC 3339 timestamp (2024-05-01T10:00:00Z) \
                 or a duration ago (30m, 2h, 1d)"
            )
        })
    }
}

/// A duration such as `90s`, `10m`, `1h 30m` or `500ms`.
pub(super) fn duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{e}: expected a duration such as 30s, 10m, 1h30m or 500ms"))
}

/// A duration that shows as it reads (`10m`), for flags whose default is a constant.
pub(super) fn span(value: &str) -> Result<HumanDuration, String> {
    duration(value).map(HumanDuration::from)
}

pub(super) fn positive_span(value: &str) -> Result<HumanDuration, String> {
    positive_duration(value).map(HumanDuration::from)
}

pub(super) fn positive_duration(value: &str) -> Result<Duration, String> {
    match duration(value)? {
        d if d.is_zero() => Err("expected a duration above zero, such as 30s".into()),
        d => Ok(d),
    }
}

pub(super) fn concurrency(value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(k) if (1..=1000).contains(&k) => Ok(k),
        _ => Err("expected an integer 1..=1000".into()),
    }
}

pub(super) fn exponent(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 1.0 => Ok(x),
        _ => Err("expected a number ≥ 1, such as 2 or 1.5".into()),
    }
}

/// An absolute host path such as `/run/reboot-needed`.
pub(super) fn host_path(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err("expected an absolute path as seen on the host, such as /run/reboot-needed".into())
    }
}

/// One `--hours`: maintenance hours; the error names the value and what is allowed.
pub(super) fn hours(value: &str) -> Result<Hours, String> {
    value.parse().map_err(|e: rota_core::HoursError| {
        format!(
            "{e}; the syntax is [DAYS] HH:MM[:SS]-HH:MM[:SS] [TIME ZONE], like \"mon-fri 22:00-04:00 Europe/Berlin\""
        )
    })
}

pub(super) fn failure_budget(value: &str) -> Result<FailureBudget, String> {
    value
        .parse()
        .map_err(|e: rota_core::FailureBudgetError| e.to_string())
}

/// A slot group's name: a label value.
pub(super) fn group_name(value: &str) -> Result<String, String> {
    match rota_core::check_label_value(value) {
        Ok(()) if !value.is_empty() => Ok(value.to_owned()),
        Ok(()) => Err("expected a group name, such as zone-a".into()),
        Err(e) => Err(format!("{e}; expected a label value, such as zone-a")),
    }
}

/// The label that names a slot group: a label key.
pub(super) fn group_by(value: &str) -> Result<String, String> {
    rota_core::check_label_key(value)
        .map(|()| value.to_owned())
        .map_err(|e| format!("{e}; expected a label key, such as topology.kubernetes.io/zone"))
}

/// One `--group-limit`: `N` for every group, `NAME=N` for one; as the part of
/// `rota_core::GroupRules` it reads as (`*=N`, `NAME=N`).
pub(super) fn group_limit(value: &str) -> Result<String, String> {
    let part = match value.trim() {
        every if !every.contains('=') => format!("*={every}"),
        one => one.to_owned(),
    };
    GroupRules::default()
        .add(&part)
        .map(|()| part)
        .map_err(|e| format!("{e}; as a flag: N for every group or NAME=N, such as 1 or zone-a=2"))
}

/// The groups' rules of `--group-limit`s (each already read by [`group_limit`]) and
/// `--groups-in-turn`; `None` when neither is given (the stored rules stand).
pub(crate) fn group_rules(limits: &[String], in_turn: bool) -> Option<GroupRules> {
    if limits.is_empty() && !in_turn {
        return None;
    }
    let mut rules = GroupRules {
        in_turn,
        ..GroupRules::default()
    };
    for part in limits {
        // The flag's parser already refused a part that does not read.
        let _ = rules.add(part);
    }
    Some(rules)
}

pub(super) fn batches(value: &str) -> Result<Batches, String> {
    value
        .parse()
        .map_err(|e: rota_core::BatchesError| e.to_string())
}

pub(super) fn json_webhook(value: &str) -> Result<Webhook, String> {
    Webhook::json(value).map_err(|e| e.to_string())
}

pub(super) fn slack_webhook(value: &str) -> Result<Webhook, String> {
    Webhook::slack(value).map_err(|e| e.to_string())
}

/// `EVENT=TEMPLATE`, such as `failed=:x: {node}: {cause}`.
pub(super) fn notify_template(value: &str) -> Result<(EventKind, Template), String> {
    let Some((event, template)) = value.split_once('=') else {
        return Err(format!(
            "expected EVENT=TEMPLATE, such as failed=\"{{node}} failed: {{cause}}\", not {value:?}"
        ));
    };
    let event = event.parse::<EventKind>().map_err(|e| e.to_string())?;
    let template = template.parse::<Template>().map_err(|e| e.to_string())?;
    Ok((event, template))
}

pub(super) fn priority(value: &str) -> Result<Priority, String> {
    value.parse::<Priority>().map_err(|e| e.to_string())
}

/// A `KEY=VALUE` label.
pub(super) fn label(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((key, val)) if !key.is_empty() => Ok((key.to_string(), val.to_string())),
        _ => Err(format!(
            "expected KEY=VALUE, such as pool=gpu, not {value:?}"
        )),
    }
}

/// The labels of one `--cordon-label` or `--uncordon-label`.
#[derive(Debug, Clone)]
pub struct NodeLabelArg(pub Vec<(String, String)>);

/// Node labels as Kubernetes takes them: checked here, so that the API server never refuses
/// a drain's cordon for them.
pub(super) fn node_labels(value: &str) -> Result<NodeLabelArg, String> {
    rota_kube_actions::parse_labels(value)
        .map(NodeLabelArg)
        .map_err(|e| e.to_string())
}

/// A shell command that says something.
pub(super) fn command_text(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Err(
            "the command is empty; give a shell command, such as \"! needs-restarting -r\"".into(),
        );
    }
    Ok(value.to_owned())
}

/// A taint's key, checked by the rules of label keys.
pub(super) fn taint_key(value: &str) -> Result<String, String> {
    rota_kube_actions::parse_taint_key(value).map_err(|e| e.to_string())
}

/// The label selector of `--drain-wait-completed-selector`, checked at start and matched by
/// the drain against each pod it lists.
pub(super) fn wait_completed_selector(value: &str) -> Result<rota_kube_actions::Selector, String> {
    rota_kube_actions::Selector::parse(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_timestamps_or_durations_ago() {
        assert_eq!(
            "2024-05-01T10:00:00Z".parse::<TimeArg>(),
            Ok(TimeArg::At(1_714_557_600_000))
        );
        assert_eq!(
            "2024-05-01T12:00:00.5+02:00".parse::<TimeArg>(),
            Ok(TimeArg::At(1_714_557_600_500))
        );
        assert_eq!(
            "2h".parse::<TimeArg>(),
            Ok(TimeArg::Ago(Duration::from_secs(7200)))
        );
        assert_eq!(
            "1h 30m".parse::<TimeArg>(),
            Ok(TimeArg::Ago(Duration::from_secs(5400)))
        );
        assert_eq!(
            TimeArg::Ago(Duration::from_secs(60)).resolve(100_000),
            40_000
        );
        assert_eq!(TimeArg::At(5).resolve(100_000), 5);
        for bad in ["yesterdayish", "", "2024-13-01T00:00:00Z", "-5m"] {
            let err = bad.parse::<TimeArg>().expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(err.contains("RFC 3339"), "{err}");
        }
    }

    #[test]
    fn reasons_must_say_something() {
        assert_eq!(
            non_empty_reason(" disk swapped "),
            Ok("disk swapped".into())
        );
        assert!(non_empty_reason("").is_err());
        assert!(non_empty_reason("  \t").is_err());
    }

    /// Untrusted input (issue 29): every value parser of the command line meets arbitrary text
    /// and the near misses of its own syntax. None may panic; each refusal says what is
    /// allowed (clap adds the flag and the value, checked through `rota history` below).
    mod untrusted {
        use clap::Parser;
        use proptest::prelude::*;

        use super::super::*;
        use crate::cli::Cli;

        /// Cases per property.
        const CASES: u32 = 1000;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                prop::collection::vec(any::<u8>(), 0..32)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
                // Durations, times, hours, templates and labels, right and nearly right.
                "[0-9]{1,21}(ns|ms|s|m|h|d|w|y|x| )?([0-9]{1,3}[mh])?",
                "[0-9]{4}-[0-9]{2}-[0-9]{2}(T| )[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:?[0-9]{2})?",
                "(mon-fri |\\* )?[0-9]{2}:[0-9]{2}-[0-9]{2}:[0-9]{2}( Europe/Berlin)?",
                "(failed|reboot|drained)?=?[a-z {}:]{0,8}",
                "[a-z./]{0,6}=?[a-z-]{0,4}(,[a-z]=)?",
            ]
        }

        type ValueParser = fn(&str) -> Result<(), String>;

        /// The value parsers of `rota agent`, `rota mop submit` and the operator commands.
        const PARSERS: [(&str, ValueParser); 21] = [
            ("duration", |v| duration(v).map(drop)),
            ("span", |v| span(v).map(drop)),
            ("positive_span", |v| positive_span(v).map(drop)),
            ("positive_duration", |v| positive_duration(v).map(drop)),
            ("time", |v| v.parse::<TimeArg>().map(drop)),
            ("concurrency", |v| concurrency(v).map(drop)),
            ("exponent", |v| exponent(v).map(drop)),
            ("host_path", |v| host_path(v).map(drop)),
            ("hours", |v| hours(v).map(drop)),
            ("failure_budget", |v| failure_budget(v).map(drop)),
            ("batches", |v| batches(v).map(drop)),
            ("group_name", |v| group_name(v).map(drop)),
            ("group_by", |v| group_by(v).map(drop)),
            ("group_limit", |v| group_limit(v).map(drop)),
            ("notify_template", |v| notify_template(v).map(drop)),
            ("priority", |v| priority(v).map(drop)),
            ("label", |v| label(v).map(drop)),
            ("node_labels", |v| node_labels(v).map(drop)),
            ("command_text", |v| command_text(v).map(drop)),
            ("taint_key", |v| taint_key(v).map(drop)),
            ("wait_completed_selector", |v| {
                wait_completed_selector(v).map(drop)
            }),
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]

            #[test]
            fn value_parsers_refuse_saying_what_is_allowed(
                parser in 0..PARSERS.len(),
                value in text(),
            ) {
                let (name, parse) = PARSERS[parser];
                if let Err(message) = parse(&value) {
                    prop_assert!(
                        ["expected", "such as", "must", "write {{"].iter().any(|hint| message.contains(hint)),
                        "{name}: {message:?} does not say what is allowed"
                    );
                }
            }

            #[test]
            fn clap_names_the_flag_and_the_value(
                flag in prop::sample::select(&["--store", "--since", "--until", "--process", "--event"][..]),
                value in text(),
            ) {
                let arg = format!("{flag}={value}");
                if let Err(e) = Cli::try_parse_from(["rota", "history", arg.as_str()]) {
                    let message = e.render().to_string();
                    // clap's rendering drops control characters; rota's part quotes them (times
                    // as read, trimmed).
                    prop_assert!(
                        message.contains(flag)
                            && (message.contains(&format!("'{value}'"))
                                || message.contains(&format!("{value:?}"))
                                || message.contains(&format!("{:?}", value.trim()))),
                        "{message:?} does not name {flag} and {value:?}"
                    );
                }
            }

            #[test]
            fn clap_names_the_node_and_the_rule(node in text()) {
                if let Err(e) = Cli::try_parse_from(["rota", "history", "--", node.as_str()]) {
                    let message = e.render().to_string();
                    prop_assert!(
                        message.contains("[NODE]") && message.contains("invalid node name"),
                        "{message:?} does not name the node"
                    );
                }
            }
        }
    }
}

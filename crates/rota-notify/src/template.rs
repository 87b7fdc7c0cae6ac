//! Message templates: text with `{node}`, `{process}`, `{event}`, `{cause}`, `{slot}` and
//! `{at}` placeholders, checked when parsed so that a typo fails at start-up, not at 3 a.m.
//! `{{` and `}}` stand for literal braces.

use std::fmt;
use std::str::FromStr;

use crate::{Event, EventKind, NotifyError};

/// What a placeholder is filled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Node,
    Process,
    Event,
    /// The cause, or nothing when the event has none.
    Cause,
    /// The slot number, or nothing when the node holds none.
    Slot,
    /// The event's time in RFC 3339, UTC, to the second.
    At,
}

const FIELDS: [(&str, Field); 6] = [
    ("node", Field::Node),
    ("process", Field::Process),
    ("event", Field::Event),
    ("cause", Field::Cause),
    ("slot", Field::Slot),
    ("at", Field::At),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
}

/// A parsed message template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

impl Template {
    /// The message for `event`.
    pub fn render(&self, event: &Event) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Field(Field::Node) => out.push_str(event.node.as_str()),
                Part::Field(Field::Process) => out.push_str(&event.process.to_string()),
                Part::Field(Field::Event) => out.push_str(event.kind.as_str()),
                Part::Field(Field::Cause) => out.push_str(event.cause.as_deref().unwrap_or("")),
                Part::Field(Field::Slot) => {
                    if let Some(slot) = event.slot {
                        out.push_str(&slot.to_string());
                    }
                }
                Part::Field(Field::At) => {
                    out.push_str(&event.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
                }
            }
        }
        out
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl FromStr for Template {
    type Err = NotifyError;

    fn from_str(template: &str) -> Result<Self, Self::Err> {
        let unmatched = |brace, at| NotifyError::UnmatchedBrace {
            template: template.to_owned(),
            brace,
            at,
        };
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.next_if(|&(_, c)| c == '{').is_some() => text.push('{'),
                '}' if chars.next_if(|&(_, c)| c == '}').is_some() => text.push('}'),
                '}' => return Err(unmatched('}', at)),
                '{' => {
                    let rest = &template[at + 1..];
                    let name = &rest[..rest.find('}').ok_or_else(|| unmatched('{', at))?];
                    let field = FIELDS
                        .iter()
                        .find(|(known, _)| *known == name)
                        .map(|&(_, field)| field)
                        .ok_or_else(|| NotifyError::UnknownPlaceholder {
                            template: template.to_owned(),
                            placeholder: name.to_owned(),
                        })?;
                    // Skip the name and its closing brace.
                    for _ in 0..=name.chars().count() {
                        chars.next();
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Field(field));
                }
                other => text.push(other),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template {
            source: template.to_owned(),
            parts,
        })
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// One template per event kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Templates {
    drain_started: Template,
    reboot: Template,
    finished: Template,
    failed: Template,
    postponed: Template,
}

impl Templates {
    /// The built-in message for `kind`.
    pub fn default_for(kind: EventKind) -> &'static str {
        match kind {
            EventKind::DrainStarted => "rota: draining {node} for {process} (slot {slot})",
            EventKind::Reboot => "rota: rebooting {node} for {process}",
            EventKind::Finished => "rota: {node} finished {process}",
            EventKind::Failed => "rota: {node} failed {process}: {cause}",
            EventKind::Postponed => "rota: {node} postponed {process}: {cause}",
        }
    }

    /// The template for `kind`.
    pub fn get(&self, kind: EventKind) -> &Template {
        match kind {
            EventKind::DrainStarted => &self.drain_started,
            EventKind::Reboot => &self.reboot,
            EventKind::Finished => &self.finished,
            EventKind::Failed => &self.failed,
            EventKind::Postponed => &self.postponed,
        }
    }

    /// Replaces the template for `kind`.
    pub fn set(&mut self, kind: EventKind, template: Template) {
        let slot = match kind {
            EventKind::DrainStarted => &mut self.drain_started,
            EventKind::Reboot => &mut self.reboot,
            EventKind::Finished => &mut self.finished,
            EventKind::Failed => &mut self.failed,
            EventKind::Postponed => &mut self.postponed,
        };
        *slot = template;
    }

    /// The message for `event`, by the template of its kind.
    pub fn render(&self, event: &Event) -> String {
        self.get(event.kind).render(event)
    }
}

impl Default for Templates {
    fn default() -> Self {
        let parse = |kind| {
            Templates::default_for(kind)
                .parse()
                .expect("the built-in templates use known placeholders only")
        };
        Templates {
            drain_started: parse(EventKind::DrainStarted),
            reboot: parse(EventKind::Reboot),
            finished: parse(EventKind::Finished),
            failed: parse(EventKind::Failed),
            postponed: parse(EventKind::Postponed),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use rota_core::{NodeName, Process};

    fn event(kind: EventKind) -> Event {
        Event {
            kind,
            node: NodeName::new("node-1").unwrap(),
            process: Process::mop("kernel").unwrap(),
            cause: Some("script exited 3".to_owned()),
            slot: Some(2),
            at: "2026-11-29T10:15:30.250Z".parse().unwrap(),
        }
    }

    fn render(template: &str, event: &Event) -> String {
        template.parse::<Template>().unwrap().render(event)
    }

    #[test]
    fn fills_every_placeholder() {
        assert_eq!(
            render(
                "{node}|{process}|{event}|{cause}|{slot}|{at}",
                &event(EventKind::Failed)
            ),
            "node-1|mop/kernel|failed|script exited 3|2|2026-11-29T10:15:30Z"
        );
    }

    #[test]
    fn missing_values_render_empty_and_braces_escape() {
        let mut e = event(EventKind::Finished);
        e.cause = None;
        e.slot = None;
        assert_eq!(
            render("{{{node}}} [{cause}] [{slot}] }}{{ ünï {event}", &e),
            "{node-1} [] [] }{ ünï finished"
        );
        assert_eq!(render("", &e), "");
    }

    #[test]
    fn unknown_placeholders_are_named_with_the_allowed_ones() {
        let err = "{node} is {state}".parse::<Template>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid template \"{node} is {state}\": unknown placeholder {state}; expected \
             {node}, {process}, {event}, {cause}, {slot} or {at} (write {{ and }} for literal \
             braces)"
        );
        assert!(matches!(
            "{}".parse::<Template>(),
            Err(NotifyError::UnknownPlaceholder { placeholder, .. }) if placeholder.is_empty()
        ));
    }

    #[test]
    fn unmatched_braces_are_located() {
        assert_eq!(
            "ab {node".parse::<Template>().unwrap_err().to_string(),
            "invalid template \"ab {node\": unmatched '{' at byte 3; write {{ and }} for \
             literal braces"
        );
        assert!(matches!(
            "x } y".parse::<Template>(),
            Err(NotifyError::UnmatchedBrace {
                brace: '}',
                at: 2,
                ..
            })
        ));
    }

    #[test]
    fn default_templates_per_kind_and_overrides() {
        let mut templates = Templates::default();
        assert_eq!(
            templates.render(&event(EventKind::DrainStarted)),
            "rota: draining node-1 for mop/kernel (slot 2)"
        );
        assert_eq!(
            templates.render(&event(EventKind::Reboot)),
            "rota: rebooting node-1 for mop/kernel"
        );
        assert_eq!(
            templates.render(&event(EventKind::Finished)),
            "rota: node-1 finished mop/kernel"
        );
        assert_eq!(
            templates.render(&event(EventKind::Failed)),
            "rota: node-1 failed mop/kernel: script exited 3"
        );
        assert_eq!(
            templates.render(&event(EventKind::Postponed)),
            "rota: node-1 postponed mop/kernel: script exited 3"
        );
        templates.set(EventKind::Failed, ":x: {node}".parse().unwrap());
        assert_eq!(templates.render(&event(EventKind::Failed)), ":x: node-1");
        assert_eq!(
            templates.get(EventKind::Finished).as_str(),
            Templates::default_for(EventKind::Finished)
        );
    }

    #[test]
    fn event_kinds_parse_by_name() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>().unwrap(), kind);
        }
        assert_eq!(
            "drained".parse::<EventKind>().unwrap_err().to_string(),
            "unknown notification event \"drained\"; expected drain-started, reboot, finished, \
             failed or postponed"
        );
    }
}

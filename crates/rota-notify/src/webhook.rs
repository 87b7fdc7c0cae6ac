//! Where notifications go, and what is sent there.

use std::fmt;

use reqwest::Url;
use serde::Serialize;

use crate::{Event, NotifyError};

/// The payload a webhook receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookKind {
    /// Every field of the event (`at` in RFC 3339), plus the rendered message:
    /// `{"event", "node", "process", "cause", "slot", "at", "message"}`.
    Json,
    /// Slack's incoming-webhook payload `{"text": message}`, which Mattermost, Rocket.Chat and
    /// others accept too.
    Slack,
}

/// A validated webhook target.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook {
    kind: WebhookKind,
    url: Url,
}

impl Webhook {
    /// A webhook of `kind` at `url`, which must be an absolute http:// or https:// URL.
    pub fn new(kind: WebhookKind, url: &str) -> Result<Webhook, NotifyError> {
        let invalid = |reason: String| NotifyError::Url {
            value: url.to_owned(),
            reason,
        };
        let parsed = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "scheme {:?} is not allowed",
                parsed.scheme()
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid("it has no host".to_owned()));
        }
        Ok(Webhook { kind, url: parsed })
    }

    /// A generic JSON webhook.
    pub fn json(url: &str) -> Result<Webhook, NotifyError> {
        Webhook::new(WebhookKind::Json, url)
    }

    /// A Slack-compatible webhook.
    pub fn slack(url: &str) -> Result<Webhook, NotifyError> {
        Webhook::new(WebhookKind::Slack, url)
    }

    pub fn kind(&self) -> WebhookKind {
        self.kind
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The target for logs and errors: scheme, host and port only, since Slack-style webhook
    /// URLs carry their secret in the path.
    pub fn target(&self) -> String {
        let host = self.url.host_str().unwrap_or_default();
        match self.url.port() {
            Some(port) => format!("{}://{host}:{port}", self.url.scheme()),
            None => format!("{}://{host}", self.url.scheme()),
        }
    }

    /// The JSON body for `event`, whose rendered message is `message`.
    pub(crate) fn payload<'a>(&self, event: &'a Event, message: &'a str) -> Payload<'a> {
        match self.kind {
            WebhookKind::Json => Payload::Json {
                event: event.kind.as_str(),
                node: event.node.as_str(),
                process: event.process.to_string(),
                cause: event.cause.as_deref(),
                slot: event.slot,
                at: event.at.to_string(),
                message,
            },
            WebhookKind::Slack => Payload::Slack { text: message },
        }
    }
}

impl fmt::Debug for Webhook {
    /// Without the URL's path, which may hold a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("kind", &self.kind)
            .field("target", &self.target())
            .finish()
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Payload<'a> {
    Json {
        event: &'a str,
        node: &'a str,
        process: String,
        cause: Option<&'a str>,
        slot: Option<u32>,
        at: String,
        message: &'a str,
    },
    Slack {
        text: &'a str,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_only() {
        assert!(Webhook::json("http://127.0.0.1:8080/hook").is_ok());
        assert!(Webhook::slack("https://hooks.example.com/services/T0/B0/secret").is_ok());
        assert_eq!(
            Webhook::json("ftp://example.com/x")
                .unwrap_err()
                .to_string(),
            "invalid webhook URL \"ftp://example.com/x\": scheme \"ftp\" is not allowed; \
             expected an http:// or https:// URL"
        );
        assert_eq!(
            Webhook::slack("hooks.example.com/x")
                .unwrap_err()
                .to_string(),
            "invalid webhook URL \"hooks.example.com/x\": relative URL without a base; \
             expected an http:// or https:// URL"
        );
        assert!(
            Webhook::json("http://")
                .unwrap_err()
                .to_string()
                .starts_with("invalid webhook URL \"http://\": ")
        );
    }

    #[test]
    fn logs_show_no_secret_path() {
        let hook =
            Webhook::slack("https://hooks.example.com:8443/services/T0/B0/secret?x=1").unwrap();
        assert_eq!(hook.target(), "https://hooks.example.com:8443");
        assert!(!format!("{hook:?}").contains("secret"));
    }
}

//! The crate's one error type.

/// A notification setting that cannot be used, or a delivery that failed. Configuration
/// errors name the value and what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// A webhook URL that does not parse, or is not http(s).
    #[error("invalid webhook URL {value:?}: {reason}; expected an http:// or https:// URL")]
    Url {
        /// The rejected URL.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A template with a placeholder this crate does not fill.
    #[error(
        "invalid template {template:?}: unknown placeholder {{{placeholder}}}; expected {{node}}, {{process}}, {{event}}, {{cause}}, {{slot}} or {{at}} (write {{{{ and }}}} for literal braces)"
    )]
    UnknownPlaceholder {
        /// The whole template.
        template: String,
        /// The name between the braces.
        placeholder: String,
    },
    /// A template with a `{` or `}` that opens or closes no placeholder.
    #[error(
        "invalid template {template:?}: unmatched {brace:?} at byte {at}; write {{{{ and }}}} for literal braces"
    )]
    UnmatchedBrace {
        /// The whole template.
        template: String,
        /// The brace without a partner.
        brace: char,
        /// Its byte offset in the template.
        at: usize,
    },
    /// An event kind name that is not one of the four.
    #[error(
        "unknown notification event {value:?}; expected drain-started, reboot, finished, failed or postponed"
    )]
    EventKind {
        /// The rejected name.
        value: String,
    },
    /// A queue of size zero, which could hold no event.
    #[error("invalid notification queue size 0; expected at least 1")]
    QueueSize,
    /// The HTTP client could not be built (its TLS setup failed).
    #[error("cannot build the webhook HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// A request that failed before a response: connection refused, timeout, TLS.
    #[error("webhook request to {target} failed: {source}")]
    Request {
        /// The webhook, without path or query (they may hold a secret).
        target: String,
        #[source]
        source: reqwest::Error,
    },
    /// A webhook that answered with a status other than 2xx.
    #[error("webhook {target} answered {status}")]
    Status {
        /// The webhook, without path or query (they may hold a secret).
        target: String,
        /// The status it answered.
        status: reqwest::StatusCode,
    },
}

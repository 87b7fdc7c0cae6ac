//! The FleetLock protocol (coreos/zincati `docs/development/fleetlock/protocol.md`): what a
//! request must carry, and the errors a server answers with. Every error is JSON
//! `{"kind": …, "value": …}`, and its `kind` is one of [`Kind`]'s few values, since Zincati
//! uses it as a metric label.

use axum::http::{HeaderMap, StatusCode, header};
use rota_core::fleetlock::Refusal;
use serde::{Deserialize, Serialize};

/// The header every request must carry, with the value `true`, so that a request sent to the
/// server through an unintended redirection is refused.
pub const PROTOCOL_HEADER: &str = "fleet-lock-protocol";
/// The largest body accepted: Zincati's is about 100 bytes.
pub const MAX_BODY: usize = 16 * 1024;
/// The longest client id accepted, in bytes: Zincati's is 32 hexadecimal digits.
pub const MAX_ID: usize = 256;

/// Who asks: the body's `client_params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientParams {
    /// The client's case-sensitive id (Zincati's app-specific machine id).
    pub id: String,
    /// The client's reboot group, `^[a-zA-Z0-9.-]+$` (Zincati's default is `default`).
    pub group: String,
}

#[derive(Deserialize)]
struct Body {
    client_params: Params,
}

#[derive(Deserialize)]
struct Params {
    id: String,
    group: String,
}

/// Every `kind` the server answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The request has no `fleet-lock-protocol: true` header.
    MissingProtocolHeader,
    /// The body is declared as something else than JSON.
    UnsupportedContentType,
    BodyTooLarge,
    /// The body is not JSON, or not the protocol's object.
    MalformedBody,
    InvalidId,
    InvalidGroup,
    /// The group's token is missing or wrong.
    Unauthorized,
    /// The id maps to no node.
    UnknownId,
    /// The request comes from another host than the id's.
    ForeignId,
    /// Neither of the protocol's two endpoints.
    NotFound,
    MethodNotAllowed,
    /// The lock is not granted for now; the client asks again later.
    Refused(Refusal),
    /// A `steady-state` from a host whose boot id has not changed since its lock was granted.
    NotRebooted,
    /// The store cannot be reached: nobody is granted anything, the client retries.
    StoreUnavailable,
    Internal,
}

impl Kind {
    /// Every kind: a closed, small set.
    pub fn all() -> Vec<Kind> {
        let mut all = vec![
            Kind::MissingProtocolHeader,
            Kind::UnsupportedContentType,
            Kind::BodyTooLarge,
            Kind::MalformedBody,
            Kind::InvalidId,
            Kind::InvalidGroup,
            Kind::Unauthorized,
            Kind::UnknownId,
            Kind::ForeignId,
            Kind::NotFound,
            Kind::MethodNotAllowed,
            Kind::NotRebooted,
            Kind::StoreUnavailable,
            Kind::Internal,
        ];
        all.extend(Refusal::ALL.map(Kind::Refused));
        all
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::MissingProtocolHeader => "missing_protocol_header",
            Kind::UnsupportedContentType => "unsupported_content_type",
            Kind::BodyTooLarge => "body_too_large",
            Kind::MalformedBody => "malformed_body",
            Kind::InvalidId => "invalid_id",
            Kind::InvalidGroup => "invalid_group",
            Kind::Unauthorized => "unauthorized",
            Kind::UnknownId => "unknown_id",
            Kind::ForeignId => "foreign_id",
            Kind::NotFound => "not_found",
            Kind::MethodNotAllowed => "method_not_allowed",
            Kind::Refused(refusal) => refusal.kind(),
            Kind::NotRebooted => "not_rebooted",
            Kind::StoreUnavailable => "store_unavailable",
            Kind::Internal => "internal",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Kind::MissingProtocolHeader
            | Kind::MalformedBody
            | Kind::InvalidId
            | Kind::InvalidGroup => StatusCode::BAD_REQUEST,
            Kind::UnsupportedContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Kind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::ForeignId => StatusCode::FORBIDDEN,
            Kind::UnknownId | Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Kind::Refused(_) | Kind::NotRebooted => StatusCode::CONFLICT,
            Kind::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answer: its kind, and a description naming the value at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub kind: Kind,
    pub value: String,
}

/// The protocol's error body.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub struct ErrorBody {
    pub kind: String,
    pub value: String,
}

impl Rejection {
    pub fn new(kind: Kind, value: impl Into<String>) -> Rejection {
        Rejection {
            kind,
            value: value.into(),
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            kind: self.kind.as_str().to_owned(),
            value: self.value.clone(),
        }
    }
}

/// Whether a group is the protocol's `^[a-zA-Z0-9.-]+$`.
pub fn valid_group(group: &str) -> bool {
    !group.is_empty()
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

/// Checks a request's headers and body and reads who asks. Zincati sends no content type and
/// curl's `-d` (the protocol's own example) sends a form's: both are read as JSON, as is JSON
/// itself; any other declared type is refused.
pub fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<ClientParams, Rejection> {
    match headers.get(PROTOCOL_HEADER).map(|v| v.to_str()) {
        Some(Ok(value)) if value.trim() == "true" => {}
        Some(_) => {
            return Err(Rejection::new(
                Kind::MissingProtocolHeader,
                format!("the {PROTOCOL_HEADER} header must be \"true\""),
            ));
        }
        None => {
            return Err(Rejection::new(
                Kind::MissingProtocolHeader,
                format!("a FleetLock request must carry the header \"{PROTOCOL_HEADER}: true\""),
            ));
        }
    }
    if let Some(declared) = headers.get(header::CONTENT_TYPE) {
        let declared = declared.to_str().unwrap_or("");
        let essence = declared
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !matches!(
            essence.as_str(),
            "application/json" | "application/x-www-form-urlencoded"
        ) {
            return Err(Rejection::new(
                Kind::UnsupportedContentType,
                format!("content type {declared:?} is not JSON; send application/json, or none"),
            ));
        }
    }
    if body.len() > MAX_BODY {
        return Err(too_large());
    }
    let parsed: Body = serde_json::from_slice(body).map_err(|e| {
        Rejection::new(
            Kind::MalformedBody,
            format!(
                "the body is not a FleetLock request ({e}); expected {{\"client_params\": {{\"id\": \"…\", \"group\": \"…\"}}}}"
            ),
        )
    })?;
    let Params { id, group } = parsed.client_params;
    if id.is_empty() || id.len() > MAX_ID {
        return Err(Rejection::new(
            Kind::InvalidId,
            format!(
                "client id of {} bytes; it must have 1 to {MAX_ID}",
                id.len()
            ),
        ));
    }
    if !valid_group(&group) {
        return Err(Rejection::new(
            Kind::InvalidGroup,
            format!("group {group:?} must match ^[a-zA-Z0-9.-]+$"),
        ));
    }
    Ok(ClientParams { id, group })
}

pub fn too_large() -> Rejection {
    Rejection::new(
        Kind::BodyTooLarge,
        format!("the body is larger than {MAX_BODY} bytes"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// Zincati's body: `serde_json::to_string_pretty` of its client params.
    const ZINCATI_BODY: &str = "{\n  \"client_params\": {\n    \"id\": \"975228d46dc94622b9bbe16671e2b58d\",\n    \"group\": \"default\"\n  }\n}";

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn kind(headers: &HeaderMap, body: &str) -> Option<&'static str> {
        read_request(headers, body.as_bytes())
            .err()
            .map(|r| r.kind.as_str())
    }

    #[test]
    fn zincatis_request_is_read() {
        let params = read_request(
            &headers(&[(PROTOCOL_HEADER, "true")]),
            ZINCATI_BODY.as_bytes(),
        );
        assert_eq!(
            params,
            Ok(ClientParams {
                id: "975228d46dc94622b9bbe16671e2b58d".into(),
                group: "default".into()
            })
        );
    }

    #[test]
    fn bad_requests_are_refused_with_a_kind_naming_the_problem() {
        let ok = headers(&[(PROTOCOL_HEADER, "true")]);
        let cases: &[(HeaderMap, String, &str)] = &[
            (
                HeaderMap::new(),
                ZINCATI_BODY.into(),
                "missing_protocol_header",
            ),
            (
                headers(&[(PROTOCOL_HEADER, "false")]),
                ZINCATI_BODY.into(),
                "missing_protocol_header",
            ),
            (
                headers(&[(PROTOCOL_HEADER, "true"), ("content-type", "text/plain")]),
                ZINCATI_BODY.into(),
                "unsupported_content_type",
            ),
            (ok.clone(), "x".repeat(MAX_BODY + 1), "body_too_large"),
            (ok.clone(), "not json".into(), "malformed_body"),
            (
                ok.clone(),
                "{\"client_params\": {\"id\": \"a\"}}".into(),
                "malformed_body",
            ),
            (
                ok.clone(),
                "{\"client_params\": {\"id\": \"\", \"group\": \"default\"}}".into(),
                "invalid_id",
            ),
            (
                ok.clone(),
                format!(
                    "{{\"client_params\": {{\"id\": \"{}\", \"group\": \"default\"}}}}",
                    "a".repeat(MAX_ID + 1)
                ),
                "invalid_id",
            ),
            (
                ok.clone(),
                "{\"client_params\": {\"id\": \"a\", \"group\": \"work ers\"}}".into(),
                "invalid_group",
            ),
            (
                ok.clone(),
                "{\"client_params\": {\"id\": \"a\", \"group\": \"\"}}".into(),
                "invalid_group",
            ),
        ];
        for (headers, body, expected) in cases {
            assert_eq!(kind(headers, body), Some(*expected), "{body:.60}");
        }
    }

    #[test]
    fn json_a_form_or_no_content_type_is_read_as_json() {
        for declared in [
            "application/json",
            "application/json; charset=utf-8",
            "application/x-www-form-urlencoded",
        ] {
            let headers = headers(&[(PROTOCOL_HEADER, "true"), ("content-type", declared)]);
            assert_eq!(kind(&headers, ZINCATI_BODY), None, "{declared}");
        }
    }

    #[test]
    fn kinds_are_few_distinct_and_errors() {
        let all = Kind::all();
        let names: std::collections::BTreeSet<&str> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), all.len());
        assert!(all.len() <= 30);
        for kind in all {
            assert!(
                kind.status().is_client_error() || kind.status().is_server_error(),
                "{kind:?}"
            );
        }
    }
}

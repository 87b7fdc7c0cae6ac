//! What a failed API call means, read one way for every caller.

use kube::core::Status;

/// Whether the API server could not be reached, or could not serve the call for now (a
/// restart, an overload): the caller tries again instead of stopping. A refusal of what was
/// asked (a missing permission, an invalid object, a lost compare-and-swap) is not.
pub fn is_unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        _ => false,
    }
}

/// The API server's refusal of the call for want of a permission (403), if that is what `e`
/// is: its message names what was refused.
pub fn forbidden(e: &kube::Error) -> Option<&Status> {
    match e {
        kube::Error::Api(status) if status.code == 403 => Some(status),
        _ => None,
    }
}

/// Whether the API server refused a write because the object changed since it was read (or,
/// for a create, because it exists): a lost compare-and-swap.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_conflict() || status.is_already_exists())
}

/// Whether the object the call named does not exist.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_not_found())
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::{forbidden, is_unavailable};

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("x", "y").with_code(code).boxed())
    }

    #[test]
    fn an_overloaded_server_is_unavailable_and_a_refusal_is_not() {
        for code in [429, 500, 502, 503, 504] {
            assert!(is_unavailable(&status(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 410, 422] {
            assert!(!is_unavailable(&status(code)), "{code}");
        }
    }

    #[test]
    fn only_a_403_is_forbidden() {
        assert_eq!(
            forbidden(&status(403)).map(|s| s.message.as_str()),
            Some("x")
        );
        for code in [401, 404, 409, 429, 500] {
            assert!(forbidden(&status(code)).is_none(), "{code}");
        }
    }
}

//! [`CallError`]: a failed API call, named by what it did, so that a missing RBAC rule reads as
//! one wherever the call was made.

/// A failed call to `verb` a `resource`; `object` names which one.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The API server refused the call for lack of permission. Separate from
    /// [`CallError::Api`] so that a missing RBAC rule reads as one: the verb and the resource
    /// are what the role needs.
    #[error(
        "forbidden to {verb} {resource} ({object}): the agent's service account needs the RBAC \
         verb `{verb}` on `{resource}`: {message}"
    )]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        object: String,
        message: String,
    },
    #[error("{verb} {resource} ({object}): {source}")]
    Api {
        verb: &'static str,
        resource: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
}

impl CallError {
    /// Reads a failed call to `verb` a `resource` (`object` names which one).
    pub fn new(
        verb: &'static str,
        resource: &'static str,
        object: impl Into<String>,
        source: kube::Error,
    ) -> CallError {
        let object = object.into();
        match crate::forbidden(&source) {
            Some(status) => CallError::Forbidden {
                verb,
                resource,
                object,
                message: status.message.clone(),
            },
            None => CallError::Api {
                verb,
                resource,
                object,
                source,
            },
        }
    }

    /// Whether the same call may work a moment later (see [`crate::is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CallError::Api { source, .. } if crate::is_unavailable(source))
    }

    /// The API server's answer, when it refused the call with the HTTP status `code`.
    pub fn refused_with(&self, code: u16) -> Option<&kube::core::Status> {
        match self {
            CallError::Api {
                source: kube::Error::Api(status),
                ..
            } if status.code == code => Some(status),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::CallError;

    fn answered(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("refused", "Reason").with_code(code).boxed())
    }

    #[test]
    fn a_403_names_the_rule_the_role_needs_and_others_the_call() {
        let forbidden = CallError::new("patch", "nodes", "node-1", answered(403));
        assert_eq!(
            forbidden.to_string(),
            "forbidden to patch nodes (node-1): the agent's service account needs the RBAC verb \
             `patch` on `nodes`: refused"
        );
        assert!(!forbidden.is_unavailable());
        let overloaded = CallError::new("list", "pods", "on node-1", answered(503));
        assert!(
            overloaded
                .to_string()
                .starts_with("list pods (on node-1): ")
        );
        assert!(overloaded.is_unavailable());
        assert!(overloaded.refused_with(503).is_some());
        assert!(overloaded.refused_with(409).is_none());
    }
}

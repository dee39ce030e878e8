//! One way to say that a kube-apiserver call failed, for every caller here (apply's AWS-free
//! steps aside, which keep each refused object's source): the apiserver's status when it
//! answered, the cause chain when it did not — the kube counterpart of [`crate::aws_error`].

/// A kube-apiserver call that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeCallError {
    /// The apiserver answered with an error status (403: RBAC denied, 409: exists, ...).
    #[error("{call}: the apiserver refused ({code} {reason}): {message}")]
    Refused {
        call: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// No usable answer: unreachable, timed out, unreadable.
    #[error("{call}: cannot reach the apiserver: {detail}")]
    Unreachable { call: String, detail: String },
}

impl KubeCallError {
    /// From a kube error, naming the call (`create Secret kube-system/bootstrap-token-abcdef`).
    pub fn from_kube(call: impl Into<String>, e: kube::Error) -> Self {
        let call = call.into();
        match e {
            kube::Error::Api(status) => KubeCallError::Refused {
                call,
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
            other => KubeCallError::Unreachable {
                call,
                detail: error_chain(&other),
            },
        }
    }

    /// The HTTP status when the apiserver answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeCallError::Refused { code, .. } => Some(*code),
            KubeCallError::Unreachable { .. } => None,
        }
    }
}

/// `e: cause: cause` in one line (kube, hyper and the AWS SDK hide the useful part in sources).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_a_refusal_and_anything_else_is_unreachable() {
        let status =
            kube::core::Status::failure("secrets is forbidden", "Forbidden").with_code(403);
        let refused =
            KubeCallError::from_kube("create Secret x", kube::Error::Api(Box::new(status)));
        assert_eq!(refused.code(), Some(403));
        assert_eq!(
            refused.to_string(),
            "create Secret x: the apiserver refused (403 Forbidden): secrets is forbidden"
        );
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let unreachable =
            KubeCallError::from_kube("list Secrets", kube::Error::Service(Box::new(io)));
        assert_eq!(unreachable.code(), None);
        assert!(
            unreachable
                .to_string()
                .starts_with("list Secrets: cannot reach the apiserver: "),
            "{unreachable}"
        );
    }
}

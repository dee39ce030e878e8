//! One way to say that an AWS call failed, for every client here (EC2, IAM): the SDKs share
//! smithy's `SdkError`, so a refusal keeps the service's code and message, and anything else
//! (no answer, a timeout, a body that did not parse) keeps its cause chain.

use aws_sdk_iam::error::{ProvideErrorMetadata, SdkError};

/// An AWS call that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsCallError {
    /// The service answered with an error.
    #[error("{call} refused: {message} ({code})")]
    Refused {
        call: String,
        code: String,
        message: String,
    },
    /// No usable answer: unreachable, timed out, unreadable.
    #[error("{call}: {detail}")]
    Failed { call: String, detail: String },
}

impl AwsCallError {
    pub fn from_sdk<E, R>(call: &str, e: &SdkError<E, R>) -> AwsCallError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        match e.as_service_error() {
            Some(s) => AwsCallError::Refused {
                call: call.to_owned(),
                code: s.code().unwrap_or("error").to_owned(),
                message: s.message().unwrap_or("").to_owned(),
            },
            None => AwsCallError::Failed {
                call: call.to_owned(),
                detail: crate::kube_error::error_chain(e),
            },
        }
    }

    /// The call this error is about (`iam:CreateRole`).
    pub fn call(&self) -> &str {
        match self {
            AwsCallError::Refused { call, .. } | AwsCallError::Failed { call, .. } => call,
        }
    }
}

//! The one place a command's failure becomes what the user reads and the exit code: a
//! message the command wrote, or a library's typed error kept whole until here, where its
//! chain says whether a cluster or AWS refused the call (fix the credentials or the request)
//! or could not be reached (fix the address or the network).

use std::error::Error;
use std::process::ExitCode;

use kk_live::aws_error::AwsCallError;
use kk_live::kube_error::KubeCallError;
use kk_live::store::StoreError;

/// Why a command stopped. Every failure exits 2 (0 is success, 1 findings).
#[derive(Debug)]
pub(crate) enum Failure {
    /// Said in the command's own words: a flag, a file, an input the command checked.
    Message(String),
    /// A library's typed error.
    Error(Box<dyn Error + Send + Sync + 'static>),
}

impl<E: Error + Send + Sync + 'static> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure::Error(Box::new(error))
    }
}

impl Failure {
    /// A failure in the command's own words.
    pub(crate) fn msg(text: String) -> Self {
        Failure::Message(text)
    }

    /// A library's typed error, after what the command was doing (`reading the cluster's
    /// state: …`); the error stays the source the hint is read from.
    pub(crate) fn context(what: &str, error: impl Error + Send + Sync + 'static) -> Self {
        Failure::Error(Box::new(Context {
            what: what.to_owned(),
            source: Box::new(error),
        }))
    }

    /// What the user reads after `error: `: the message, then at most one hint line
    /// naming what kind of failure the typed error was.
    pub(crate) fn text(&self) -> String {
        match self {
            Failure::Message(text) => text.clone(),
            Failure::Error(error) => match hint(error.as_ref()) {
                Some(hint) => format!("{error}\nhint: {hint}"),
                None => error.to_string(),
            },
        }
    }

    /// Prints the failure once to standard error, escaped for the terminal line by line (errors
    /// quote what a cluster or AWS answered; a located error spans lines of its own).
    pub(crate) fn report(&self) -> ExitCode {
        let text = self.text();
        let lines: Vec<_> = text.split('\n').map(kk_model::visible).collect();
        eprintln!("error: {}", lines.join("\n"));
        ExitCode::from(2)
    }
}

#[derive(Debug)]
struct Context {
    what: String,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl Error for Context {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// What kind of failure the first kube or AWS call error in the chain was, as advice.
fn hint(error: &(dyn Error + 'static)) -> Option<String> {
    let mut next: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(kube) = e.downcast_ref::<KubeCallError>() {
            return Some(kube_hint(kube));
        }
        if let Some(aws) = e.downcast_ref::<AwsCallError>() {
            return Some(aws_hint(aws));
        }
        if let Some(store) = e.downcast_ref::<StoreError>() {
            return store_hint(store);
        }
        next = e.source();
    }
    None
}

fn kube_hint(error: &KubeCallError) -> String {
    match error {
        KubeCallError::Refused { code: 401, .. } => {
            "the apiserver did not accept the credentials: check --kubeconfig and --context".into()
        }
        KubeCallError::Refused { code: 403, .. } => {
            "the apiserver refused this identity the call (RBAC): use an account allowed to make it".into()
        }
        KubeCallError::Refused { code: 404, .. } => {
            "the object or its kind is not there: is this the right cluster, and are the CRDs installed?".into()
        }
        KubeCallError::Refused { code, .. } => {
            format!("the apiserver answered and refused the request (HTTP {code})")
        }
        KubeCallError::Unreachable { .. } => {
            "the apiserver could not be reached: check the server address in the kubeconfig and the network; nothing was refused".into()
        }
    }
}

fn aws_hint(error: &AwsCallError) -> String {
    match error {
        AwsCallError::Refused { code, .. } if is_denial(code) => format!(
            "AWS refused these credentials the call ({code}): check the identity the AWS credential chain found and its IAM policy"
        ),
        AwsCallError::Refused { code, .. } => {
            format!("AWS answered and refused the request ({code})")
        }
        AwsCallError::Failed { .. } => {
            "AWS could not be reached or did not answer: check the region, any endpoint override and the network; nothing was refused".into()
        }
    }
}

fn store_hint(error: &StoreError) -> Option<String> {
    match error {
        StoreError::Denied { .. } => Some(
            "AWS refused these credentials the join store: check the identity the AWS credential chain found and its IAM policy".into(),
        ),
        StoreError::Unreachable { .. } => Some(
            "AWS could not be reached: check the region, any endpoint override and the network; nothing was refused".into(),
        ),
        _ => None,
    }
}

/// The error codes AWS services use for "not allowed" (IAM, STS, SSM, Secrets Manager, SQS).
fn is_denial(code: &str) -> bool {
    matches!(
        code,
        "AccessDenied"
            | "AccessDeniedException"
            | "UnauthorizedOperation"
            | "UnrecognizedClientException"
            | "InvalidClientTokenId"
            | "ExpiredToken"
            | "ExpiredTokenException"
            | "AuthFailure"
            | "SignatureDoesNotMatch"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_found_below_a_wrapper() {
        let refused = KubeCallError::Refused {
            call: "create Secret".into(),
            code: 403,
            reason: "Forbidden".into(),
            message: "no".into(),
        };
        let text = Failure::context("step", refused).text();
        assert!(
            text.starts_with("step: create Secret: the apiserver refused"),
            "{text}"
        );
        assert!(text.ends_with("hint: the apiserver refused this identity the call (RBAC): use an account allowed to make it"), "{text}");
    }

    #[test]
    fn a_refusal_and_an_outage_read_differently() {
        let refused = KubeCallError::Refused {
            call: "create Secret".into(),
            code: 403,
            reason: "Forbidden".into(),
            message: "no".into(),
        };
        let text = Failure::from(refused).text();
        assert!(
            text.contains("\nhint: the apiserver refused this identity"),
            "{text}"
        );

        let down = KubeCallError::Unreachable {
            call: "list Nodes".into(),
            detail: "connection refused".into(),
        };
        let text = Failure::from(down).text();
        assert!(
            text.contains("\nhint: the apiserver could not be reached"),
            "{text}"
        );

        let denied = AwsCallError::Refused {
            call: "iam:CreateRole".into(),
            code: "AccessDenied".into(),
            message: "not allowed".into(),
        };
        assert!(
            Failure::from(denied)
                .text()
                .contains("hint: AWS refused these credentials")
        );
        let failed = AwsCallError::Failed {
            call: "ec2:DescribeSubnets".into(),
            detail: "dispatch failure".into(),
        };
        assert!(
            Failure::from(failed)
                .text()
                .contains("hint: AWS could not be reached")
        );
    }

    #[test]
    fn a_message_or_an_untyped_error_has_no_hint() {
        assert_eq!(Failure::msg("bad flag".into()).text(), "bad flag");
        let io = std::io::Error::other("disk full");
        assert_eq!(Failure::from(io).text(), "disk full");
    }
}

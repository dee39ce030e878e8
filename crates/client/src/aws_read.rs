//! AWS reads that `apply` and `doctor` both make, as the services answer them: IAM policy
//! documents (URL-encoded JSON), the interruption queue's URL and attributes, EventBridge rules
//! and their targets. Here, not in either workflow, so that neither imports the other.

use std::collections::BTreeMap;

use aws_sdk_eventbridge::types::Target;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use crate::aws_error::AwsCallError;

/// A policy document that is neither JSON nor URL-encoded JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyDocumentError {
    #[error("a bad %-escape at byte {at}")]
    BadEscape { at: usize },
    #[error("not a JSON policy document: {0}")]
    NotJson(String),
}

/// IAM returns policy documents URL-encoded (RFC 3986); some emulators return plain JSON.
pub fn policy_document(text: &str) -> Result<Value, PolicyDocumentError> {
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let escape = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .ok_or(PolicyDocumentError::BadEscape { at: i })?;
                out.push(escape);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    serde_json::from_slice(&out).map_err(|e| PolicyDocumentError::NotJson(e.to_string()))
}

/// The queue's URL, or `None` when there is no queue of that name.
pub async fn queue_url(
    sqs: &aws_sdk_sqs::Client,
    queue: &str,
) -> Result<Option<String>, AwsCallError> {
    match sqs.get_queue_url().queue_name(queue).send().await {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(e)
            if e.as_service_error().is_some_and(|s| {
                s.is_queue_does_not_exist()
                    || aws_sdk_sqs::error::ProvideErrorMetadata::code(s).is_some_and(|c| {
                        c == "AWS.SimpleQueueService.NonExistentQueue" || c == "QueueDoesNotExist"
                    })
            }) =>
        {
            Ok(None)
        }
        Err(e) => Err(AwsCallError::from_sdk("sqs:GetQueueUrl", &e)),
    }
}

/// The queue's attributes, by name (`GetQueueAttributes` with `All`).
pub async fn queue_attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<BTreeMap<String, String>, AwsCallError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("sqs:GetQueueAttributes", &e))?;
    Ok(out
        .attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
        .collect())
}

/// A rule as EventBridge holds it, or `None` when there is none of that name.
pub async fn describe_rule(
    events: &aws_sdk_eventbridge::Client,
    name: &str,
) -> Result<Option<aws_sdk_eventbridge::operation::describe_rule::DescribeRuleOutput>, AwsCallError>
{
    match events.describe_rule().name(name).send().await {
        Ok(out) => Ok(Some(out)),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(AwsCallError::from_sdk("events:DescribeRule", &e)),
    }
}

/// The ARNs a rule sends to.
pub async fn rule_targets(
    events: &aws_sdk_eventbridge::Client,
    name: &str,
) -> Result<Vec<Target>, AwsCallError> {
    Ok(events
        .list_targets_by_rule()
        .rule(name)
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("events:ListTargetsByRule", &e))?
        .targets()
        .to_vec())
}

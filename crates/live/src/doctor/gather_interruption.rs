//! What doctor reads about interruption handling: the queue's attributes (never a message:
//! `ReceiveMessage` would hide messages from Karpenter) and each rule with its targets.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Facts;
use super::gather::ReadError;
use crate::aws_read::{describe_rule, queue_attributes, queue_url, rule_targets};

/// The queue and rules as the account holds them.
#[derive(Debug, Clone, Default)]
pub struct InterruptionState {
    /// `None`: no queue of that name.
    pub queue: Option<QueueState>,
    /// By rule name; `None`: no such rule.
    pub rules: BTreeMap<String, Option<RuleState>>,
}

#[derive(Debug, Clone, Default)]
pub struct QueueState {
    pub url: String,
    /// `GetQueueAttributes` `All`: retention, SSE, the policy (JSON text), the backlog counts.
    pub attributes: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct RuleState {
    /// `ENABLED`, `DISABLED`, ...
    pub state: String,
    pub event_pattern: Option<Value>,
    /// The ARNs it sends to.
    pub targets: Vec<String>,
}

/// Reads the queue and the rules `facts` names (get/describe/list calls only).
pub async fn read(
    sdk: &aws_config::SdkConfig,
    facts: &Facts,
) -> Option<Result<InterruptionState, ReadError>> {
    let want = facts.interruption.as_ref()?;
    Some(read_all(sdk, want).await)
}

async fn read_all(
    sdk: &aws_config::SdkConfig,
    want: &super::InterruptionFacts,
) -> Result<InterruptionState, ReadError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let mut out = InterruptionState::default();
    if let Some(url) = queue_url(&sqs, &want.queue).await? {
        let attributes = queue_attributes(&sqs, &url).await?;
        out.queue = Some(QueueState { url, attributes });
    }
    for (name, _) in &want.rules {
        let rule = match describe_rule(&events, name).await? {
            None => None,
            Some(r) => Some(RuleState {
                state: r.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                event_pattern: r.event_pattern().and_then(|p| serde_json::from_str(p).ok()),
                targets: rule_targets(&events, name)
                    .await?
                    .iter()
                    .map(|t| t.arn().to_owned())
                    .collect(),
            }),
        };
        out.rules.insert(name.clone(), rule);
    }
    Ok(out)
}

//! What doctor reads about interruption handling: the queue's attributes (never a message:
//! `ReceiveMessage` would hide messages from Karpenter) and each rule with its targets.

use kk_doctor::Facts;
use kk_doctor::snapshot::{InterruptionState, QueueState, RuleState};

use super::gather::GatherError;
use crate::aws_read::{describe_rule, queue_attributes, queue_url, rule_targets};

/// Reads the queue and the rules `facts` names (get/describe/list calls only).
pub async fn read(
    sdk: &aws_config::SdkConfig,
    facts: &Facts,
) -> Option<Result<InterruptionState, GatherError>> {
    let want = facts.interruption.as_ref()?;
    Some(read_all(sdk, want).await)
}

async fn read_all(
    sdk: &aws_config::SdkConfig,
    want: &kk_doctor::InterruptionFacts,
) -> Result<InterruptionState, GatherError> {
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

//! `interruption/`: the SQS queue Karpenter reads interruption events from, its access
//! policy, and the EventBridge rules that feed it (`kk_spec::interruption` holds the names
//! and the event kinds; `apply` creates what these files describe, `doctor` checks it).

use kk_spec::ElasticCluster;
use kk_spec::interruption::{
    EVENT_KINDS, RETENTION_SECONDS, event_pattern, queue_arn, queue_name, rule_name,
};
use serde_json::{Value, json};

use crate::{Bundle, RenderError};

/// The queue's access policy: EventBridge (and SQS itself) may send; nothing reaches the
/// queue without TLS.
pub fn queue_policy(cluster: &ElasticCluster, queue: &str) -> Value {
    let arn = queue_arn(cluster, queue);
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "EventBridgeSendsInterruptionEvents",
                "Effect": "Allow",
                "Principal": { "Service": ["events.amazonaws.com", "sqs.amazonaws.com"] },
                "Action": "sqs:SendMessage",
                "Resource": arn,
            },
            {
                "Sid": "DenyWithoutTLS",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sqs:*",
                "Resource": arn,
                "Condition": { "Bool": { "aws:SecureTransport": "false" } },
            },
        ],
    })
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let Some(queue) = queue_name(cluster) else {
        return Ok(());
    };
    let arn = queue_arn(cluster, &queue);
    bundle.add_json(
        "interruption/queue.json",
        &json!({
            "queueName": queue,
            "arn": arn,
            "attributes": {
                "MessageRetentionPeriod": RETENTION_SECONDS.to_string(),
                "SqsManagedSseEnabled": "true",
            },
            "policy": "queue-policy.json",
            "karpenterSetting": "settings.interruptionQueue in karpenter/values.yaml names this queue (by name, not URL or ARN)",
        }),
    )?;
    bundle.add_json(
        "interruption/queue-policy.json",
        &queue_policy(cluster, &queue),
    )?;
    let rules: Vec<Value> = EVENT_KINDS
        .iter()
        .map(|kind| {
            json!({
                "name": rule_name(&queue, kind),
                "eventPattern": event_pattern(kind),
                "target": arn,
                "karpenter": kind.effect,
            })
        })
        .collect();
    bundle.add_json("interruption/rules.json", &json!(rules))
}

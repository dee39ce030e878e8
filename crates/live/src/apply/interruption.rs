//! `apply`'s interruption steps (after the IAM and EC2 ones in [`super::aws`]): the SQS
//! queue Karpenter reads, its attributes and access policy, the EventBridge rules and their
//! target, and, with `--prune`, deleting the ones this cluster created that the spec dropped.
//!
//! The same read-then-write pattern as the rest of the AWS side: every step reads first and
//! writes only what differs; planning records the writes without making them. What we create
//! carries the cluster tag, and prune deletes only what carries it.

use std::collections::BTreeMap;

use aws_sdk_eventbridge::types::{RuleState, Tag as RuleTag, Target};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use super::aws::{AwsDesired, Run, StepError};
use crate::aws_error::AwsCallError;
use crate::aws_read::{describe_rule, queue_attributes, queue_url, rule_targets};
use crate::store::CLUSTER_TAG;

/// The id of the queue among a rule's targets.
pub const TARGET_ID: &str = "kubean-karpenter-interruption-queue";

/// What the account should hold for interruption handling (from `interruption/`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InterruptionDesired {
    pub queue: String,
    pub queue_arn: String,
    /// Queue attributes other than the policy (`MessageRetentionPeriod`, `SqsManagedSseEnabled`).
    pub attributes: BTreeMap<String, String>,
    pub policy: Value,
    pub rules: Vec<RuleDesired>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleDesired {
    pub name: String,
    pub event_pattern: Value,
    pub description: String,
}

/// A policy or event pattern as AWS returns it: JSON text, compared as a value (AWS keeps
/// our text but not necessarily its spacing or key order).
fn json_text(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

impl Run<'_> {
    pub(crate) async fn interruption_queue(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        let Some(want) = &d.interruption else {
            return Ok(());
        };
        self.out.reads += 1;
        let Some(url) = queue_url(self.sqs, &want.queue).await? else {
            if self.write("sqs:CreateQueue", &want.queue) {
                let mut create = self
                    .sqs
                    .create_queue()
                    .queue_name(&want.queue)
                    .attributes(QueueAttributeName::Policy, want.policy.to_string())
                    .tags(CLUSTER_TAG, &d.cluster);
                for (name, value) in &want.attributes {
                    create = create.attributes(QueueAttributeName::from(name.as_str()), value);
                }
                create
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("sqs:CreateQueue", &e))?;
            }
            return Ok(());
        };
        self.out.reads += 1;
        let tags = self
            .sqs
            .list_queue_tags()
            .queue_url(&url)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("sqs:ListQueueTags", &e))?;
        match tags.tags().and_then(|t| t.get(CLUSTER_TAG)) {
            Some(owner) if *owner != d.cluster => {
                return Err(StepError::ForeignQueue {
                    queue: want.queue.clone(),
                    tag: CLUSTER_TAG.into(),
                    owner: owner.clone(),
                });
            }
            Some(_) => {}
            None => {
                if self.write(
                    "sqs:TagQueue",
                    format!("{} {CLUSTER_TAG}={}", want.queue, d.cluster),
                ) {
                    self.sqs
                        .tag_queue()
                        .queue_url(&url)
                        .tags(CLUSTER_TAG, &d.cluster)
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("sqs:TagQueue", &e))?;
                }
            }
        }
        self.out.reads += 1;
        let current = queue_attributes(self.sqs, &url).await?;
        let mut changed: Vec<(String, String)> = want
            .attributes
            .iter()
            .filter(|(name, value)| current.get(*name) != Some(*value))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        if json_text(current.get("Policy").map(String::as_str)).as_ref() != Some(&want.policy) {
            changed.push(("Policy".into(), want.policy.to_string()));
        }
        if changed.is_empty() {
            self.out.unchanged.push(format!("queue {}", want.queue));
            return Ok(());
        }
        let names: Vec<&str> = changed.iter().map(|(n, _)| n.as_str()).collect();
        if self.write(
            "sqs:SetQueueAttributes",
            format!("{} {}", want.queue, names.join(",")),
        ) {
            let mut set = self.sqs.set_queue_attributes().queue_url(&url);
            for (name, value) in &changed {
                set = set.attributes(QueueAttributeName::from(name.as_str()), value);
            }
            set.send()
                .await
                .map_err(|e| AwsCallError::from_sdk("sqs:SetQueueAttributes", &e))?;
        }
        Ok(())
    }

    pub(crate) async fn interruption_rules(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        let Some(want) = &d.interruption else {
            return Ok(());
        };
        for rule in &want.rules {
            self.out.reads += 1;
            let current = describe_rule(self.events, &rule.name).await?;
            let exists = current.is_some();
            let as_wanted = current.as_ref().is_some_and(|r| {
                json_text(r.event_pattern()).as_ref() == Some(&rule.event_pattern)
                    && r.state() == Some(&RuleState::Enabled)
            });
            if !as_wanted && self.write("events:PutRule", &rule.name) {
                let mut put = self
                    .events
                    .put_rule()
                    .name(&rule.name)
                    .event_pattern(rule.event_pattern.to_string())
                    .state(RuleState::Enabled)
                    .description(&rule.description);
                if !exists {
                    put = put.tags(
                        RuleTag::builder()
                            .key(CLUSTER_TAG)
                            .value(&d.cluster)
                            .build()?,
                    );
                }
                put.send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("events:PutRule", &e))?;
            }
            let targets = if exists {
                self.out.reads += 1;
                rule_targets(self.events, &rule.name).await?
            } else {
                Vec::new()
            };
            if targets.iter().any(|t| t.arn() == want.queue_arn) {
                if as_wanted {
                    self.out.unchanged.push(format!("rule {}", rule.name));
                }
                continue;
            }
            if self.write(
                "events:PutTargets",
                format!("{} -> {}", rule.name, want.queue),
            ) {
                let out = self
                    .events
                    .put_targets()
                    .rule(&rule.name)
                    .targets(
                        Target::builder()
                            .id(TARGET_ID)
                            .arn(&want.queue_arn)
                            .build()?,
                    )
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("events:PutTargets", &e))?;
                if let Some(failed) = out.failed_entries().first() {
                    return Err(StepError::TargetRefused {
                        rule: rule.name.clone(),
                        message: failed.error_message().unwrap_or("refused").to_owned(),
                    });
                }
            }
        }
        Ok(())
    }

    /// With `--prune`: the queues and rules tagged for this cluster that the spec no longer
    /// names. Rules are found among those whose names end like ours (`<queue>-spot`, ...).
    pub(crate) async fn interruption_prune(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        if !d.prune {
            return Ok(());
        }
        let keep_queue = d.interruption.as_ref().map(|i| i.queue.as_str());
        let keep_rules: Vec<&str> = d
            .interruption
            .iter()
            .flat_map(|i| i.rules.iter().map(|r| r.name.as_str()))
            .collect();
        let ours = |name: &str| {
            kk_spec::interruption::EVENT_KINDS
                .iter()
                .any(|k| name.ends_with(&format!("-{}", k.rule_suffix)))
        };
        let mut token: Option<String> = None;
        loop {
            self.out.reads += 1;
            let page = self
                .events
                .list_rules()
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("events:ListRules", &e))?;
            for rule in page.rules() {
                let (Some(name), Some(arn)) = (rule.name(), rule.arn()) else {
                    continue;
                };
                if !ours(name) || keep_rules.contains(&name) || !self.rule_is_ours(arn, d).await? {
                    continue;
                }
                self.out.reads += 1;
                let ids: Vec<String> = rule_targets(self.events, name)
                    .await?
                    .iter()
                    .map(|t| t.id().to_owned())
                    .collect();
                if !ids.is_empty() && self.write("events:RemoveTargets", name) {
                    self.events
                        .remove_targets()
                        .rule(name)
                        .set_ids(Some(ids))
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("events:RemoveTargets", &e))?;
                }
                if self.write("events:DeleteRule", name) {
                    self.events
                        .delete_rule()
                        .name(name)
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("events:DeleteRule", &e))?;
                }
            }
            match page.next_token() {
                Some(t) => token = Some(t.to_owned()),
                None => break,
            }
        }
        let mut token: Option<String> = None;
        loop {
            self.out.reads += 1;
            let page = self
                .sqs
                .list_queues()
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("sqs:ListQueues", &e))?;
            for url in page.queue_urls() {
                let name = url.rsplit('/').next().unwrap_or(url);
                if Some(name) == keep_queue {
                    continue;
                }
                self.out.reads += 1;
                let tags = self
                    .sqs
                    .list_queue_tags()
                    .queue_url(url)
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("sqs:ListQueueTags", &e))?;
                if tags.tags().and_then(|t| t.get(CLUSTER_TAG)) != Some(&d.cluster) {
                    continue;
                }
                if self.write("sqs:DeleteQueue", name) {
                    self.sqs
                        .delete_queue()
                        .queue_url(url)
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("sqs:DeleteQueue", &e))?;
                }
            }
            match page.next_token() {
                Some(t) => token = Some(t.to_owned()),
                None => break,
            }
        }
        Ok(())
    }

    async fn rule_is_ours(&mut self, arn: &str, d: &AwsDesired) -> Result<bool, StepError> {
        self.out.reads += 1;
        let tags = self
            .events
            .list_tags_for_resource()
            .resource_arn(arn)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("events:ListTagsForResource", &e))?;
        Ok(tags
            .tags()
            .iter()
            .any(|t| t.key() == CLUSTER_TAG && t.value() == d.cluster))
    }
}

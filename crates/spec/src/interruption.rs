//! Spot interruption handling: the SQS queue Karpenter reads (`settings.interruptionQueue`)
//! and the EventBridge rules that feed it. One home for the queue's name, its ARN and the
//! five event kinds, so render (the `interruption/` files), apply and doctor agree.
//!
//! The event kinds are the ones Karpenter's interruption controller parses (each parser
//! matches `version "0"`, `source` and `detail-type`); a rule matches only source and
//! detail-type, and Karpenter filters the rest itself.

use crate::types::{ClusterSpec, ElasticCluster};

/// How long the queue keeps a message. A warning older than five minutes is about an
/// instance that is already gone: Karpenter could do nothing useful with it.
pub const RETENTION_SECONDS: u32 = 300;

/// The longest queue name whose rule names (`<queue>-<suffix>`) still fit EventBridge's
/// 64-character limit.
pub const MAX_QUEUE_NAME: usize = 64 - 1 - LONGEST_RULE_SUFFIX;
const LONGEST_RULE_SUFFIX: usize = 12; // "state-change"

/// One kind of event Karpenter acts on, and the rule that routes it to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventKind {
    /// The rule's name after `<queue>-`.
    pub rule_suffix: &'static str,
    pub source: &'static str,
    pub detail_type: &'static str,
    /// What Karpenter does with it.
    pub effect: &'static str,
}

/// The five kinds, in the order the bundle lists them.
pub const EVENT_KINDS: [EventKind; 5] = [
    EventKind {
        rule_suffix: "health",
        source: "aws.health",
        detail_type: "AWS Health Event",
        effect: "EC2 scheduled changes (service EC2, category scheduledChange): the named instances' NodeClaims are deleted",
    },
    EventKind {
        rule_suffix: "spot",
        source: "aws.ec2",
        detail_type: "EC2 Spot Instance Interruption Warning",
        effect: "the two-minute warning: the NodeClaim is deleted and the spot offering marked unavailable for 3 minutes",
    },
    EventKind {
        rule_suffix: "rebalance",
        source: "aws.ec2",
        detail_type: "EC2 Instance Rebalance Recommendation",
        effect: "recorded as an event only",
    },
    EventKind {
        rule_suffix: "state-change",
        source: "aws.ec2",
        detail_type: "EC2 Instance State-change Notification",
        effect: "stopping, stopped, shutting-down or terminated: the NodeClaim is deleted",
    },
    EventKind {
        rule_suffix: "reservation",
        source: "aws.ec2",
        detail_type: "EC2 Capacity Reservation Instance Interruption Warning",
        effect: "an interruptible capacity reservation is reclaimed: the NodeClaim is deleted and the reservation marked unavailable",
    },
];

/// Whether any pool may launch capacity AWS can take back (`spot`, or `reserved`, whose
/// interruptible reservations are reclaimed with a warning too).
pub fn reclaimable(spec: &ClusterSpec) -> bool {
    spec.pools.iter().any(|p| {
        p.instances
            .capacity_types
            .iter()
            .any(|c| c == "spot" || c == "reserved")
    })
}

/// Whether the spec turns the queue off on purpose (`interruptionQueue: ""`).
pub fn explicitly_off(spec: &ClusterSpec) -> bool {
    spec.karpenter.interruption_queue.as_deref() == Some("")
}

/// The queue's name, or `None` when there is no queue: the name the spec sets; else, when a
/// pool allows spot or reserved capacity, the cluster's name; `""` turns it off.
pub fn queue_name(cluster: &ElasticCluster) -> Option<String> {
    match cluster.spec.karpenter.interruption_queue.as_deref() {
        Some("") => None,
        Some(name) => Some(name.to_owned()),
        None if reclaimable(&cluster.spec) => Some(cluster.metadata.name.clone()),
        None => None,
    }
}

/// The queue's ARN (what the controller policy and the rules' targets name).
pub fn queue_arn(cluster: &ElasticCluster, queue: &str) -> String {
    crate::arn::Arns::of(&cluster.spec.aws).sqs_queue(queue)
}

/// The EventBridge rule for `kind` feeding `queue`.
pub fn rule_name(queue: &str, kind: &EventKind) -> String {
    format!("{queue}-{}", kind.rule_suffix)
}

/// The rule's event pattern: source and detail-type only.
pub fn event_pattern(kind: &EventKind) -> serde_json::Value {
    serde_json::json!({ "source": [kind.source], "detail-type": [kind.detail_type] })
}

/// The spot interruption warning EventBridge would deliver to the queue for `instance_id`,
/// as its SQS message body: the event envelope (`version "0"`, source, detail-type, an RFC 3339
/// `time`) that Karpenter's parser matches, with `id` and `time` given by the caller. `verify
/// --interruption` sends it with `SendMessage`: EventBridge refuses `aws.*` sources in
/// `PutEvents`, so a synthetic warning can only go to the queue itself.
pub fn spot_warning(
    cluster: &ElasticCluster,
    instance_id: &str,
    id: &str,
    time: &str,
) -> serde_json::Value {
    let aws = &cluster.spec.aws;
    let kind = &EVENT_KINDS[1];
    serde_json::json!({
        "version": "0",
        "id": id,
        "detail-type": kind.detail_type,
        "source": kind.source,
        "account": aws.account_id,
        "time": time,
        "region": aws.region,
        "resources": [crate::arn::Arns::of(aws).ec2_instance(instance_id)],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EXAMPLE, parse_spec};

    fn with_queue(line: &str) -> Result<crate::LoadedSpec, Vec<String>> {
        let text = EXAMPLE.replace(
            "    isolatedVPC: false\n",
            &format!("{line}    isolatedVPC: false\n"),
        );
        parse_spec(&text, "x.yaml").map_err(|e| {
            e.iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect()
        })
    }

    #[test]
    fn spot_pools_get_a_queue_named_after_the_cluster_unless_named_or_turned_off() {
        let example = parse_spec(EXAMPLE, "x.yaml").unwrap();
        assert_eq!(queue_name(&example.spec).as_deref(), Some("demo"));
        assert!(example.warnings.is_empty());
        assert_eq!(
            queue_arn(&example.spec, "demo"),
            "arn:aws:sqs:us-east-1:111122223333:demo"
        );
        let named = with_queue("    interruptionQueue: karpenter-demo\n").unwrap();
        assert_eq!(queue_name(&named.spec).as_deref(), Some("karpenter-demo"));
        let off = with_queue("    interruptionQueue: \"\"\n").unwrap();
        assert_eq!(queue_name(&off.spec), None);
        let warnings: Vec<String> = off.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0]
                .starts_with("x.yaml:72:24: spec.karpenter.interruptionQueue: a pool allows spot"),
            "{warnings:?}"
        );
        // Only on-demand pools: no queue, nothing to warn about (reserved capacity can be
        // interrupted too, so the training pool goes on-demand with the others).
        let text: String = EXAMPLE
            .replace(
                "capacityTypes: [spot, on-demand]",
                "capacityTypes: [on-demand]",
            )
            .replace(
                "capacityTypes: [reserved, on-demand]",
                "capacityTypes: [on-demand]",
            )
            .lines()
            .filter(|l| !l.contains("capacityReservationType:"))
            .map(|l| format!("{l}\n"))
            .collect();
        let on_demand = parse_spec(&text, "x.yaml").unwrap();
        assert_eq!(queue_name(&on_demand.spec), None);
        assert!(on_demand.warnings.is_empty());
    }

    #[test]
    fn a_queue_name_that_could_widen_the_arn_is_refused() {
        for (name, says) in [
            ("\"*\"", "has a wildcard"),
            ("demo-?", "has a wildcard"),
            (
                "arn:aws:sqs:us-east-1:111122223333:demo",
                "is not a queue name",
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/111122223333/demo",
                "is not a queue name",
            ),
            ("demo/x", "is not a queue name"),
            ("demo.fifo", "is a FIFO queue"),
            ("demo queue", "is not an SQS queue name"),
            (&"q".repeat(MAX_QUEUE_NAME + 1), "characters: at most 51"),
        ] {
            let errors = with_queue(&format!("    interruptionQueue: {name}\n")).unwrap_err();
            assert_eq!(errors.len(), 1, "{name}: {errors:?}");
            assert!(
                errors[0].starts_with("spec.karpenter.interruptionQueue: ")
                    && errors[0].contains(says),
                "{name}: {errors:?}"
            );
        }
        assert!(
            with_queue(&format!(
                "    interruptionQueue: {}\n",
                "q".repeat(MAX_QUEUE_NAME)
            ))
            .is_ok()
        );
    }

    #[test]
    fn the_synthetic_spot_warning_is_the_envelope_karpenter_parses() {
        let example = parse_spec(EXAMPLE, "x.yaml").unwrap();
        let m = spot_warning(
            &example.spec,
            "i-0abc",
            "kk-verify-1",
            "2026-12-02T01:00:00Z",
        );
        assert_eq!(m["version"], "0");
        assert_eq!(m["source"], "aws.ec2");
        assert_eq!(m["detail-type"], "EC2 Spot Instance Interruption Warning");
        assert_eq!(m["detail"]["instance-id"], "i-0abc");
        assert_eq!(m["detail"]["instance-action"], "terminate");
        assert_eq!(
            m["resources"][0],
            "arn:aws:ec2:us-east-1:111122223333:instance/i-0abc"
        );
        // The spot rule's pattern matches it (what EventBridge would have routed).
        let pattern = event_pattern(&EVENT_KINDS[1]);
        assert_eq!(pattern["source"][0], m["source"]);
        assert_eq!(pattern["detail-type"][0], m["detail-type"]);
    }

    #[test]
    fn every_rule_name_fits_for_the_longest_queue_name() {
        let queue = "q".repeat(MAX_QUEUE_NAME);
        for kind in &EVENT_KINDS {
            assert!(rule_name(&queue, kind).len() <= 64, "{}", kind.rule_suffix);
        }
        assert!(
            EVENT_KINDS
                .iter()
                .any(|k| k.rule_suffix.len() == LONGEST_RULE_SUFFIX)
        );
    }
}

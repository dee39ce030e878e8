//! Interruption handling: the queue exists and is reachable only as it should be, the five
//! rules route into it, Karpenter reads it by name, and its backlog stays small.

use serde_json::Value;

use super::check;
use crate::snapshot::Snapshot;
use crate::snapshot::{InterruptionState, QueueState};
use crate::{Check, Facts, Status};

/// More messages than this waiting means Karpenter is not reading the queue (it long-polls
/// continuously and deletes what it handled; a healthy queue is empty between events).
pub const BACKLOG_LIMIT: u64 = 10;

const APPLY_FIX: &str = "run `kubean-karpenter apply <spec>`: it creates the queue, its policy and the rules (interruption/)";

/// The state read from the account; otherwise `c` says why not (skipped, or a warning when
/// the spec turned the queue off with spot pools).
fn state<'s>(s: &'s Snapshot, f: &Facts, c: &mut Check) -> Option<&'s InterruptionState> {
    let reason = match (&f.interruption, &s.interruption) {
        (Some(_), Some(Ok(state))) => return Some(state),
        (None, _) if f.reclaimable => {
            c.worse(
                Status::Warn,
                "spec.karpenter.interruptionQueue is \"\" while a pool allows spot or reserved capacity".into(),
                "remove interruptionQueue from the spec (the queue is then named after the cluster) and apply: without it a reclaimed node's pods die with it",
            );
            return None;
        }
        (None, _) => "no pool allows spot or reserved capacity: no interruption queue".to_owned(),
        (Some(_), None) => "no AWS configuration: the queue and rules were not read".to_owned(),
        (Some(_), Some(Err(e))) => e.to_string(),
    };
    *c = c.clone().skip(reason);
    None
}

fn queue<'s>(s: &'s Snapshot, f: &Facts, c: &mut Check) -> Option<&'s QueueState> {
    let found = state(s, f, c)?;
    let want = f.interruption.as_ref()?;
    match found.queue.as_ref() {
        Some(q) => Some(q),
        None => {
            c.worse(
                Status::Fail,
                format!("sqs:GetQueueUrl {}: no such queue", want.queue),
                APPLY_FIX,
            );
            None
        }
    }
}

pub(super) fn interruption_queue(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "interruption-queue",
        "the interruption queue exists, keeps messages 5 minutes and is encrypted",
    );
    let Some(q) = queue(s, f, &mut c) else {
        return c;
    };
    let attr = |name: &str| q.attributes.get(name).map(String::as_str).unwrap_or("");
    c = c.saw(format!(
        "{}: MessageRetentionPeriod {}, SqsManagedSseEnabled {}",
        q.url,
        attr("MessageRetentionPeriod"),
        attr("SqsManagedSseEnabled")
    ));
    let retention = kk_spec::interruption::RETENTION_SECONDS.to_string();
    if attr("MessageRetentionPeriod") != retention {
        c.worse(
            Status::Warn,
            format!("retention is {} s, not {retention} s: a warning older than five minutes is about an instance already gone", attr("MessageRetentionPeriod")),
            APPLY_FIX,
        );
    }
    if attr("SqsManagedSseEnabled") != "true" && attr("KmsMasterKeyId").is_empty() {
        c.worse(
            Status::Warn,
            "the queue is not encrypted at rest".into(),
            APPLY_FIX,
        );
    }
    c
}

fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn covers_action(statement: &Value, action: &str) -> bool {
    strings(&statement["Action"])
        .iter()
        .any(|p| crate::policy::glob(p, action, true))
}

/// Whether a statement's principal covers EventBridge (the service, or everyone).
fn names_eventbridge(statement: &Value) -> bool {
    let principal = &statement["Principal"];
    principal == "*"
        || strings(&principal["Service"]).contains(&"events.amazonaws.com")
        || strings(&principal["AWS"]).contains(&"*")
}

/// Whether the policy lets EventBridge send to the queue (an unconditional Allow of
/// `sqs:SendMessage` for `events.amazonaws.com`, and no unconditional Deny of it).
pub fn admits_eventbridge(policy: &Value) -> bool {
    let sends = |s: &Value, effect: &str| {
        s["Effect"] == effect
            && names_eventbridge(s)
            && covers_action(s, "sqs:SendMessage")
            && s.get("Condition").is_none()
    };
    let statements = statements(policy);
    statements.iter().any(|s| sends(s, "Allow")) && !statements.iter().any(|s| sends(s, "Deny"))
}

/// Whether the policy denies every SQS action made without TLS.
pub fn denies_plaintext(policy: &Value) -> bool {
    statements(policy).iter().any(|s| {
        s["Effect"] == "Deny"
            && (s["Principal"] == "*" || strings(&s["Principal"]["AWS"]).contains(&"*"))
            && covers_action(s, "sqs:*")
            && strings(&s["Action"])
                .iter()
                .any(|a| *a == "sqs:*" || *a == "*")
            && strings(&s["Condition"]["Bool"]["aws:SecureTransport"]).contains(&"false")
    })
}

fn statements(policy: &Value) -> Vec<&Value> {
    match &policy["Statement"] {
        Value::Array(a) => a.iter().collect(),
        v @ Value::Object(_) => vec![v],
        _ => Vec::new(),
    }
}

pub(super) fn interruption_queue_policy(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "interruption-queue-policy",
        "the queue's policy lets EventBridge send and refuses access without TLS",
    );
    let Some(q) = queue(s, f, &mut c) else {
        return c;
    };
    let fix = "restore interruption/queue-policy.json (`kubean-karpenter apply <spec>` sets it): EventBridge (events.amazonaws.com) may sqs:SendMessage, and a Deny of sqs:* when aws:SecureTransport is false";
    let policy: Option<Value> = q
        .attributes
        .get("Policy")
        .and_then(|p| serde_json::from_str(p).ok());
    let Some(policy) = policy else {
        c.worse(
            Status::Fail,
            format!(
                "{} has no access policy: EventBridge cannot deliver a single event",
                q.url
            ),
            fix,
        );
        return c;
    };
    if admits_eventbridge(&policy) {
        c = c.saw("events.amazonaws.com may sqs:SendMessage".to_owned());
    } else {
        c.worse(
            Status::Fail,
            "no statement lets events.amazonaws.com sqs:SendMessage (or one denies it): the rules match, and every delivery is refused".into(),
            fix,
        );
    }
    if denies_plaintext(&policy) {
        c = c.saw("sqs:* is denied without aws:SecureTransport".to_owned());
    } else {
        c.worse(
            Status::Fail,
            "no Deny of sqs:* when aws:SecureTransport is false: the queue accepts plaintext requests".into(),
            fix,
        );
    }
    c
}

pub(super) fn interruption_rules(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "interruption-rules",
        "each of the five EventBridge rules exists, is enabled and targets the queue",
    );
    let (Some(found), Some(want)) = (state(s, f, &mut c), &f.interruption) else {
        return c;
    };
    for (name, detail_type) in &want.rules {
        match found.rules.get(name).and_then(Option::as_ref) {
            None => c.worse(
                Status::Fail,
                format!(
                    "rule {name} ({detail_type}) does not exist: those events never reach Karpenter"
                ),
                APPLY_FIX,
            ),
            Some(r) if r.state != "ENABLED" => c.worse(
                Status::Fail,
                format!("rule {name} is {}", r.state),
                &format!("aws events enable-rule --name {name}"),
            ),
            Some(r) if !r.targets.contains(&want.queue_arn) => c.worse(
                Status::Fail,
                format!(
                    "rule {name} sends to {:?}, not to {}",
                    r.targets, want.queue_arn
                ),
                APPLY_FIX,
            ),
            Some(r)
                if !r.event_pattern.as_ref().is_some_and(|p| {
                    strings(&p["detail-type"]).contains(&detail_type.as_str())
                }) =>
            {
                c.worse(
                    Status::Fail,
                    format!("rule {name}'s pattern does not match detail-type {detail_type:?}"),
                    APPLY_FIX,
                )
            }
            Some(_) => c = c.saw(format!("{name}: {detail_type} -> {}", want.queue)),
        }
    }
    c
}

/// The `INTERRUPTION_QUEUE` the Karpenter pods run with (the chart's env for
/// `settings.interruptionQueue`).
fn karpenter_queue_settings(s: &Snapshot, f: &Facts) -> Option<Vec<(String, String)>> {
    let pods = s.pods.as_ref().ok()?;
    Some(
        pods.iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(f.karpenter_namespace.as_str()))
            .filter_map(|p| {
                let spec = p.spec.as_ref()?;
                let controller = spec.containers.iter().find(|c| c.name == "controller")?;
                let value = controller
                    .env
                    .iter()
                    .flatten()
                    .find(|e| e.name == "INTERRUPTION_QUEUE")
                    .and_then(|e| e.value.clone())
                    .unwrap_or_default();
                Some((p.metadata.name.clone().unwrap_or_default(), value))
            })
            .collect(),
    )
}

pub(super) fn interruption_setting(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "interruption-setting",
        "Karpenter reads the interruption queue, named by name (not URL or ARN)",
    );
    let Some(want) = &f.interruption else {
        return c.skip("the spec has no interruption queue");
    };
    let Some(settings) = karpenter_queue_settings(s, f) else {
        return c.skip("Pods could not be listed");
    };
    if settings.is_empty() {
        return c.skip(format!(
            "no Karpenter controller pod in namespace {}",
            f.karpenter_namespace
        ));
    }
    let fix = format!(
        "set settings.interruptionQueue: {} in karpenter/values.yaml (the queue's name) and upgrade the release (`kubean-karpenter apply <spec>`)",
        want.queue
    );
    for (pod, value) in settings {
        if value == want.queue {
            c = c.saw(format!("{pod}: INTERRUPTION_QUEUE={value}"));
        } else if value.is_empty() {
            c.worse(
                Status::Fail,
                format!(
                    "{pod} runs without INTERRUPTION_QUEUE: its interruption controller is off"
                ),
                &fix,
            );
        } else if value.contains("://") || value.starts_with("arn:") {
            c.worse(
                Status::Fail,
                format!("{pod}: INTERRUPTION_QUEUE={value} is a URL or ARN: Karpenter looks the queue up by name and finds none"),
                &fix,
            );
        } else {
            c.worse(
                Status::Fail,
                format!(
                    "{pod}: INTERRUPTION_QUEUE={value}, but the spec's queue is {}",
                    want.queue
                ),
                &fix,
            );
        }
    }
    c
}

pub(super) fn interruption_backlog(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "interruption-backlog",
        "the interruption queue's backlog is small (Karpenter is consuming it)",
    );
    let Some(q) = queue(s, f, &mut c) else {
        if c.status == Status::Fail {
            // interruption-queue already fails for a missing queue.
            return c.skip("no queue");
        }
        return c;
    };
    let count = |name: &str| {
        q.attributes
            .get(name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (visible, in_flight) = (
        count("ApproximateNumberOfMessages"),
        count("ApproximateNumberOfMessagesNotVisible"),
    );
    let seen =
        format!("GetQueueAttributes: {visible} message(s) waiting, {in_flight} being handled");
    if visible > BACKLOG_LIMIT {
        c.worse(
            Status::Warn,
            format!("{seen}: more than {BACKLOG_LIMIT} waiting means Karpenter is not reading the queue"),
            "check the Karpenter controller's logs for sqs errors (its role needs sqs:GetQueueUrl, sqs:ReceiveMessage and sqs:DeleteMessage on the queue: iam/controller-policy.json) and that INTERRUPTION_QUEUE names this queue",
        );
    } else {
        c = c.saw(seen);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered() -> Value {
        let cluster = kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
            .unwrap()
            .spec;
        kk_render::interruption::queue_policy(&cluster, "demo")
    }

    #[test]
    fn the_rendered_policy_admits_eventbridge_and_denies_plaintext() {
        let policy = rendered();
        assert!(admits_eventbridge(&policy));
        assert!(denies_plaintext(&policy));
    }

    #[test]
    fn a_policy_without_eventbridge_or_without_the_tls_deny_is_caught() {
        let mut only_sqs = rendered();
        only_sqs["Statement"][0]["Principal"]["Service"] = serde_json::json!("sqs.amazonaws.com");
        assert!(!admits_eventbridge(&only_sqs));
        let mut denied = rendered();
        denied["Statement"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*"}));
        assert!(!admits_eventbridge(&denied));
        let mut open = rendered();
        open["Statement"].as_array_mut().unwrap().pop();
        assert!(!denies_plaintext(&open));
        let mut narrow = rendered();
        narrow["Statement"][1]["Action"] = serde_json::json!("sqs:ReceiveMessage");
        assert!(!denies_plaintext(&narrow));
    }
}

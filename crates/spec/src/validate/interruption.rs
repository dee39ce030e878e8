//! `spec.karpenter.interruptionQueue`: an SQS queue name that cannot widen the controller
//! policy's queue ARN, and a warning when spot capacity runs without one.

use super::*;
use crate::interruption::{MAX_QUEUE_NAME, explicitly_off, reclaimable};

pub(super) fn interruption(p: &mut Problems, at: &FieldPath, k: &Karpenter) {
    let Some(name) = k.interruption_queue.as_deref().filter(|n| !n.is_empty()) else {
        return;
    };
    let at = at.key("interruptionQueue");
    let problem = if name.contains(['*', '?']) {
        Some(format!(
            "{name:?} has a wildcard: the controller policy's SQS statement names this queue's ARN, and a wildcard would let Karpenter read and delete other queues' messages"
        ))
    } else if name.starts_with("arn:") || name.contains("://") || name.contains([':', '/']) {
        Some(format!(
            "{name:?} is not a queue name: Karpenter looks the queue up by name (GetQueueUrl); a URL or ARN here would also change the ARN the controller policy is scoped to"
        ))
    } else if name.ends_with(".fifo") {
        Some(format!(
            "{name:?} is a FIFO queue: the interruption queue is a standard queue (EventBridge's targets here carry no message group)"
        ))
    } else if !SQS_NAME.is_match(name) {
        Some(format!(
            "{name:?} is not an SQS queue name (letters, digits, '-' and '_')"
        ))
    } else if name.len() > MAX_QUEUE_NAME {
        Some(format!(
            "{name:?} is {} characters: at most {MAX_QUEUE_NAME}, so the EventBridge rule names (<queue>-<kind>) fit in 64",
            name.len()
        ))
    } else {
        None
    };
    if let Some(message) = problem {
        p.push((at, message));
    }
}

/// Problems that do not stop a render: the spec says what it means, but it is probably not
/// what the user wants.
pub(super) fn warnings(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    if explicitly_off(spec) && reclaimable(spec) {
        p.push((
            at.key("karpenter").key("interruptionQueue"),
            "a pool allows spot (or reserved) capacity but the interruption queue is off: on a reclaim Karpenter gets no two-minute warning, so the node's pods die with it instead of being drained onto a replacement; remove the field (the queue is then named after the cluster) or name a queue".into(),
        ));
    }
}

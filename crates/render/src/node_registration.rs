//! `cloud/node-registration-policy.yaml`: what a node may claim about itself when it registers
//! (finding #5 of issue 24).
//!
//! Any principal that can boot an instance with the node role (PassRole + RunInstances), or that
//! holds a join credential, can become `system:node:<instance>`. NodeRestriction checks only
//! labels at create, so such a node could register Ready, untainted, with labels and taints of
//! its choosing, and draw pods without any NodeClaim. This ValidatingAdmissionPolicy closes that
//! for Karpenter-style names (`i-` + hex, the EC2 instance id): a Node created by a node must
//! carry Karpenter's `karpenter.sh/unregistered` taint with effect `NoExecute` (a weaker effect
//! of the same key filters nothing, issue 47 item 4) and a providerID naming that instance.
//! Karpenter removes the taint only when a NodeClaim's providerID matches (its registration
//! controller), so a node without a NodeClaim never becomes schedulable; a node cannot drop the
//! taint itself (NodeRestriction refuses a node any change to its taints after create).
//! Kubean-built nodes are named after their private DNS names and register without a providerID:
//! the policy leaves them alone (their names are not bare instance ids; validate keeps it so).

use serde_json::{Value, json};

use crate::cel;
use crate::names::{INSTANCE_NAME_PATTERN, MANAGED_BY};

pub const NAME: &str = "kubean-karpenter-node-registration";
/// The taint Karpenter's nodes register with and Karpenter alone removes.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
/// The only effect that keeps every pod off until Karpenter removes the taint.
pub const UNREGISTERED_EFFECT: &str = "NoExecute";

fn policy(labels: &Value) -> Value {
    let taint = cel::string_literal(UNREGISTERED_TAINT);
    let instance = cel::string_literal(INSTANCE_NAME_PATTERN);
    let effect = cel::string_literal(UNREGISTERED_EFFECT);
    // The effect matters as much as the key: a PreferNoSchedule or NoSchedule taint of the same
    // key still lets pods land (the one a preference, the other not for tolerating pods or
    // pods bound directly), and only NoExecute is what Karpenter registers and waits for.
    let tainted = |o: &str| {
        format!(
            "has({o}.spec.taints) && {o}.spec.taints.exists(t, t.key == {taint} && has(t.effect) && t.effect == {effect})"
        )
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": NAME, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["nodes"], "operations": ["CREATE"],
                }],
            },
            // Only nodes acting for themselves, only instance-named Nodes.
            "matchConditions": [
                { "name": "by-a-node", "expression": "'system:nodes' in request.userInfo.groups" },
                { "name": "instance-named", "expression": format!("object.metadata.name.matches({instance})") },
            ],
            "validations": [
                {
                    "expression": format!("({})", tainted("object")),
                    "message": format!("a node registers with the {UNREGISTERED_TAINT}:{UNREGISTERED_EFFECT} taint: Karpenter removes it once a NodeClaim owns the instance"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "(has(object.spec.providerID) \
                                   && object.spec.providerID.startsWith('aws:///') \
                                   && object.spec.providerID.endsWith('/' + object.metadata.name))",
                    "message": "a node registers with the providerID of its own instance (aws:///<zone>/<its name>)",
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

pub fn manifests() -> Vec<Value> {
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1 });
    vec![
        policy(&labels),
        crate::admission::deny_binding(NAME, &labels),
    ]
}

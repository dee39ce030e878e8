//! The binding every ValidatingAdmissionPolicy we render is enforced by: named like the policy,
//! cluster-wide, `Deny`.

use serde_json::{Value, json};

pub(crate) fn deny_binding(name: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": name, "labels": labels },
        "spec": { "policyName": name, "validationActions": ["Deny"] },
    })
}

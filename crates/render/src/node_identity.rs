//! `cloud/node-identity-policy.yaml`: what a registered node may say about itself afterwards
//! (issue 47 item 7).
//!
//! NodeRestriction lets a kubelet change its own labels outside `kubernetes.io`/`k8s.io` and its
//! own status at any time. A compromised node of a CPU pool could label itself into a GPU pool
//! (`karpenter.sh/nodepool`, `node.accelerator`), advertise `nvidia.com/gpu`, and draw GPU and
//! training pods with their Secrets. The registration policy checks CREATE only; this one holds
//! the rest, for instance-named Nodes (Karpenter's) only:
//!
//! 1. **Frozen labels**: a node may not add, change or remove a label of Karpenter's
//!    (`karpenter.sh/`, `karpenter.k8s.aws/`), the instance type, zone or region, or any label a
//!    rendered pool's template sets. Karpenter, not the node, writes them (it copies its
//!    NodeClaim's labels onto the Node when it registers it).
//! 2. **Pool identity agrees with the pool**, whoever writes: at CREATE, and on any UPDATE that
//!    changes `karpenter.sh/nodepool` or a pool-identity label, every pool-identity label the Node
//!    carries must have the value its pool's template gives, when that pool is one of ours. A node
//!    may register with labels its NodeClaim lacks (Karpenter passes the claim's labels to the
//!    kubelet, and keeps extra ones when it registers the node); with this rule Karpenter's own
//!    registration update is refused for such a node, which then never loses its
//!    `karpenter.sh/unregistered` taint and is removed with its claim after Karpenter's
//!    registration timeout.
//! 3. **Accelerators only in accelerator pools**: a node advertises a positive `nvidia.com/*`,
//!    `aws.amazon.com/neuron*` or `amd.com/gpu` capacity or allocatable only once registered
//!    (no `karpenter.sh/unregistered` taint, so its pool label is Karpenter's) and only when its
//!    pool is one of our GPU pools or not one of ours. It may keep or lower what it had (nodes
//!    from before this policy keep their heartbeats).
//!
//! Why not pool identity in `node-restriction.kubernetes.io/` labels (which no kubelet may set):
//! they would be safe without a policy, but adding one to every pool's template drifts and
//! replaces every existing node, and pods and charts select on the labels people already use
//! (`node.accelerator`, `karpenter.sh/nodepool`); this policy makes those trustworthy instead.

use std::collections::BTreeSet;

use kk_spec::{ClusterSpec, PoolType};
use serde_json::{Value, json};

use crate::cel::string_literal;
use crate::names::{self, INSTANCE_NAME_PATTERN, MANAGED_BY};
use crate::node_registration::UNREGISTERED_TAINT;

pub const NAME: &str = "kubean-karpenter-node-identity";
/// The label Karpenter gives every node of a NodePool, from the NodeClaim.
const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// Label prefixes Karpenter writes (from the NodeClaim) and a node never needs to change.
const FROZEN_PREFIXES: [&str; 2] = ["karpenter.sh/", "karpenter.k8s.aws/"];
/// Well-known labels the CCM or Karpenter set on our nodes (the kubelet, with an external cloud
/// provider, sets none of them).
const FROZEN_KEYS: [&str; 3] = [
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];
/// Extended resources that draw accelerator pods (device plugins of NVIDIA, AWS Neuron, AMD).
const ACCELERATOR_PREFIXES: [&str; 2] = ["nvidia.com/", "aws.amazon.com/neuron"];
const ACCELERATOR_KEYS: [&str; 1] = ["amd.com/gpu"];

/// A CEL list literal of the strings.
fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(string_literal).collect();
    format!("[{}]", items.join(", "))
}

/// `var` (a CEL string) starts with one of the prefixes or is one of the keys.
fn one_of(var: &str, prefixes: &[&str], keys: &[&str]) -> String {
    let mut terms: Vec<String> = prefixes
        .iter()
        .map(|p| format!("{var}.startsWith({})", string_literal(p)))
        .collect();
    if !keys.is_empty() {
        terms.push(format!("{var} in {}", list(keys.iter().copied())));
    }
    format!("({})", terms.join(" || "))
}

/// `o` has label `k` (a CEL string expression).
fn has_label(o: &str, k: &str) -> String {
    format!("(has({o}.metadata.labels) && {k} in {o}.metadata.labels)")
}

/// The value of label `k` on `o`, or `''`.
fn label(o: &str, k: &str) -> String {
    format!("({} ? {o}.metadata.labels[{k}] : '')", has_label(o, k))
}

/// Every label key a rendered pool's template sets: what says which pool a node is in.
fn identity_keys(spec: &ClusterSpec) -> BTreeSet<String> {
    spec.pools
        .iter()
        .flat_map(|p| names::pool_labels(p).into_keys())
        .collect()
}

/// `{'<pool>': {'<key>': '<value>', …}, …}`: each pool's identity labels.
fn templates(spec: &ClusterSpec) -> String {
    let pools: Vec<String> = spec
        .pools
        .iter()
        .map(|p| {
            let labels: Vec<String> = names::pool_labels(p)
                .iter()
                .map(|(k, v)| format!("{}: {}", string_literal(k), string_literal(v)))
                .collect();
            format!("{}: {{{}}}", string_literal(&p.name), labels.join(", "))
        })
        .collect();
    format!("{{{}}}", pools.join(", "))
}

/// Rule 1: for a node's own UPDATE, no frozen label added, changed or removed.
fn frozen_labels_unchanged(spec: &ClusterSpec) -> String {
    let mut keys: Vec<String> = FROZEN_KEYS.iter().map(|k| (*k).to_owned()).collect();
    keys.extend(identity_keys(spec));
    keys.push(kk_karpenter::labels::NVIDIA_DEVICE_PLUGIN_CONFIG.to_owned());
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let frozen = one_of("k", &FROZEN_PREFIXES, &keys);
    let kept_or_same = format!(
        "{} && oldObject.metadata.labels[k] == object.metadata.labels[k]",
        has_label("oldObject", "k")
    );
    format!(
        "!variables.nodeUpdate || (\
         (!has(object.metadata.labels) || object.metadata.labels.all(k, !{frozen} || ({kept_or_same}))) && \
         (!has(oldObject.metadata.labels) || oldObject.metadata.labels.all(k, !{frozen} || {})))",
        has_label("object", "k")
    )
}

/// Rule 2: pool-identity labels agree with the template of the node's pool, when it is ours.
fn identity_agrees(spec: &ClusterSpec) -> String {
    let keys: Vec<String> = identity_keys(spec).into_iter().collect();
    let keys = list(keys.iter().map(String::as_str));
    let pool_label = string_literal(NODEPOOL_LABEL);
    format!(
        "!(variables.pool in variables.templates) || !(request.operation == 'CREATE' || \
         {keys}.exists(k, {old} != {new}) || {old_pool} != variables.pool) || \
         {keys}.all(k, !{has} || (k in variables.templates[variables.pool] && \
         variables.templates[variables.pool][k] == object.metadata.labels[k]))",
        old = label("oldObject", "k"),
        new = label("object", "k"),
        old_pool = label("oldObject", &pool_label),
        has = has_label("object", "k"),
    )
}

/// Rule 3 for one of the status maps (`capacity`, `allocatable`).
fn accelerators_allowed(field: &str) -> String {
    let accelerator = one_of("r", &ACCELERATOR_PREFIXES, &ACCELERATOR_KEYS);
    let new = format!("object.status.{field}[r]");
    let old = format!("oldObject.status.{field}");
    format!(
        "!variables.byNode || !has(object.status) || !has(object.status.{field}) || \
         object.status.{field}.all(r, !{accelerator} || !quantity({new}).isGreaterThan(quantity('0')) || \
         variables.mayAccelerate || (request.operation == 'UPDATE' && has(oldObject.status) && \
         has({old}) && r in {old} && quantity({new}).compareTo(quantity({old}[r])) <= 0))"
    )
}

fn policy(spec: &ClusterSpec, labels: &Value) -> Value {
    let instance = string_literal(INSTANCE_NAME_PATTERN);
    let gpu_pools: Vec<&str> = spec
        .pools
        .iter()
        .filter(|p| p.pool_type == PoolType::Gpu)
        .map(|p| p.name.as_str())
        .collect();
    let taint = string_literal(UNREGISTERED_TAINT);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": NAME, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    // A node writes its status through the subresource; labels can change there too.
                    "resources": ["nodes", "nodes/status"], "operations": ["CREATE", "UPDATE"],
                }],
            },
            "matchConditions": [
                { "name": "instance-named", "expression": format!("object.metadata.name.matches({instance})") },
            ],
            "variables": [
                { "name": "byNode", "expression": "'system:nodes' in request.userInfo.groups" },
                { "name": "nodeUpdate", "expression": "variables.byNode && request.operation == 'UPDATE'" },
                { "name": "pool", "expression": label("object", &string_literal(NODEPOOL_LABEL)) },
                { "name": "templates", "expression": templates(spec) },
                {
                    "name": "mayAccelerate",
                    "expression": format!(
                        "request.operation == 'UPDATE' && \
                         !(has(object.spec.taints) && object.spec.taints.exists(t, t.key == {taint})) && \
                         (!(variables.pool in variables.templates) || variables.pool in {})",
                        list(gpu_pools.iter().copied())
                    ),
                },
            ],
            "validations": [
                {
                    "expression": frozen_labels_unchanged(spec),
                    "message": "a node may not change its pool, accelerator, capacity-type, instance or zone labels: Karpenter sets them from the node's NodeClaim",
                    "reason": "Forbidden",
                },
                {
                    "expression": identity_agrees(spec),
                    "message": "a node's pool labels must be the ones its NodePool's template gives (karpenter.sh/nodepool names the pool)",
                    "reason": "Forbidden",
                },
                {
                    "expression": accelerators_allowed("capacity"),
                    "message": "a node advertises accelerators (nvidia.com/*, aws.amazon.com/neuron*, amd.com/gpu) only once registered in a GPU pool, and never more than it had before",
                    "reason": "Forbidden",
                },
                {
                    "expression": accelerators_allowed("allocatable"),
                    "message": "a node advertises allocatable accelerators only once registered in a GPU pool, and never more than it had before",
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

pub fn manifests(spec: &ClusterSpec) -> Vec<Value> {
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1 });
    vec![
        policy(spec, &labels),
        crate::admission::deny_binding(NAME, &labels),
    ]
}

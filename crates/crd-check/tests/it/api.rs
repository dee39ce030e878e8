//! The public API and the create-time pipeline steps that the fixtures do not single out.

use kk_crd_check::{CheckError, Violation, ViolationKind, known_kinds, rule_summary, validate};
use serde_json::{Value, json};

fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@v20250101"}],
            "role": "KarpenterNodeRole-demo",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"id": "sg-0123456789abcdef0"}]
        }
    })
}

fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]
        }}}
    })
}

fn found(violations: &[Violation], kind: ViolationKind, path: &str, message: &str) -> bool {
    violations
        .iter()
        .any(|v| v.kind == kind && v.path == path && v.message.contains(message))
}

#[test]
fn known_kinds_lists_every_served_version() {
    let kinds = known_kinds();
    // Karpenter v1.15.2: EC2NodeClass, NodeClaim, NodePool, NodeOverlay, CapacityBuffer; Kubean: 4.
    assert_eq!(kinds.len(), 9, "{kinds:?}");
    assert!(kinds.contains(&("karpenter.sh/v1".into(), "NodePool".into())));
    assert!(kinds.contains(&("karpenter.sh/v1alpha1".into(), "NodeOverlay".into())));
    assert!(kinds.contains(&("kubean.io/v1alpha1".into(), "ClusterOperation".into())));
}

#[test]
fn minimal_objects_are_valid() {
    assert_eq!(validate(&node_class()), Ok(vec![]));
    assert_eq!(validate(&node_pool()), Ok(vec![]));
}

#[test]
fn errors_are_values() {
    assert_eq!(validate(&json!("NodePool")), Err(CheckError::NotAnObject));
    let mut wrong_version = node_pool();
    wrong_version["apiVersion"] = json!("karpenter.sh/v1beta1");
    let err = validate(&wrong_version).unwrap_err();
    assert_eq!(
        err,
        CheckError::UnknownKind {
            api_version: "karpenter.sh/v1beta1".into(),
            kind: "NodePool".into()
        }
    );
    assert!(err.to_string().contains("karpenter.sh/v1beta1"));
}

#[test]
fn defaults_are_applied_before_validation() {
    // `nodes` is required in a budget but defaults to 10%, so the apiserver accepts this.
    let mut pool = node_pool();
    pool["spec"]["disruption"] =
        json!({"consolidateAfter": "1m", "budgets": [{"reasons": ["Empty"]}]});
    assert_eq!(validate(&pool), Ok(vec![]));
    // Without a default the same omission is an error.
    pool["spec"]["template"]["spec"]["nodeClassRef"] =
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"});
    let v = validate(&pool).unwrap();
    assert!(
        found(
            &v,
            ViolationKind::Schema,
            "spec.template.spec.nodeClassRef.name",
            "Required value"
        ),
        "{v:?}"
    );
}

#[test]
fn status_is_dropped_on_create_and_nulls_are_pruned() {
    let mut class = node_class();
    class["status"] = json!({"anything": [1, 2, 3], "conditions": "not a list"});
    class["spec"]["userData"] = Value::Null;
    class["spec"]["tags"] = Value::Null;
    assert_eq!(validate(&class), Ok(vec![]));
}

#[test]
fn unknown_fields_anywhere_are_reported() {
    let mut pool = node_pool();
    pool["extra"] = json!(1);
    pool["spec"]["template"]["spec"]["requirements"][0]["valuez"] = json!(["x"]);
    pool["metadata"]["labels"] = json!({"a": "b"});
    let v = validate(&pool).unwrap();
    let unknown: Vec<String> = v
        .iter()
        .filter(|v| v.kind == ViolationKind::UnknownField)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        unknown,
        [
            "unknown field \"extra\"",
            "unknown field \"spec.template.spec.requirements[0].valuez\""
        ]
    );
}

#[test]
fn metadata_needs_a_name() {
    let mut pool = node_pool();
    pool["metadata"] = json!({"labels": {"a": "b"}});
    let v = validate(&pool).unwrap();
    assert!(
        found(
            &v,
            ViolationKind::Schema,
            "metadata.name",
            "Required value: name or generateName is required"
        ),
        "{v:?}"
    );
    pool["metadata"] = json!({"generateName": "pool-"});
    assert_eq!(validate(&pool), Ok(vec![]));
}

#[test]
fn bounds_enums_and_lengths() {
    let mut pool = node_pool();
    pool["spec"]["weight"] = json!(0);
    pool["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Near");
    let v = validate(&pool).unwrap();
    assert!(
        found(
            &v,
            ViolationKind::Schema,
            "spec.weight",
            "Invalid value: 0: spec.weight in body should be greater than or equal to 1"
        ),
        "{v:?}"
    );
    assert!(found(
        &v,
        ViolationKind::Schema,
        "spec.template.spec.requirements[0].operator",
        "Unsupported value: \"Near\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\", \"Gte\", \"Lte\""
    ));
    let mut class = node_class();
    class["spec"]["amiSelectorTerms"] = json!([{"alias": "al2023@0123456789012345678901234567"}]);
    let v = validate(&class).unwrap();
    assert!(
        found(
            &v,
            ViolationKind::Schema,
            "spec.amiSelectorTerms[0].alias",
            "Too long: may not be more than 30 bytes"
        ),
        "{v:?}"
    );
    class["spec"]["amiSelectorTerms"] = json!([]);
    let v = validate(&class).unwrap();
    assert!(
        found(
            &v,
            ViolationKind::Schema,
            "spec.amiSelectorTerms",
            "Invalid value: 0: spec.amiSelectorTerms in body should have at least 1 items"
        ),
        "{v:?}"
    );
}

#[test]
fn results_are_sorted_and_deterministic() {
    let mut pool = node_pool();
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]},
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["b"]},
        {"key": "karpenter.sh/nope", "operator": "Gt", "values": ["1", "2"]}
    ]);
    let first = validate(&pool).unwrap();
    assert!(first.len() >= 4, "{first:?}");
    let mut sorted = first.clone();
    sorted.sort_by(|a, b| (&a.path, &a.message).cmp(&(&b.path, &b.message)));
    assert_eq!(first, sorted);
    assert_eq!(validate(&pool).unwrap(), first);
}

#[test]
fn rule_summary_counts_the_embedded_rules() {
    let summary = rule_summary();
    assert_eq!(
        (summary.total, summary.compiled, summary.transition),
        (84, 84, 4)
    );
    assert_eq!(summary.failures, vec![]);
}

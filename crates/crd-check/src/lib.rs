//! Validates Kubernetes objects against the real Karpenter v1 (v1.15.2) and Kubean CRDs, the way
//! the kube-apiserver does on create:
//!
//! Owns "would the apiserver accept this object" against the embedded CRDs. Must not read CRDs
//! at run time, do I/O, or check anything across objects (that is lint's job).
//!
//! 1. `.status` is dropped when the CRD has a status subresource;
//! 2. fields the schema does not declare are pruned (and reported as [`ViolationKind::UnknownField`],
//!    as `kubectl --validate=strict` would);
//! 3. schema `default`s are applied;
//! 4. the OpenAPI v3 keywords are checked ([`ViolationKind::Schema`]);
//! 5. unless step 4 found an error of the kinds the apiserver treats as blocking (wrong type,
//!    required, enum, too long, too many), every `x-kubernetes-validations` CEL rule runs on
//!    the defaulted object ([`ViolationKind::Cel`]). Transition rules (`oldSelf`) are skipped.
//!
//! Paths and messages follow the apiserver's: `spec.amiSelectorTerms[0].alias`, `Required value`,
//! `Invalid value: "x": spec.y in body should match '…'`, the CEL rule's `message` verbatim.
//! The CRDs are embedded at build time; nothing is read at run time.

mod celrules;
mod embedded;
mod report;
mod schema;
mod structural;

use std::fmt;

use serde_json::Value;

use crate::report::Issue;
pub use crate::report::ViolationKind;

/// One reason the apiserver would refuse (or, for unknown fields, silently change) the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Field path in apiserver style: `spec.amiSelectorTerms[0].alias`, `spec` for a rule on
    /// the spec object, `""` for the whole object. As in the apiserver, a map entry is
    /// `spec.limits.cpu` in schema errors and `spec.limits[cpu]` in CEL errors.
    pub path: String,
    /// The apiserver's error text without the path, e.g. `Required value` or
    /// `Invalid value: must specify exactly one of ['role', 'instanceProfile']`.
    pub message: String,
    pub kind: ViolationKind,
}

/// Why an object could not be validated at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// No embedded CRD serves this apiVersion and kind.
    UnknownKind { api_version: String, kind: String },
    /// The object is not a JSON object.
    NotAnObject,
}

impl fmt::Display for Violation {
    /// `path: message` as kubectl prints it; unknown fields read `unknown field "spec.x"` alone.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.kind == ViolationKind::UnknownField {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ViolationKind::Schema => "schema",
            ViolationKind::Cel => "cel",
            ViolationKind::UnknownField => "unknown-field",
        })
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::UnknownKind { api_version, kind } => {
                write!(
                    f,
                    "no embedded CRD serves apiVersion {api_version:?} kind {kind:?}"
                )
            }
            CheckError::NotAnObject => f.write_str("the object is not a JSON/YAML mapping"),
        }
    }
}

impl std::error::Error for CheckError {}

/// Validates `object` (apiVersion+kind pick the CRD and version). Returns all violations, sorted
/// by path then message (deterministic); an empty list means the apiserver would accept it.
pub fn validate(object: &Value) -> Result<Vec<Violation>, CheckError> {
    let Value::Object(root) = object else {
        return Err(CheckError::NotAnObject);
    };
    let text = |k: &str| {
        root.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let Some(crd) = embedded::find(&api_version, &kind) else {
        return Err(CheckError::UnknownKind { api_version, kind });
    };

    Ok(check(object, &crd.schema, crd.status_subresource))
}

/// The create-time pipeline against one schema.
fn check(object: &Value, schema: &schema::Node, status_subresource: bool) -> Vec<Violation> {
    let mut object = object.clone();
    if status_subresource && let Value::Object(map) = &mut object {
        map.remove("status");
    }
    let mut issues = Vec::new();
    structural::prune(&mut object, schema, &mut issues);
    structural::prune_nulls(&mut object, Some(schema));
    structural::apply_defaults(&mut object, schema);
    structural::validate(&object, schema, "", &mut issues);
    if let Value::Object(map) = &object {
        structural::check_metadata(map, &mut issues);
    }
    structural::check_list_types(&object, schema, "", &mut issues);
    // Like the apiserver, CEL rules only run on an object that passed the blocking checks.
    if issues.iter().any(|i| i.blocking) {
        issues.push(Issue::cel_not_checked());
    } else {
        celrules::validate(&object, schema, &mut issues);
    }

    let mut violations: Vec<Violation> = issues
        .into_iter()
        .map(|i| Violation {
            path: i.path,
            message: i.message,
            kind: i.kind,
        })
        .collect();
    violations.sort_by(|a, b| (&a.path, &a.message, a.kind).cmp(&(&b.path, &b.message, b.kind)));
    violations.dedup();
    violations
}

/// Which (group/version, kind) pairs are known, in embedding order.
pub fn known_kinds() -> Vec<(String, String)> {
    embedded::CRDS
        .iter()
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect()
}

/// The CEL rules of the embedded CRDs, and those that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSummary {
    /// Every `x-kubernetes-validations` rule of every served version.
    pub total: usize,
    /// Rules (and their `messageExpression`s) that parse.
    pub compiled: usize,
    /// Rules that read `oldSelf`; they are skipped on create.
    pub transition: usize,
    /// Rules that do not parse or call a function the CEL library lacks.
    pub failures: Vec<RuleFailure>,
}

/// A rule that validation cannot evaluate; such a rule is reported on every object it applies to,
/// never skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFailure {
    pub api_version: String,
    pub kind: String,
    /// The CRD file, e.g. `karpenter/karpenter.sh_nodepools.yaml`.
    pub source: String,
    /// Schema location, with `[*]` for list items and map values.
    pub schema_path: String,
    pub rule: String,
    pub error: String,
}

/// Compiles every embedded rule and looks up every function it calls.
pub fn rule_summary() -> RuleSummary {
    let ctx = celrules::base_context();
    let mut summary = RuleSummary {
        total: 0,
        compiled: 0,
        transition: 0,
        failures: Vec::new(),
    };
    for crd in embedded::CRDS.iter() {
        crd.schema.for_each_rule("", &mut |path, rule| {
            summary.total += 1;
            summary.transition += usize::from(rule.uses_old_self);
            let message_error = match &rule.message_program {
                Some(Err(e)) => Some(format!(
                    "messageExpression {:?} does not compile: {e}",
                    rule.message_expression.as_deref().unwrap_or_default()
                )),
                _ => None,
            };
            let error = match &rule.program {
                Err(e) => Some(format!("does not compile: {e}")),
                Ok(_) if message_error.is_some() => message_error,
                Ok(program) => {
                    summary.compiled += 1;
                    let missing = celrules::missing_functions(program, &ctx);
                    (!missing.is_empty()).then(|| {
                        format!(
                            "calls functions the CEL library lacks: {}",
                            missing.join(", ")
                        )
                    })
                }
            };
            if let Some(error) = error {
                summary.failures.push(RuleFailure {
                    api_version: crd.api_version.clone(),
                    kind: crd.kind.clone(),
                    source: crd.source.clone(),
                    schema_path: path.to_owned(),
                    rule: rule.rule.clone(),
                    error,
                });
            }
        });
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_crds_load() {
        let kinds = known_kinds();
        for (api_version, kind) in [
            ("karpenter.k8s.aws/v1", "EC2NodeClass"),
            ("karpenter.sh/v1", "NodePool"),
            ("karpenter.sh/v1", "NodeClaim"),
            ("kubean.io/v1alpha1", "Cluster"),
            ("kubean.io/v1alpha1", "ClusterOperation"),
            ("kubean.io/v1alpha1", "LocalArtifactSet"),
            ("kubean.io/v1alpha1", "Manifest"),
        ] {
            assert!(
                kinds.contains(&(api_version.to_owned(), kind.to_owned())),
                "{api_version} {kind} missing from {kinds:?}"
            );
        }
    }

    /// Every rule of every embedded CRD parses and calls only functions the library provides.
    #[test]
    fn every_embedded_cel_rule_compiles() {
        let summary = rule_summary();
        assert!(summary.failures.is_empty(), "{:#?}", summary.failures);
        // The Karpenter v1.15.2 CRDs carry 84 rules (EC2NodeClass 44: its kubelet block is
        // free-form since 1.15, 54 in v1.14.1; NodePool 20, NodeClaim 10, NodeOverlay 8,
        // CapacityBuffer 2), 4 of them transition rules; Kubean's carry none. A changed count
        // means changed CRDs.
        assert_eq!(summary.total, 84);
        assert_eq!(summary.compiled, 84);
        assert_eq!(summary.transition, 4);
    }

    #[test]
    fn every_embedded_pattern_compiles() {
        let mut bad = Vec::new();
        let mut count = 0;
        for crd in embedded::CRDS.iter() {
            crd.schema.for_each_pattern("", &mut |path, p| {
                count += 1;
                if let Err(e) = &p.regex {
                    bad.push(format!("{} {path}: {}: {e}", crd.kind, p.source));
                }
            });
        }
        assert!(count > 20, "only {count} patterns found");
        assert!(bad.is_empty(), "{bad:#?}");
    }

    #[test]
    fn non_objects_and_unknown_kinds_are_errors() {
        assert_eq!(
            validate(&serde_json::json!([1])),
            Err(CheckError::NotAnObject)
        );
        assert_eq!(
            validate(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            Err(CheckError::UnknownKind {
                api_version: "v1".into(),
                kind: "ConfigMap".into()
            })
        );
    }

    fn run(schema: Value, object: Value) -> Vec<(String, String, ViolationKind)> {
        check(&object, &schema::Node::parse(&schema), false)
            .into_iter()
            .map(|v| (v.path, v.message, v.kind))
            .collect()
    }

    fn spec_schema(spec: Value) -> Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec
            }
        })
    }

    fn object(spec: Value) -> Value {
        serde_json::json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "spec": spec})
    }

    fn cel(path: &str, message: &str) -> (String, String, ViolationKind) {
        (path.to_owned(), message.to_owned(), ViolationKind::Cel)
    }

    #[test]
    fn cel_sees_defaults() {
        let schema = spec_schema(serde_json::json!({
            "type": "object",
            "properties": {"mode": {"type": "string", "default": "a"}},
            "x-kubernetes-validations": [
                {"rule": "!has(self.mode) || self.mode == 'b'", "message": "mode must be b"}
            ]
        }));
        assert_eq!(
            run(schema, object(serde_json::json!({}))),
            [cel("spec", "Invalid value: mode must be b")]
        );
    }

    #[test]
    fn rule_messages_paths_and_reasons() {
        let schema = spec_schema(serde_json::json!({
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "x-kubernetes-validations": [
                {"rule": "self.x > 5", "messageExpression": "'x is ' + string(self.x)", "message": "static"},
                {"rule": "self.x > 6", "messageExpression": "self.nope", "message": "fallback"},
                {"rule": "self.x > 7"},
                {"rule": "self.x > 8", "message": "at x", "fieldPath": ".x", "reason": "FieldValueForbidden"},
                {"rule": "self.x == oldSelf.x", "message": "transition"},
                {"rule": "oldSelf.hasValue() || self.x > 9", "message": "optional old self", "optionalOldSelf": true},
                {"rule": "self.x >", "message": "broken"}
            ]
        }));
        let got = run(schema, object(serde_json::json!({"x": 1})));
        let (compile_errors, rest): (Vec<_>, Vec<_>) = got
            .into_iter()
            .partition(|g| g.1.contains("rule compile error"));
        assert_eq!(
            rest,
            [
                cel("spec", "Invalid value: failed rule: self.x > 7"),
                cel("spec", "Invalid value: fallback"),
                cel("spec", "Invalid value: optional old self"),
                cel("spec", "Invalid value: x is 1"),
                cel("spec.x", "Forbidden: at x"),
            ]
        );
        // A rule that does not compile is reported on the object, never skipped.
        assert_eq!(compile_errors.len(), 1, "{compile_errors:?}");
        assert_eq!(compile_errors[0].0, "spec");
        assert!(
            compile_errors[0]
                .1
                .starts_with("Invalid value: \"object\": rule compile error:")
        );
    }

    #[test]
    fn rules_run_on_every_item_and_map_value() {
        let positive = serde_json::json!({"type": "integer",
            "x-kubernetes-validations": [{"rule": "self > 0", "message": "positive"}]});
        let schema = spec_schema(serde_json::json!({
            "type": "object",
            "properties": {
                "list": {"type": "array", "items": positive},
                "map": {"type": "object", "additionalProperties": positive}
            }
        }));
        let got = run(
            schema,
            object(serde_json::json!({"list": [1, 0, 2], "map": {"a": 1, "b": -1}})),
        );
        assert_eq!(
            got,
            [
                cel("spec.list[1]", "Invalid value: 0: positive"),
                cel("spec.map[b]", "Invalid value: -1: positive")
            ]
        );
    }

    #[test]
    fn blocking_schema_errors_skip_cel() {
        let schema = spec_schema(serde_json::json!({
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "string", "pattern": "^[a-z]+$"}},
            "x-kubernetes-validations": [{"rule": "false", "message": "never"}]
        }));
        let got = run(schema.clone(), object(serde_json::json!({"x": "one"})));
        assert!(got.iter().all(|g| g.2 == ViolationKind::Schema), "{got:?}");
        assert!(
            got.iter()
                .any(|g| g.0.is_empty() && g.1.contains("some validation rules were not checked"))
        );
        // A pattern failure is not blocking: the rule still runs.
        let got = run(schema, object(serde_json::json!({"x": 1, "y": "B"})));
        assert_eq!(
            got,
            [
                cel("spec", "Invalid value: never"),
                (
                    "spec.y".to_owned(),
                    "Invalid value: \"B\": spec.y in body should match '^[a-z]+$'".to_owned(),
                    ViolationKind::Schema
                )
            ]
        );
    }

    #[test]
    fn string_lengths_count_characters() {
        let schema = spec_schema(serde_json::json!({
            "type": "object",
            "properties": {"s": {"type": "string", "maxLength": 3}}
        }));
        assert!(run(schema.clone(), object(serde_json::json!({"s": "ééé"}))).is_empty());
        let got = run(schema, object(serde_json::json!({"s": "éééé"})));
        assert!(got.contains(&(
            "spec.s".to_owned(),
            "Too long: may not be more than 3 bytes".to_owned(),
            ViolationKind::Schema
        )));
    }
}

//! Runs `x-kubernetes-validations` rules the way the apiextensions-apiserver CEL validator does:
//! each rule at its schema node with `self` bound to the (defaulted) value there, typed by the
//! schema. The Kubernetes CEL function library comes from `kube-cel`.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock};

use kube_cel::KubeCelExt;
use kube_cel::cel::common::ast::{Expr, IdedExpr};
use kube_cel::cel::objects::{Key, Map as CelMap, OptionalValue};
use kube_cel::cel::{Context, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use crate::ViolationKind;
use crate::report::{Issue, child, go_quote, go_value, index, key};
use crate::schema::{Node, Rule};
use crate::structural::{MAX_VALUE_DEPTH, parse_date_time};

/// A context with the standard CEL functions and the Kubernetes libraries.
pub(crate) fn base_context() -> Context<'static> {
    Context::default().with_all()
}

/// Evaluates every rule of the tree under `node` against `value` (already pruned and defaulted).
pub(crate) fn validate(value: &Value, node: &Node, out: &mut Vec<Issue>) {
    let ctx = base_context();
    walk(value, node, "", &ctx, out);
}

fn walk(value: &Value, node: &Node, path: &str, ctx: &Context<'_>, out: &mut Vec<Issue>) {
    // Rules only ever see non-null values.
    if value.is_null() {
        return;
    }
    if !node.rules.is_empty() {
        eval_rules(value, node, path, ctx, out);
    }
    for branch in &node.all_of {
        walk(value, branch, path, ctx, out);
    }
    match value {
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    walk(item, item_node, &index(path, i), ctx, out);
                }
            }
        }
        Value::Object(map) => {
            if let Some(add) = node.additional.schema() {
                for (k, v) in map {
                    walk(v, add, &key(path, k), ctx, out);
                }
            }
            for (k, v) in map {
                if let Some(prop) = node.properties.get(k) {
                    walk(v, prop, &child(path, k), ctx, out);
                }
            }
        }
        _ => {}
    }
}

fn eval_rules(value: &Value, node: &Node, path: &str, ctx: &Context<'_>, out: &mut Vec<Issue>) {
    let mut scope = ctx.new_inner_scope();
    scope.add_variable_from_value("self", to_cel(value, Some(node), 0));
    // On create `oldSelf` exists only for optionalOldSelf rules, and holds no value.
    let mut optional_scope = scope.new_inner_scope();
    optional_scope
        .add_variable_from_value("oldSelf", CelValue::Opaque(Arc::new(OptionalValue::none())));
    let type_shown = go_quote(&node.type_name);
    for rule in &node.rules {
        let program = match &rule.program {
            Ok(p) => p,
            Err(e) => {
                let detail = format!("rule compile error: {e}");
                out.push(cel_issue(
                    path,
                    format!("Invalid value: {type_shown}: {detail}"),
                ));
                continue;
            }
        };
        // Transition rules compare with the stored object; there is none on create.
        if rule.uses_old_self && !rule.optional_old_self {
            continue;
        }
        let rule_ctx = if rule.optional_old_self {
            &optional_scope
        } else {
            &scope
        };
        let result = catch_unwind(AssertUnwindSafe(|| program.execute(rule_ctx)));
        let detail = match result {
            Ok(Ok(CelValue::Bool(true))) => continue,
            Ok(Ok(CelValue::Bool(false))) => {
                out.push(failure(value, node, path, rule, rule_ctx));
                continue;
            }
            Ok(Ok(other)) => format!(
                "rule evaluated to {:?}, not a bool, evaluating rule: {}",
                other.type_of(),
                rule_error_string(rule)
            ),
            Ok(Err(ExecutionError::NoSuchOverload)) => format!(
                "'no such overload': call arguments did not match a supported operator, function \
                 or macro signature for rule: {}",
                rule_error_string(rule)
            ),
            Ok(Err(ExecutionError::UndeclaredReference(name))) => format!(
                "undeclared reference to '{name}' (not provided by kube-cel) evaluating rule: {}",
                rule_error_string(rule)
            ),
            Ok(Err(e)) => format!("{e} evaluating rule: {}", rule_error_string(rule)),
            Err(_) => format!(
                "the CEL interpreter panicked evaluating rule: {}",
                rule_error_string(rule)
            ),
        };
        out.push(cel_issue(
            path,
            format!("Invalid value: {type_shown}: {detail}"),
        ));
    }
}

fn cel_issue(path: &str, message: String) -> Issue {
    Issue {
        path: path.to_owned(),
        message,
        kind: ViolationKind::Cel,
        blocking: false,
    }
}

/// The error for a rule that evaluated to false.
fn failure(value: &Value, node: &Node, path: &str, rule: &Rule, ctx: &Context<'_>) -> Issue {
    let path = match rule
        .field_path
        .as_deref()
        .map(|p| p.trim_start_matches('.'))
    {
        Some(fp) if !fp.is_empty() => child(path, fp),
        _ => path.to_owned(),
    };
    let detail = rule
        .message_program
        .as_ref()
        .and_then(|p| p.as_ref().ok())
        .and_then(|p| evaluated_message(p, ctx))
        .unwrap_or_else(|| rule_message_or_default(rule));
    // Objects and lists are not echoed back, scalars are.
    let shown = match node.type_name.as_str() {
        "object" | "array" => None,
        _ => Some(go_value(value)),
    };
    let message = match rule.reason.as_deref() {
        Some("FieldValueForbidden") => format!("Forbidden: {detail}"),
        Some("FieldValueRequired") => format!("Required value: {detail}"),
        Some("FieldValueDuplicate") => match shown {
            Some(v) => format!("Duplicate value: {v}"),
            None => "Duplicate value".to_owned(),
        },
        _ => match shown {
            Some(v) => format!("Invalid value: {v}: {detail}"),
            None => format!("Invalid value: {detail}"),
        },
    };
    cel_issue(&path, message)
}

/// A `messageExpression` result, when it is a usable one-line non-empty string.
fn evaluated_message(program: &Program, ctx: &Context<'_>) -> Option<String> {
    let result = catch_unwind(AssertUnwindSafe(|| program.execute(ctx))).ok()?;
    match result {
        Ok(CelValue::String(s)) => {
            let trimmed = s.trim();
            let ok = !trimmed.is_empty() && !trimmed.contains('\n') && trimmed.len() <= 5 * 1024;
            ok.then(|| trimmed.to_owned())
        }
        _ => None,
    }
}

fn rule_message_or_default(rule: &Rule) -> String {
    match rule.message.as_deref().map(str::trim) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => format!("failed rule: {}", rule.rule.trim()),
    }
}

fn rule_error_string(rule: &Rule) -> String {
    match rule.message.as_deref().map(str::trim) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => rule.rule.trim().to_owned(),
    }
}

/// Converts JSON to a CEL value typed by the schema, as `UnstructuredToVal` does: `number` is
/// always a double, int-or-string keeps its JSON type, declared field names are escaped, map
/// keys are not, and `date-time` / `duration` / `byte` strings become timestamps, durations
/// and bytes.
pub(crate) fn to_cel(value: &Value, node: Option<&Node>, depth: usize) -> CelValue {
    if depth > MAX_VALUE_DEPTH {
        return CelValue::Null;
    }
    let type_name = node.map_or("", |n| n.type_name.as_str());
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            let float = n.as_f64().unwrap_or(f64::NAN);
            if type_name == "number" {
                CelValue::Float(float)
            } else if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if type_name == "integer" && float.fract() == 0.0 && float.abs() < 9.2e18 {
                CelValue::Int(float as i64)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                CelValue::Float(float)
            }
        }
        Value::String(s) => string_to_cel(s, node),
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            CelValue::List(Arc::new(
                items
                    .iter()
                    .map(|v| to_cel(v, item_node, depth + 1))
                    .collect(),
            ))
        }
        Value::Object(map) => {
            let mut out = HashMap::with_capacity(map.len());
            let is_map = node.is_some_and(|n| n.additional.allows() && n.properties.is_empty());
            for (k, v) in map {
                let (name, field) = if is_map {
                    (Some(k.clone()), node.and_then(|n| n.additional.schema()))
                } else {
                    let field = node.and_then(|n| n.properties.get(k));
                    let declared = node.is_some_and(|n| !n.properties.is_empty());
                    let name = if declared {
                        escape_field_name(k)
                    } else {
                        Some(k.clone())
                    };
                    (name, field)
                };
                // Names that cannot be CEL identifiers are simply not reachable from a rule.
                if let Some(name) = name {
                    out.insert(Key::String(Arc::new(name)), to_cel(v, field, depth + 1));
                }
            }
            CelValue::Map(CelMap { map: Arc::new(out) })
        }
    }
}

fn string_to_cel(s: &str, node: Option<&Node>) -> CelValue {
    let string = || CelValue::String(Arc::new(s.to_owned()));
    let Some(node) = node.filter(|n| n.type_name == "string") else {
        return string();
    };
    match node.format.as_deref() {
        Some("date-time" | "datetime") => {
            parse_date_time(s).map_or_else(string, CelValue::Timestamp)
        }
        Some("duration") => parse_duration(s).unwrap_or_else(string),
        Some("byte") => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_or_else(|_| string(), |b| CelValue::Bytes(Arc::new(b)))
        }
        _ => string(),
    }
}

/// Go duration text to a CEL duration, through CEL's own `duration()` so the syntax matches.
fn parse_duration(s: &str) -> Option<CelValue> {
    static PROGRAM: LazyLock<Option<Program>> =
        LazyLock::new(|| Program::compile("duration(text)").ok());
    let program = PROGRAM.as_ref()?;
    let mut ctx = Context::default();
    ctx.add_variable_from_value("text", CelValue::String(Arc::new(s.to_owned())));
    match catch_unwind(AssertUnwindSafe(|| program.execute(&ctx))) {
        Ok(Ok(d @ CelValue::Duration(_))) => Some(d),
        _ => None,
    }
}

/// CEL keywords that a field name must not shadow; such names are written `__name__`.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The apiserver's field-name escaping: `__` → `__underscores__`, `.` → `__dot__`,
/// `-` → `__dash__`, `/` → `__slash__`, keywords → `__kw__`; other names that are not
/// identifiers cannot be accessed (None).
pub(crate) fn escape_field_name(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    if !name.chars().all(valid) {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// Functions a program calls that `ctx` does not provide. cel-rust resolves functions only at
/// evaluation, so a missing one would otherwise surface only when its branch runs.
pub(crate) fn missing_functions(program: &Program, ctx: &Context<'_>) -> Vec<String> {
    let mut bound = vec!["self".to_owned(), "oldSelf".to_owned()];
    let mut missing = Vec::new();
    collect_missing(program.expression(), ctx, &mut bound, &mut missing);
    missing.sort();
    missing.dedup();
    missing
}

fn collect_missing(
    expr: &IdedExpr,
    ctx: &Context<'_>,
    bound: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    match &expr.expr {
        Expr::Call(call) => {
            let name = call.func_name.as_str();
            let is_function = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
            if is_function {
                let namespace = match call.target.as_deref().map(|t| &t.expr) {
                    Some(Expr::Ident(prefix)) if !bound.contains(prefix) => Some(prefix.as_str()),
                    _ => None,
                };
                let probe = match namespace {
                    Some(ns) => format!("{ns}.{name}"),
                    None => name.to_owned(),
                };
                if !function_exists(&probe, ctx) {
                    missing.push(probe);
                }
            }
            if let Some(target) = &call.target {
                collect_missing(target, ctx, bound, missing);
            }
            for arg in &call.args {
                collect_missing(arg, ctx, bound, missing);
            }
        }
        Expr::Comprehension(comp) => {
            collect_missing(&comp.iter_range, ctx, bound, missing);
            let before = bound.len();
            bound.push(comp.iter_var.clone());
            bound.extend(comp.iter_var2.clone());
            bound.push(comp.accu_var.clone());
            for e in [
                &comp.accu_init,
                &comp.loop_cond,
                &comp.loop_step,
                &comp.result,
            ] {
                collect_missing(e, ctx, bound, missing);
            }
            bound.truncate(before);
        }
        Expr::List(list) => {
            for e in &list.elements {
                collect_missing(e, ctx, bound, missing);
            }
        }
        Expr::Select(select) => collect_missing(&select.operand, ctx, bound, missing),
        Expr::Map(_) | Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Calls `name()` with no arguments: only an unknown function answers "undeclared reference".
fn function_exists(name: &str, ctx: &Context<'_>) -> bool {
    let Ok(probe) = Program::compile(&format!("{name}()")) else {
        return true;
    };
    let result = catch_unwind(AssertUnwindSafe(|| probe.execute(ctx)));
    !matches!(result, Ok(Err(ExecutionError::UndeclaredReference(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaping_matches_the_apiserver() {
        assert_eq!(
            escape_field_name("namespace").as_deref(),
            Some("__namespace__")
        );
        assert_eq!(
            escape_field_name("a-b.c/d").as_deref(),
            Some("a__dash__b__dot__c__slash__d")
        );
        assert_eq!(escape_field_name("my_field").as_deref(), Some("my_field"));
        assert_eq!(
            escape_field_name("a__b").as_deref(),
            Some("a__underscores__b")
        );
        assert_eq!(escape_field_name("1abc"), None);
        assert_eq!(escape_field_name("a b"), None);
    }

    #[test]
    fn numbers_follow_the_schema_type() {
        let number = Node::parse(&json!({"type": "number"}));
        assert_eq!(to_cel(&json!(3), Some(&number), 0), CelValue::Float(3.0));
        let int = Node::parse(&json!({"type": "integer"}));
        assert_eq!(to_cel(&json!(3), Some(&int), 0), CelValue::Int(3));
        let ios = Node::parse(&json!({"x-kubernetes-int-or-string": true}));
        assert_eq!(to_cel(&json!(3), Some(&ios), 0), CelValue::Int(3));
        assert_eq!(
            to_cel(&json!("3"), Some(&ios), 0),
            CelValue::String(Arc::new("3".to_owned()))
        );
    }

    #[test]
    fn formats_become_cel_types() {
        let dt = Node::parse(&json!({"type": "string", "format": "date-time"}));
        assert!(matches!(
            to_cel(&json!("2024-01-02T03:04:05Z"), Some(&dt), 0),
            CelValue::Timestamp(_)
        ));
        let d = Node::parse(&json!({"type": "string", "format": "duration"}));
        assert!(matches!(
            to_cel(&json!("1h30m"), Some(&d), 0),
            CelValue::Duration(_)
        ));
        assert!(matches!(
            to_cel(&json!("soon"), Some(&d), 0),
            CelValue::String(_)
        ));
    }

    #[test]
    fn missing_functions_are_found() {
        let ctx = base_context();
        let p =
            Program::compile("self.all(x, x.split('@')[0].find('a') != '' && nope(x))").unwrap();
        assert_eq!(missing_functions(&p, &ctx), ["nope"]);
        let p = Program::compile("sets.contains([1], [1]) && nosuch.fn(1)").unwrap();
        assert_eq!(missing_functions(&p, &ctx), ["nosuch.fn"]);
    }
}

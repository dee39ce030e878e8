//! Field paths and error texts, spelled the way the kube-apiserver spells them
//! (`k8s.io/apimachinery/pkg/util/validation/field` and the kube-openapi validator).

use serde_json::{Number, Value};

/// Which check produced a [`Violation`](crate::Violation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// An OpenAPI v3 keyword: type, required, enum, pattern, bounds, list uniqueness…
    Schema,
    /// An `x-kubernetes-validations` rule failed, or could not be evaluated.
    Cel,
    /// A field the schema does not declare.
    UnknownField,
}

/// One finding before sorting; `blocking` marks the error kinds after which the apiserver skips
/// the CEL rules (unsupported value, required, too long, too many, wrong type).
#[derive(Debug, Clone)]
pub(crate) struct Issue {
    pub path: String,
    pub message: String,
    pub kind: ViolationKind,
    pub blocking: bool,
}

impl Issue {
    fn schema(path: &str, message: String, blocking: bool) -> Issue {
        Issue {
            path: path.to_owned(),
            message,
            kind: ViolationKind::Schema,
            blocking,
        }
    }

    /// `Required value` (optionally with a detail).
    pub fn required(path: &str, detail: &str) -> Issue {
        Issue::schema(path, with_detail("Required value", detail), true)
    }

    /// A value of the wrong JSON type: `Invalid value: "array": p in body must be of type string: "array"`.
    pub fn type_invalid(path: &str, actual: &str, expected: &str) -> Issue {
        let detail = format!(
            "{} must be of type {expected}: {}",
            in_body(path),
            go_quote(actual)
        );
        Issue::schema(
            path,
            format!("Invalid value: {}: {detail}", go_quote(actual)),
            true,
        )
    }

    /// A string that is not of its declared `format`.
    pub fn format_invalid(path: &str, value: &str, format: &str) -> Issue {
        let quoted = go_quote(value);
        let detail = format!("{} must be of type {format}: {quoted}", in_body(path));
        Issue::schema(path, format!("Invalid value: {quoted}: {detail}"), true)
    }

    /// A value outside `enum`.
    pub fn not_supported(path: &str, value: &Value, allowed: &[Value]) -> Issue {
        let allowed: Vec<String> = allowed
            .iter()
            .map(|v| match v {
                Value::String(s) => go_quote(s),
                other => go_quote(&other.to_string()),
            })
            .collect();
        let mut message = format!("Unsupported value: {}", go_value(value));
        if !allowed.is_empty() {
            message.push_str(": supported values: ");
            message.push_str(&allowed.join(", "));
        }
        Issue::schema(path, message, true)
    }

    /// Longer than `maxLength` (the apiserver says bytes although it counts characters).
    pub fn too_long(path: &str, max: u64) -> Issue {
        let unit = if max == 1 { "byte" } else { "bytes" };
        Issue::schema(
            path,
            format!("Too long: may not be more than {max} {unit}"),
            true,
        )
    }

    /// More than `maxItems` / `maxProperties`.
    pub fn too_many(path: &str, actual: usize, max: u64) -> Issue {
        let unit = if max == 1 { "item" } else { "items" };
        Issue::schema(
            path,
            format!("Too many: {actual}: must have at most {max} {unit}"),
            true,
        )
    }

    /// Any other failed keyword: `Invalid value: <value>: <detail>`.
    pub fn invalid(path: &str, value: &str, detail: String) -> Issue {
        Issue::schema(path, format!("Invalid value: {value}: {detail}"), false)
    }

    /// A repeated element of a `set` list or a repeated key of a `map` list.
    pub fn duplicate(path: &str, value: &Value) -> Issue {
        Issue::schema(path, format!("Duplicate value: {}", go_value(value)), false)
    }

    /// A field the schema does not declare (the apiserver prunes it; strict decoding refuses it).
    pub fn unknown_field(path: &str) -> Issue {
        Issue {
            path: path.to_owned(),
            message: format!("unknown field {}", go_quote(path)),
            kind: ViolationKind::UnknownField,
            blocking: false,
        }
    }

    /// The note the apiserver adds when it skips the CEL rules.
    pub fn cel_not_checked() -> Issue {
        Issue::schema(
            "",
            "Invalid value: null: some validation rules were not checked because the object was \
             invalid; correct the existing errors to complete validation"
                .to_owned(),
            false,
        )
    }
}

fn with_detail(head: &str, detail: &str) -> String {
    if detail.is_empty() {
        head.to_owned()
    } else {
        format!("{head}: {detail}")
    }
}

/// The subject of a kube-openapi message: `spec.x in body`.
pub(crate) fn in_body(path: &str) -> String {
    format!("{path} in body")
}

/// `a.b` + `c` → `a.b.c`; the root has the empty path.
pub(crate) fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// `a.b` + 3 → `a.b[3]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// A map entry as the CEL validator names it: `a.b[key]`.
pub(crate) fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// Renders a bad value as `field.Error` does: strings quoted Go-style, numbers and booleans bare,
/// anything else as JSON.
pub(crate) fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// A number as Go's `%v` prints an int64 or a float64.
pub(crate) fn go_number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else {
        f.to_string()
    }
}

/// Go's `%q`: double quotes, backslash escapes, non-printable characters as `\xNN` / `\uNNNN`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quoting_and_numbers_follow_go() {
        assert_eq!(go_quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(go_quote("\u{1}é"), "\"\\x01é\"");
        assert_eq!(go_value(&json!(5)), "5");
        assert_eq!(go_value(&json!(100.0)), "100");
        assert_eq!(go_value(&json!(1.5)), "1.5");
        assert_eq!(go_value(&json!([1])), "[1]");
    }

    #[test]
    fn paths() {
        assert_eq!(child("", "spec"), "spec");
        assert_eq!(child("spec", "role"), "spec.role");
        assert_eq!(index("spec.terms", 0), "spec.terms[0]");
        assert_eq!(key("spec.limits", "cpu"), "spec.limits[cpu]");
    }
}

//! What the apiserver does to a custom resource before its CEL rules run: prune unknown fields,
//! drop nulls, apply defaults, then check the OpenAPI keywords. Each step follows the
//! apiextensions-apiserver algorithm of the same name so that paths and messages match.

use serde_json::{Map, Value};

use crate::report::{Issue, child, go_number, go_quote, go_value, in_body, index};
use crate::schema::{Additional, Node};

/// Values nested deeper than this are left alone by the walks that follow the value rather than
/// the schema; it only bounds recursion on hostile input.
pub(crate) const MAX_VALUE_DEPTH: usize = 256;

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Removes fields the schema does not declare and reports each one.
pub(crate) fn prune(value: &mut Value, node: &Node, out: &mut Vec<Issue>) {
    // The resource root is an embedded resource: apiVersion, kind and metadata are never pruned.
    prune_at(value, Some(node), "", true, out, 0);
}

fn prune_at(
    value: &mut Value,
    node: Option<&Node>,
    path: &str,
    embedded: bool,
    out: &mut Vec<Issue>,
    depth: usize,
) {
    if depth > MAX_VALUE_DEPTH {
        return;
    }
    if let Some(n) = node.filter(|n| n.preserve_unknown) {
        skip_prune(value, n, path, out, depth);
        return;
    }
    match value {
        Value::Object(map) => {
            let Some(node) = node else {
                for k in map.keys() {
                    out.push(Issue::unknown_field(&child(path, k)));
                }
                map.clear();
                return;
            };
            let embedded = embedded || node.embedded_resource;
            map.retain(|k, v| {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                let p = child(path, k);
                if let Some(prop) = node.properties.get(k) {
                    prune_at(v, Some(prop), &p, false, out, depth + 1);
                    true
                } else if node.additional.allows() {
                    prune_at(v, node.additional.schema(), &p, false, out, depth + 1);
                    true
                } else {
                    out.push(Issue::unknown_field(&p));
                    false
                }
            });
        }
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            for (i, item) in items.iter_mut().enumerate() {
                prune_at(item, item_node, &index(path, i), false, out, depth + 1);
            }
        }
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields` unknown fields stay, but declared ones are still
/// pruned inside.
fn skip_prune(value: &mut Value, node: &Node, path: &str, out: &mut Vec<Issue>, depth: usize) {
    if depth > MAX_VALUE_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if node.embedded_resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let p = child(path, k);
                if let Some(prop) = node.properties.get(k) {
                    prune_at(v, Some(prop), &p, false, out, depth + 1);
                } else if node.additional.allows() {
                    prune_at(v, node.additional.schema(), &p, false, out, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    skip_prune(item, item_node, &index(path, i), out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Drops `null` where the schema neither allows it nor has a default for it.
pub(crate) fn prune_nulls(value: &mut Value, node: Option<&Node>) {
    let Some(node) = node else { return };
    match value {
        Value::Object(map) => map.retain(|k, v| {
            let field = node.properties.get(k).or_else(|| node.additional.schema());
            match field {
                Some(f) if v.is_null() && !f.nullable && f.default.is_none() => false,
                _ => {
                    prune_nulls(v, field);
                    true
                }
            }
        }),
        Value::Array(items) => {
            for item in items {
                prune_nulls(item, node.items.as_deref());
            }
        }
        _ => {}
    }
}

/// Fills absent (or non-nullable null) fields with their schema default, then descends, also
/// into the defaults just set.
pub(crate) fn apply_defaults(value: &mut Value, node: &Node) {
    match value {
        Value::Object(map) => {
            for (k, prop) in &node.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                let absent = map.get(k).is_none_or(|v| v.is_null() && !prop.nullable);
                if absent {
                    map.insert(k.clone(), default.clone());
                }
            }
            for (k, v) in map.iter_mut() {
                if let Some(prop) = node.properties.get(k) {
                    apply_defaults(v, prop);
                } else if let Some(add) = node.additional.schema() {
                    if v.is_null()
                        && !add.nullable
                        && let Some(default) = &add.default
                    {
                        *v = default.clone();
                    }
                    apply_defaults(v, add);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_node) = node.items.as_deref() else {
                return;
            };
            for item in items {
                if item.is_null()
                    && !item_node.nullable
                    && let Some(default) = &item_node.default
                {
                    *item = default.clone();
                }
                apply_defaults(item, item_node);
            }
        }
        _ => {}
    }
}

/// The JSON type name kube-openapi infers for a value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(value: &Value, actual: &str, allowed: &[&str]) -> bool {
    if allowed.contains(&actual) {
        return true;
    }
    match actual {
        // An integer is a number; a float with no fraction passes as an integer.
        "integer" => allowed.contains(&"number"),
        "number" => {
            allowed.contains(&"integer") && value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// Checks the OpenAPI keywords of `node` against `value` (the kube-openapi schema validator).
pub(crate) fn validate(value: &Value, node: &Node, path: &str, out: &mut Vec<Issue>) {
    let allowed = node.allowed_types();
    if value.is_null() {
        if !allowed.is_empty() && !node.nullable {
            out.push(Issue::type_invalid(path, "null", &allowed.join(",")));
        }
        check_enum(value, node, path, out);
        return;
    }
    let actual = json_type(value);
    if !allowed.is_empty() && !type_matches(value, actual, &allowed) {
        out.push(Issue::type_invalid(path, actual, &allowed.join(",")));
    }
    check_composition(value, node, path, out);
    match value {
        Value::String(s) => check_string(s, node, path, out),
        Value::Number(_) => check_number(value, node, path, out),
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    validate(item, item_node, &index(path, i), out);
                }
            }
            check_count(
                items.len(),
                node.min_items,
                node.max_items,
                "items",
                path,
                out,
            );
        }
        Value::Object(map) => check_object(map, node, path, out),
        _ => {}
    }
    check_enum(value, node, path, out);
}

fn check_enum(value: &Value, node: &Node, path: &str, out: &mut Vec<Issue>) {
    if let Some(allowed) = &node.enum_values
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        out.push(Issue::not_supported(path, value, allowed));
    }
}

/// Equality as Go's reflect.DeepEqual sees decoded JSON: numbers compare by value.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// anyOf / oneOf / allOf / not. Their own errors are "composite" errors, which the apiserver
/// reports without a field path.
fn check_composition(value: &Value, node: &Node, path: &str, out: &mut Vec<Issue>) {
    let run = |branch: &Node| {
        let mut errs = Vec::new();
        validate(value, branch, path, &mut errs);
        errs
    };
    if !node.any_of.is_empty() {
        let results: Vec<Vec<Issue>> = node.any_of.iter().map(run).collect();
        if results.iter().all(|r| !r.is_empty()) {
            out.push(composite(format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(path)
            )));
            // kube-openapi keeps the errors of the closest branch; fewest errors stands in for that.
            if let Some(best) = results.into_iter().min_by_key(Vec::len) {
                out.extend(best);
            }
        }
    }
    if !node.one_of.is_empty() {
        let results: Vec<Vec<Issue>> = node.one_of.iter().map(run).collect();
        let valid = results.iter().filter(|r| r.is_empty()).count();
        if valid != 1 {
            let found = if valid == 0 {
                "Found none valid".to_owned()
            } else {
                format!("Found {valid} valid alternatives")
            };
            out.push(composite(format!(
                "{} must validate one and only one schema (oneOf). {found}",
                go_quote(path)
            )));
            if valid == 0
                && let Some(best) = results.into_iter().min_by_key(Vec::len)
            {
                out.extend(best);
            }
        }
    }
    if !node.all_of.is_empty() {
        let results: Vec<Vec<Issue>> = node.all_of.iter().map(run).collect();
        let valid = results.iter().filter(|r| r.is_empty()).count();
        if valid != results.len() {
            let none = if valid == 0 { ". None validated" } else { "" };
            out.push(composite(format!(
                "{} must validate all the schemas (allOf){none}",
                go_quote(path)
            )));
            out.extend(results.into_iter().flatten());
        }
    }
    if let Some(not) = &node.not
        && run(not).is_empty()
    {
        out.push(composite(format!(
            "{} must not validate the schema (not)",
            go_quote(path)
        )));
    }
}

fn composite(detail: String) -> Issue {
    Issue::invalid("", "\"\"", detail)
}

fn check_string(s: &str, node: &Node, path: &str, out: &mut Vec<Issue>) {
    // kube-openapi stops at the first failing string keyword, in this order.
    let chars = s.chars().count() as u64;
    if let Some(max) = node.max_length
        && chars > max
    {
        out.push(Issue::too_long(path, max));
    } else if let Some(min) = node.min_length
        && chars < min
    {
        let detail = format!("{} should be at least {min} chars long", in_body(path));
        out.push(Issue::invalid(path, &go_quote(s), detail));
    } else if let Some(pattern) = &node.pattern {
        let shown = match &pattern.regex {
            Ok(re) if re.is_match(s) => None,
            Ok(_) => Some(pattern.source.clone()),
            Err(e) => Some(format!("{}, but pattern is invalid: {e}", pattern.source)),
        };
        if let Some(shown) = shown {
            let detail = format!("{} should match '{shown}'", in_body(path));
            out.push(Issue::invalid(path, &go_quote(s), detail));
        }
    }
    if let Some(format) = node.format.as_deref()
        && !format_ok(format, s)
    {
        out.push(Issue::format_invalid(path, s, format));
    }
}

/// The string formats cheap to check; the apiserver knows more, which pass here.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => parse_date_time(s).is_some(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        _ => true,
    }
}

/// RFC 3339 as strfmt accepts it (also with a space or lower-case `t` between date and time).
pub(crate) fn parse_date_time(s: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(s).ok().or_else(|| {
        let (date, time) = s.split_once([' ', 't'])?;
        chrono::DateTime::parse_from_rfc3339(&format!("{date}T{time}")).ok()
    })
}

fn check_number(value: &Value, node: &Node, path: &str, out: &mut Vec<Issue>) {
    let Value::Number(n) = value else { return };
    let shown = go_value(value);
    let v = n.as_f64().unwrap_or(f64::NAN);
    if let Some(factor) = &node.multiple_of {
        let f = factor.as_f64().unwrap_or(0.0);
        if f > 0.0 && (v / f).fract() != 0.0 {
            let detail = format!(
                "{} should be a multiple of {}",
                in_body(path),
                go_number(factor)
            );
            out.push(Issue::invalid(path, &shown, detail));
        }
    }
    if let Some(max) = &node.maximum {
        let m = max.as_f64().unwrap_or(f64::INFINITY);
        let (bad, words) = if node.exclusive_maximum {
            (v >= m, "less than")
        } else {
            (v > m, "less than or equal to")
        };
        if bad {
            let detail = format!("{} should be {words} {}", in_body(path), go_number(max));
            out.push(Issue::invalid(path, &shown, detail));
        }
    }
    if let Some(min) = &node.minimum {
        let m = min.as_f64().unwrap_or(f64::NEG_INFINITY);
        let (bad, words) = if node.exclusive_minimum {
            (v <= m, "greater than")
        } else {
            (v < m, "greater than or equal to")
        };
        if bad {
            let detail = format!("{} should be {words} {}", in_body(path), go_number(min));
            out.push(Issue::invalid(path, &shown, detail));
        }
    }
}

/// minItems/maxItems and minProperties/maxProperties.
fn check_count(
    len: usize,
    min: Option<u64>,
    max: Option<u64>,
    unit: &str,
    path: &str,
    out: &mut Vec<Issue>,
) {
    if let Some(min) = min
        && (len as u64) < min
    {
        let detail = format!("{} should have at least {min} {unit}", in_body(path));
        out.push(Issue::invalid(path, &len.to_string(), detail));
    }
    if let Some(max) = max
        && (len as u64) > max
    {
        out.push(Issue::too_many(path, len, max));
    }
}

fn check_object(map: &Map<String, Value>, node: &Node, path: &str, out: &mut Vec<Issue>) {
    check_count(
        map.len(),
        node.min_properties,
        node.max_properties,
        "properties",
        path,
        out,
    );
    for (k, v) in map {
        let p = child(path, k);
        if let Some(prop) = node.properties.get(k) {
            validate(v, prop, &p, out);
        } else if let Additional::Schema(add) = &node.additional {
            validate(v, add, &p, out);
        }
    }
    for k in &node.required {
        if !map.contains_key(k) {
            out.push(Issue::required(&child(path, k), ""));
        }
    }
}

/// `x-kubernetes-list-type: set` items and `map` keys must be unique.
pub(crate) fn check_list_types(value: &Value, node: &Node, path: &str, out: &mut Vec<Issue>) {
    match value {
        Value::Array(items) => {
            match node.list_type.as_deref() {
                Some("set") => {
                    for (i, item) in items.iter().enumerate() {
                        if items[..i].iter().any(|earlier| json_equal(earlier, item)) {
                            out.push(Issue::duplicate(&index(path, i), item));
                        }
                    }
                }
                Some("map") if !node.list_map_keys.is_empty() => {
                    let keys: Vec<Value> = items.iter().map(|it| map_key(it, node)).collect();
                    for (i, key) in keys.iter().enumerate() {
                        if keys[..i].contains(key) {
                            out.push(Issue::duplicate(&index(path, i), key));
                        }
                    }
                }
                _ => {}
            }
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    check_list_types(item, item_node, &index(path, i), out);
                }
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let field = node.properties.get(k).or_else(|| node.additional.schema());
                if let Some(field) = field {
                    check_list_types(v, field, &child(path, k), out);
                }
            }
        }
        _ => {}
    }
}

fn map_key(item: &Value, node: &Node) -> Value {
    let mut key = Map::new();
    for k in &node.list_map_keys {
        if let Some(v) = item.get(k) {
            key.insert(k.clone(), v.clone());
        }
    }
    Value::Object(key)
}

/// The ObjectMeta checks that matter before create: a metadata object with a name.
pub(crate) fn check_metadata(root: &Map<String, Value>, out: &mut Vec<Issue>) {
    match root.get("metadata") {
        Some(Value::Object(meta)) => {
            let named = |k: &str| {
                meta.get(k)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            };
            if !named("name") && !named("generateName") {
                out.push(Issue::required(
                    "metadata.name",
                    "name or generateName is required",
                ));
            }
        }
        // A metadata that is not an object is already a type error of the schema walk.
        Some(_) => {}
        None => out.push(Issue::required(
            "metadata.name",
            "name or generateName is required",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(schema: Value) -> Node {
        Node::parse(&schema)
    }

    #[test]
    fn defaults_apply_inside_defaults_and_replace_non_nullable_nulls() {
        let n = node(json!({
            "type": "object",
            "properties": {
                "d": {"type": "object", "default": {"a": "x"},
                      "properties": {"a": {"type": "string"}, "b": {"type": "string", "default": "y"}}},
                "n": {"type": "string", "default": "z"}
            }
        }));
        let mut v = json!({"n": null});
        apply_defaults(&mut v, &n);
        assert_eq!(v, json!({"n": "z", "d": {"a": "x", "b": "y"}}));
    }

    #[test]
    fn nulls_without_default_are_dropped() {
        let n = node(json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string", "nullable": true}}}));
        let mut v = json!({"a": null, "b": null});
        prune_nulls(&mut v, Some(&n));
        assert_eq!(v, json!({"b": null}));
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let n = node(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}));
        let mut v = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "x": 1},
                           "spec": {"a": "1", "b": [1]}, "free": {"c": 1}, "top": 1});
        let mut out = Vec::new();
        prune(&mut v, &n, &mut out);
        let paths: Vec<&str> = out.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["spec.b", "top"]);
        assert_eq!(out[0].message, "unknown field \"spec.b\"");
        assert_eq!(v["free"], json!({"c": 1}));
    }

    #[test]
    fn integer_accepts_whole_floats_only() {
        let n = node(json!({"type": "integer"}));
        let mut out = Vec::new();
        validate(&json!(2.0), &n, "x", &mut out);
        assert!(out.is_empty());
        validate(&json!(2.5), &n, "x", &mut out);
        assert_eq!(
            out[0].message,
            "Invalid value: \"number\": x in body must be of type integer: \"number\""
        );
    }

    #[test]
    fn list_sets_and_maps_reject_duplicates() {
        let n = node(json!({"type": "object", "properties": {
            "s": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}));
        let mut out = Vec::new();
        let v = json!({"s": ["a", "b", "a"], "m": [{"name": "x"}, {"name": "x"}]});
        check_list_types(&v, &n, "", &mut out);
        let mut got: Vec<(&str, &str)> = out
            .iter()
            .map(|i| (i.path.as_str(), i.message.as_str()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("m[1]", "Duplicate value: {\"name\":\"x\"}"),
                ("s[2]", "Duplicate value: \"a\"")
            ]
        );
    }
}

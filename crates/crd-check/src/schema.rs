//! A CRD's OpenAPI v3 schema, read once into a typed tree with its regexes and CEL programs
//! compiled, so validating an object does no parsing.

use std::collections::BTreeMap;

use kube_cel::cel::Program;
use regex::Regex;
use serde_json::{Map, Number, Value};

/// Nesting deeper than this is refused: real CRDs stay far below it, and it bounds recursion.
pub(crate) const MAX_DEPTH: usize = 128;

/// One schema node.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// `type` as written ("object", "string", …); empty when unset (int-or-string, preserve-unknown).
    pub type_name: String,
    pub int_or_string: bool,
    pub nullable: bool,
    pub format: Option<String>,
    pub enum_values: Option<Vec<Value>>,
    pub pattern: Option<Pattern>,
    pub minimum: Option<Number>,
    pub exclusive_minimum: bool,
    pub maximum: Option<Number>,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<Number>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub required: Vec<String>,
    /// Sorted by name so that every walk, and so every report, is deterministic.
    pub properties: BTreeMap<String, Node>,
    pub additional: Additional,
    pub items: Option<Box<Node>>,
    pub preserve_unknown: bool,
    pub embedded_resource: bool,
    pub default: Option<Value>,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
    pub rules: Vec<Rule>,
}

/// `additionalProperties`.
#[derive(Debug, Default)]
pub(crate) enum Additional {
    #[default]
    Absent,
    /// `true` or `false` without a schema.
    Bool(bool),
    Schema(Box<Node>),
}

impl Additional {
    /// The schema of map values, when there is one.
    pub fn schema(&self) -> Option<&Node> {
        match self {
            Additional::Schema(node) => Some(node),
            _ => None,
        }
    }

    /// Whether keys outside `properties` are kept (the node is a map).
    pub fn allows(&self) -> bool {
        matches!(self, Additional::Schema(_) | Additional::Bool(true))
    }
}

/// A `pattern`, kept as written (for messages) and compiled with Go RE2 semantics where they differ.
#[derive(Debug)]
pub(crate) struct Pattern {
    pub source: String,
    pub regex: Result<Regex, String>,
}

/// One `x-kubernetes-validations` entry.
#[derive(Debug)]
pub(crate) struct Rule {
    pub rule: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    pub reason: Option<String>,
    pub field_path: Option<String>,
    pub optional_old_self: bool,
    /// The compiled rule, or why it did not compile.
    pub program: Result<Program, String>,
    /// The compiled `messageExpression`, when there is one.
    pub message_program: Option<Result<Program, String>>,
    /// Transition rule: reads `oldSelf`, so it only runs on update.
    pub uses_old_self: bool,
}

impl Node {
    /// Reads a schema node; anything malformed is treated as absent rather than failing, since the
    /// embedded CRDs are known-good and tests check them.
    pub fn parse(value: &Value) -> Node {
        Self::parse_at(value, 0)
    }

    fn parse_at(value: &Value, depth: usize) -> Node {
        let Some(obj) = value.as_object().filter(|_| depth <= MAX_DEPTH) else {
            return Node::default();
        };
        let child = |v: &Value| Self::parse_at(v, depth + 1);
        let branches = |key: &str| -> Vec<Node> {
            obj.get(key)
                .and_then(Value::as_array)
                .map(|bs| bs.iter().map(child).collect())
                .unwrap_or_default()
        };
        Node {
            type_name: str_of(obj, "type").unwrap_or_default(),
            int_or_string: bool_of(obj, "x-kubernetes-int-or-string"),
            nullable: bool_of(obj, "nullable"),
            format: str_of(obj, "format"),
            enum_values: obj.get("enum").and_then(Value::as_array).cloned(),
            pattern: str_of(obj, "pattern").map(|source| Pattern {
                regex: compile_go_regex(&source),
                source,
            }),
            minimum: num_of(obj, "minimum"),
            exclusive_minimum: bool_of(obj, "exclusiveMinimum"),
            maximum: num_of(obj, "maximum"),
            exclusive_maximum: bool_of(obj, "exclusiveMaximum"),
            multiple_of: num_of(obj, "multipleOf"),
            min_length: u64_of(obj, "minLength"),
            max_length: u64_of(obj, "maxLength"),
            min_items: u64_of(obj, "minItems"),
            max_items: u64_of(obj, "maxItems"),
            min_properties: u64_of(obj, "minProperties"),
            max_properties: u64_of(obj, "maxProperties"),
            required: strings_of(obj, "required"),
            properties: obj
                .get("properties")
                .and_then(Value::as_object)
                .map(|ps| ps.iter().map(|(k, v)| (k.clone(), child(v))).collect())
                .unwrap_or_default(),
            additional: match obj.get("additionalProperties") {
                Some(Value::Bool(b)) => Additional::Bool(*b),
                Some(v @ Value::Object(_)) => Additional::Schema(Box::new(child(v))),
                _ => Additional::Absent,
            },
            items: obj
                .get("items")
                .filter(|v| v.is_object())
                .map(|v| Box::new(child(v))),
            preserve_unknown: bool_of(obj, "x-kubernetes-preserve-unknown-fields"),
            embedded_resource: bool_of(obj, "x-kubernetes-embedded-resource"),
            default: obj.get("default").cloned(),
            list_type: str_of(obj, "x-kubernetes-list-type"),
            list_map_keys: strings_of(obj, "x-kubernetes-list-map-keys"),
            all_of: branches("allOf"),
            any_of: branches("anyOf"),
            one_of: branches("oneOf"),
            not: obj
                .get("not")
                .filter(|v| v.is_object())
                .map(|v| Box::new(child(v))),
            rules: obj
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .map(|rs| rs.iter().map(Rule::parse).collect())
                .unwrap_or_default(),
        }
    }

    /// The types a value may have, as the apiserver hands them to the OpenAPI validator.
    pub fn allowed_types(&self) -> Vec<&str> {
        if self.int_or_string {
            vec!["integer", "string"]
        } else if self.type_name.is_empty() {
            Vec::new()
        } else {
            vec![self.type_name.as_str()]
        }
    }

    /// Calls `f` on every rule of this tree with the schema path of its node.
    pub fn for_each_rule<'a>(&'a self, path: &str, f: &mut dyn FnMut(&str, &'a Rule)) {
        for rule in &self.rules {
            f(path, rule);
        }
        for (name, prop) in &self.properties {
            prop.for_each_rule(&crate::report::child(path, name), f);
        }
        if let Some(items) = &self.items {
            items.for_each_rule(&format!("{path}[*]"), f);
        }
        if let Some(add) = self.additional.schema() {
            add.for_each_rule(&format!("{path}[*]"), f);
        }
        for branch in self.all_of.iter().chain(&self.any_of).chain(&self.one_of) {
            branch.for_each_rule(path, f);
        }
        if let Some(not) = &self.not {
            not.for_each_rule(path, f);
        }
    }

    /// Calls `f` on every `pattern` of this tree with the schema path of its node.
    #[cfg(test)]
    pub fn for_each_pattern<'a>(&'a self, path: &str, f: &mut dyn FnMut(&str, &'a Pattern)) {
        if let Some(p) = &self.pattern {
            f(path, p);
        }
        for (name, prop) in &self.properties {
            prop.for_each_pattern(&crate::report::child(path, name), f);
        }
        if let Some(items) = &self.items {
            items.for_each_pattern(&format!("{path}[*]"), f);
        }
        if let Some(add) = self.additional.schema() {
            add.for_each_pattern(&format!("{path}[*]"), f);
        }
        for branch in self.all_of.iter().chain(&self.any_of).chain(&self.one_of) {
            branch.for_each_pattern(path, f);
        }
    }
}

impl Rule {
    fn parse(raw: &Value) -> Rule {
        let obj = raw.as_object();
        let get = |key: &str| obj.and_then(|o| str_of(o, key));
        let rule = get("rule").unwrap_or_default();
        let program = if rule.trim().is_empty() {
            Err("rule is empty".to_owned())
        } else {
            compile_cel(&rule)
        };
        let uses_old_self = program
            .as_ref()
            .is_ok_and(|p| p.references().has_variable("oldSelf"));
        let message_expression = get("messageExpression");
        Rule {
            message: get("message"),
            message_program: message_expression.as_deref().map(compile_cel),
            message_expression,
            reason: get("reason"),
            field_path: get("fieldPath"),
            optional_old_self: obj.is_some_and(|o| bool_of(o, "optionalOldSelf")),
            program,
            uses_old_self,
            rule,
        }
    }
}

fn compile_cel(source: &str) -> Result<Program, String> {
    // The parser is third-party code fed with CRD text: contain a panic as a compile error.
    let compiled = std::panic::catch_unwind(|| Program::compile(source));
    match compiled {
        Ok(Ok(program)) => Ok(program),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the CEL parser panicked".to_owned()),
    }
}

/// Compiles an OpenAPI `pattern`. Kubernetes matches with Go's RE2, whose `\d`, `\w`, `\s`
/// and `\b` are ASCII-only while Rust's are Unicode-aware, so those classes are spelled out.
pub(crate) fn compile_go_regex(pattern: &str) -> Result<Regex, String> {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars();
    let mut class_depth = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push('\\');
                    break;
                };
                match next {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    's' => out.push_str("[\\t\\n\\f\\r ]"),
                    'S' => out.push_str("[^\\t\\n\\f\\r ]"),
                    'b' | 'B' if class_depth == 0 => {
                        out.push_str("(?-u:\\");
                        out.push(next);
                        out.push(')');
                    }
                    _ => {
                        out.push('\\');
                        out.push(next);
                    }
                }
            }
            '[' => {
                class_depth += 1;
                out.push(c);
            }
            ']' if class_depth > 0 => {
                class_depth -= 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    Regex::new(&out).map_err(|e| e.to_string())
}

fn str_of(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn bool_of(obj: &Map<String, Value>, key: &str) -> bool {
    obj.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn u64_of(obj: &Map<String, Value>, key: &str) -> Option<u64> {
    obj.get(key).and_then(Value::as_u64)
}

fn num_of(obj: &Map<String, Value>, key: &str) -> Option<Number> {
    match obj.get(key) {
        Some(Value::Number(n)) => Some(n.clone()),
        _ => None,
    }
}

fn strings_of(obj: &Map<String, Value>, key: &str) -> Vec<String> {
    obj.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_perl_classes_are_ascii_only() {
        let re = compile_go_regex(r"^\d+$").unwrap();
        assert!(re.is_match("123"));
        assert!(
            !re.is_match("١٢٣"),
            "Arabic-Indic digits are not \\d in RE2"
        );
        let re = compile_go_regex(r"^[\d.]+%$").unwrap();
        assert!(re.is_match("1.5%"));
        let re = compile_go_regex(r"\\d").unwrap();
        assert!(re.is_match(r"\d"), "an escaped backslash stays literal");
    }

    #[test]
    fn word_boundaries_and_escaped_brackets() {
        assert!(compile_go_regex(r"\bfoo\b").unwrap().is_match("a foo b"));
        let re = compile_go_regex(r"^[\]a]+\d$").unwrap();
        assert!(re.is_match("]a]1"), "an escaped ] does not close the class");
    }
}

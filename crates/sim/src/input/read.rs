//! What every reader shares: the per-document context that records located errors, the
//! document → objects step, and the small readers (quantities, taints, label selectors).

use k8s_openapi::api::core::v1 as core;
use kk_catalog::resources::quantity_units;
use kk_model::FieldPath;
use kk_model::quantity::Quantity;
use kk_model::yaml::{Document, LoadLimits, load_documents, load_documents_unlocated};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{InputError, SourceFile};
use crate::model::{Effect, LabelSelector, Taint};
use crate::req::Operator;

/// One document being read: where errors go and how they are located.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) doc: &'a Document,
    pub(super) errors: &'a mut Vec<InputError>,
}

impl Ctx<'_> {
    pub(super) fn err(&mut self, field: &str, message: impl Into<String>) {
        let path = FieldPath::parse(field);
        let pos = if field.is_empty() {
            self.doc.start
        } else {
            self.doc.pos(&path)
        };
        self.errors.push(InputError {
            file: self.file.to_owned(),
            pos: Some(pos),
            field: field.to_owned(),
            message: message.into(),
        });
    }

    pub(super) fn typed<T: DeserializeOwned>(&mut self, value: Value) -> Option<T> {
        let de = value;
        match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(t) => Some(t),
            Err(e) => {
                let field = e.path().to_string();
                let field = if field == "." { String::new() } else { field };
                let msg = e.inner().to_string();
                self.err(&field, msg);
                None
            }
        }
    }
}

/// YAML numbers in resource lists become quantity strings (`cpu: 1` is `"1"`), as kubectl does.
pub(super) fn stringify_quantities(v: &mut Value, in_list: bool) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                let list = matches!(
                    k.as_str(),
                    "requests" | "limits" | "capacity" | "allocatable" | "overhead"
                );
                if in_list && let Value::Number(n) = child {
                    *child = Value::String(n.to_string());
                    continue;
                }
                stringify_quantities(child, list);
            }
        }
        Value::Array(items) => {
            for item in items {
                stringify_quantities(item, false);
            }
        }
        _ => {}
    }
}

pub(super) fn parse_documents(
    file: &SourceFile,
    locate: bool,
    errors: &mut Vec<InputError>,
) -> Vec<Document> {
    let load = if locate {
        load_documents
    } else {
        load_documents_unlocated
    };
    match load(&file.text, LoadLimits::default()) {
        Ok(docs) => docs,
        Err(e) => {
            errors.push(InputError {
                file: file.name.clone(),
                pos: Some(e.pos),
                field: String::new(),
                message: e.message,
            });
            Vec::new()
        }
    }
}

/// Every object in the document, with `List`s expanded: (path prefix, value).
pub(super) fn objects(doc: &Document) -> Vec<(String, &Value)> {
    let v = &doc.value;
    if v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && let Some(items) = v.get("items").and_then(Value::as_array)
    {
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| (format!("items[{i}]"), item))
            .collect();
    }
    vec![(String::new(), v)]
}

pub(super) fn kind_of(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("")
}

pub(super) fn join(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (true, _) => field.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{field}"),
    }
}

pub(super) fn quantity(ctx: &mut Ctx, field: &str, name: &str, text: &str) -> Option<i64> {
    match Quantity::parse(text) {
        Ok(q) if !q.is_negative() => Some(quantity_units(name, &q)),
        Ok(_) => {
            ctx.err(field, format!("{name} must not be negative"));
            None
        }
        Err(e) => {
            ctx.err(field, e.to_string());
            None
        }
    }
}

pub(super) fn taint(ctx: &mut Ctx, field: &str, t: &core::Taint) -> Option<Taint> {
    match Effect::parse(&t.effect) {
        Ok(effect) => Some(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        }),
        Err(e) => {
            ctx.err(&format!("{field}.effect"), e);
            None
        }
    }
}

pub(super) fn value_quantity(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The namespace of an object (`default` when unset).
pub(super) fn namespace(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

pub fn selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<LabelSelector, String> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for e in s.match_expressions.iter().flatten() {
        let op = Operator::parse(&e.operator)?;
        if !matches!(
            op,
            Operator::In | Operator::NotIn | Operator::Exists | Operator::DoesNotExist
        ) {
            return Err(format!(
                "label selector operator {} is not allowed",
                e.operator
            ));
        }
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        values.dedup();
        out.match_expressions.push((e.key.clone(), op, values));
    }
    out.match_expressions.sort();
    Ok(out)
}

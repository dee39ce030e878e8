//! Text → `ElasticCluster`, with every problem reported at its file:line:col.

use std::collections::{BTreeMap, BTreeSet};

use kk_model::yaml::{self, Document, LoadLimits};
use kk_model::{FieldPath, PathSeg, Pos};
use serde_json::Value;

use crate::types::ElasticCluster;
use crate::validate::{validate, warnings};

/// One problem in a spec, located in its source (always with a position).
pub type SpecError = kk_model::LocatedError;

/// A spec together with the document it was read from (for positions in later stages).
#[derive(Debug, Clone)]
pub struct LoadedSpec {
    pub spec: ElasticCluster,
    pub document: Document,
    pub file: String,
    /// What validation let through but the user should hear about (`kk_spec::warnings`),
    /// located like errors.
    pub warnings: Vec<SpecError>,
}

/// Parses and validates one ElasticCluster document. `file` names the source in errors.
pub fn parse_spec(text: &str, file: &str) -> Result<LoadedSpec, Vec<SpecError>> {
    let docs = yaml::load_documents(text, LoadLimits::default()).map_err(|e| {
        vec![SpecError::new(file, Some(e.pos), e.message).at_field(FieldPath::root().to_string())]
    })?;
    spec_from_documents(docs, file)
}

/// [`parse_spec`] for YAML the caller has already loaded (a CLI that looked at the documents
/// to see whether they hold a spec does not parse them again).
pub fn spec_from_documents(docs: Vec<Document>, file: &str) -> Result<LoadedSpec, Vec<SpecError>> {
    let at = |pos: Pos, path: FieldPath, message: String| {
        SpecError::new(file, Some(pos), message).at_field(path.to_string())
    };
    let document = match docs.len() {
        1 => docs.into_iter().next().expect("one document"),
        0 => {
            return Err(vec![at(
                Pos { line: 1, col: 1 },
                FieldPath::root(),
                "no ElasticCluster document found".into(),
            )]);
        }
        n => {
            return Err(vec![at(
                docs[1].start,
                FieldPath::root(),
                format!("expected one ElasticCluster document, found {n}"),
            )]);
        }
    };
    let spec = deserialize_all_errors(&document).map_err(|problems| {
        problems
            .into_iter()
            .map(|(path, message, on_key)| {
                let pos = if on_key {
                    document.key_pos(&path)
                } else {
                    document.pos(&path)
                };
                at(pos, path, message)
            })
            .collect::<Vec<_>>()
    })?;
    let mut errors: Vec<SpecError> = validate(&spec)
        .into_iter()
        .map(|(path, message)| at(document.pos(&path), path, message))
        .collect();
    if errors.is_empty() {
        let mut warnings: Vec<SpecError> = warnings(&spec)
            .into_iter()
            .map(|(path, message)| at(document.pos(&path), path, message))
            .collect();
        warnings.sort_by_cached_key(|e| (e.pos, FieldPath::parse(&e.field), e.message.clone()));
        Ok(LoadedSpec {
            spec,
            document,
            file: file.to_owned(),
            warnings,
        })
    } else {
        // By position, then by field path segment by segment (not as text).
        errors.sort_by_cached_key(|e| (e.pos, FieldPath::parse(&e.field), e.message.clone()));
        errors.dedup();
        Err(errors)
    }
}

impl LoadedSpec {
    /// The warnings that depend on the day (the control plane's Kubernetes minor past its end of
    /// life or in maintenance mode), located at `spec.kubernetesVersion`.
    pub fn dated_warnings(&self, today: &crate::kubernetes_support::Day) -> Vec<SpecError> {
        let Some(minor) = crate::images::kubernetes_minor(&self.spec.spec.kubernetes_version)
        else {
            return Vec::new();
        };
        let path = FieldPath::root().key("spec").key("kubernetesVersion");
        crate::kubernetes_support::warning(minor, today)
            .map(|message| {
                SpecError::new(&self.file, Some(self.document.pos(&path)), message)
                    .at_field(path.to_string())
            })
            .into_iter()
            .collect()
    }
}

/// serde stops at the first error; we want them all. After each error the offending
/// value is removed or replaced by an empty value of the expected type, and errors
/// beneath a replaced value are not reported (they would only echo the first one).
fn deserialize_all_errors(
    document: &Document,
) -> Result<ElasticCluster, Vec<(FieldPath, String, bool)>> {
    let mut value = document.value.clone();
    let mut problems = Vec::new();
    let mut patched: BTreeSet<FieldPath> = BTreeSet::new();
    let mut attempts: BTreeMap<FieldPath, u8> = BTreeMap::new();
    for _ in 0..200 {
        let err = match serde_path_to_error::deserialize::<_, ElasticCluster>(&value) {
            Ok(spec) if problems.is_empty() => return Ok(spec),
            Ok(_) => return Err(problems),
            Err(err) => err,
        };
        let mut path = convert_path(err.path());
        let message = err.inner().to_string();
        let quoted = between_backticks(&message);
        // serde_path_to_error ends the path at the offending key for unknown fields, but
        // at the parent for missing ones.
        if let Some(name) = &quoted
            && (message.starts_with("unknown field") || message.starts_with("missing field"))
            && path.0.last() != Some(&PathSeg::Key(name.clone()))
        {
            path = path.key(name);
        }
        let under_patch = patched
            .iter()
            .any(|p| path.0.starts_with(&p.0) && path != *p);
        if !under_patch && !problems.iter().any(|(p, _, _)| *p == path) {
            problems.push((
                path.clone(),
                tidy(&message),
                message.starts_with("unknown field"),
            ));
        }
        patched.insert(path.clone());
        let tries = attempts.entry(path.clone()).or_default();
        *tries += 1;
        if *tries > 2 {
            // The placeholders did not satisfy serde: nothing more can be learnt safely.
            break;
        }
        if message.starts_with("unknown field") {
            remove(&mut value, &path);
        } else {
            set(&mut value, &path, placeholder_for(&message));
        }
    }
    Err(problems)
}

fn tidy(message: &str) -> String {
    // serde lists every allowed field; keep it, it is the most useful hint for a typo.
    message.replace(" at line 1 column 1", "")
}

fn between_backticks(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let end = message[start..].find('`')? + start;
    Some(message[start..end].to_owned())
}

/// An empty value of the type serde said it expected, so deserialization can go on.
fn placeholder_for(message: &str) -> Value {
    let expected = message.rsplit("expected").next().unwrap_or("");
    if expected.contains("sequence") {
        Value::Array(Vec::new())
    } else if expected.contains("map") || expected.contains("struct") {
        Value::Object(Default::default())
    } else if expected.contains("bool") {
        Value::Bool(false)
    } else if ["i64", "u16", "u32", "u64", "integer", "f64", "number"]
        .iter()
        .any(|t| expected.contains(t))
    {
        Value::from(1)
    } else if message.starts_with("unknown variant") {
        // Carry on with the first allowed variant.
        between_backticks(expected).map_or(Value::Null, Value::String)
    } else {
        Value::String(String::new())
    }
}

fn convert_path(path: &serde_path_to_error::Path) -> FieldPath {
    use serde_path_to_error::Segment;
    let segs = path
        .iter()
        .filter_map(|seg| match seg {
            Segment::Seq { index } => Some(PathSeg::Index(*index)),
            Segment::Map { key } => Some(PathSeg::Key(key.clone())),
            Segment::Enum { variant } => Some(PathSeg::Key(variant.clone())),
            Segment::Unknown => None,
        })
        .collect();
    FieldPath(segs)
}

fn remove(value: &mut Value, path: &FieldPath) {
    let Some(parent) = path.parent() else { return };
    if let (Some(Value::Object(map)), Some(PathSeg::Key(key))) =
        (get_mut(value, &parent), path.0.last())
    {
        map.remove(key);
    }
}

fn set(value: &mut Value, path: &FieldPath, replacement: Value) {
    if path.is_root() {
        *value = replacement;
        return;
    }
    let Some(parent) = path.parent() else { return };
    match (get_mut(value, &parent), path.0.last()) {
        (Some(Value::Object(map)), Some(PathSeg::Key(key))) => {
            if replacement.is_null() {
                map.remove(key);
            } else {
                map.insert(key.clone(), replacement);
            }
        }
        (Some(Value::Array(items)), Some(PathSeg::Index(i))) if *i < items.len() => {
            items[*i] = replacement;
        }
        _ => {}
    }
}

fn get_mut<'v>(value: &'v mut Value, path: &FieldPath) -> Option<&'v mut Value> {
    let mut current = value;
    for seg in &path.0 {
        current = match (seg, current) {
            (PathSeg::Key(k), Value::Object(map)) => map.get_mut(k)?,
            (PathSeg::Index(i), Value::Array(items)) => items.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(current)
}

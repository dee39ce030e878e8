//! Inputs → located, classified documents.
//!
//! Every document keeps its file and positions. Kubean ConfigMaps carry the Ansible inventory
//! and group vars as YAML inside a block scalar; those are parsed too and their positions moved
//! onto the lines of the outer file, so a finding inside `hosts.yml` points at the real line.
//! Limits on bytes, depth and values (per file and in total) keep hostile input to one error.

use kk_model::yaml::{Document, LoadLimits, YamlError, load_documents};
use kk_model::{FieldPath, Pos};
use serde_json::Value;

use crate::suppress::Directives;

/// Largest single input accepted.
pub const MAX_FILE_BYTES: usize = 16 * 1024 * 1024;
/// Largest sum of all inputs of one run.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024 * 1024;
/// Most YAML values (after alias expansion) in one file: far above real manifests, low enough
/// that an alias bomb is refused in well under a second (release build).
pub const MAX_FILE_VALUES: usize = 200_000;
/// Most YAML values in one run, embedded documents included.
pub const MAX_TOTAL_VALUES: usize = 1_000_000;
/// Deepest nesting accepted; Kubernetes objects stay far below.
pub const MAX_DEPTH: usize = 64;

/// One text to lint, with the name diagnostics will show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub text: String,
    /// The real file this text was rendered from (a spec), when `name` is not a file on disk.
    /// SARIF points there, since code scanning only knows repository files.
    pub origin: Option<String>,
}

impl Input {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
            origin: None,
        }
    }

    /// A file of a bundle rendered in memory from the spec `origin`.
    pub fn rendered(name: impl Into<String>, text: impl Into<String>, origin: &str) -> Self {
        Self {
            origin: Some(origin.to_owned()),
            ..Self::new(name, text)
        }
    }

    /// Accepts bytes read from a file or stdin: refuses oversized, non-UTF-8 and binary input.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<Self, LoadError> {
        let name = name.into();
        if bytes.len() > MAX_FILE_BYTES {
            return Err(LoadError::new(&name, None, too_big(bytes.len())));
        }
        match String::from_utf8(bytes) {
            Ok(text) => Ok(Self::new(name, text)),
            Err(e) => Err(LoadError::new(
                &name,
                None,
                format!(
                    "not UTF-8 text (invalid byte at offset {}), not YAML",
                    e.utf8_error().valid_up_to()
                ),
            )),
        }
    }
}

pub fn too_big(len: usize) -> String {
    format!("input is {len} bytes, over the limit of {MAX_FILE_BYTES} bytes")
}

/// Why the inputs could not be linted at all (exit 2), at file:line:col.
pub type LoadError = kk_model::LocatedError;

/// A loaded input file: its text (for code frames) and its suppression comments.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
    pub origin: Option<String>,
    pub directives: Directives,
    line_starts: Vec<usize>,
}

impl Source {
    fn new(input: &Input) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(
            input
                .text
                .char_indices()
                .filter(|(_, c)| *c == '\n')
                .map(|(i, _)| i + 1),
        );
        Self {
            name: input.name.clone(),
            text: input.text.clone(),
            origin: input.origin.clone(),
            directives: Directives::parse(&input.text),
            line_starts,
        }
    }

    /// Line `n` (1-based) without its line break.
    pub fn line(&self, n: usize) -> Option<&str> {
        let start = *self.line_starts.get(n.checked_sub(1)?)?;
        let end = self
            .line_starts
            .get(n)
            .map(|e| e - 1)
            .unwrap_or(self.text.len());
        let line = self.text.get(start..end)?;
        Some(line.strip_suffix('\r').unwrap_or(line))
    }
}

/// What a document is, decided by apiVersion/kind (or by content for Helm values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    NodePool,
    EC2NodeClass,
    KubeanCluster,
    KubeanClusterOperation,
    /// A ConfigMap; Kubean's carry `hosts.yml` / `group_vars.yml` in [`Object::embedded`].
    ConfigMap,
    /// Karpenter chart values: no `kind`, top-level `settings` and `controller`.
    KarpenterValues,
    /// NVIDIA GPU Operator chart values: no `kind`, top-level `devicePlugin` beside one of the
    /// operator's other operands (`daemonsets`, `driver`, `toolkit`, `gfd`, `dcgmExporter`).
    GpuOperatorValues,
    /// Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or Pod.
    Workload,
    /// A kubean-karpenter spec (the CLI renders those before linting).
    ElasticCluster,
    Other,
}

/// Which Kubean ConfigMap payload an embedded document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EmbeddedKind {
    /// `hosts.yml`: the Ansible inventory.
    Hosts,
    /// `group_vars.yml`: Kubespray variables.
    GroupVars,
}

/// YAML inside a ConfigMap value, positions already moved onto the outer file's lines.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub kind: EmbeddedKind,
    /// The data key, `hosts.yml`.
    pub key: String,
    pub doc: Document,
}

/// One document of one input.
#[derive(Debug, Clone)]
pub struct Object {
    /// Index into the run's sources.
    pub source: usize,
    /// 0-based index of the document within its file.
    pub index: usize,
    pub doc: Document,
    pub class: Class,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
    pub embedded: Vec<Embedded>,
}

impl Object {
    /// `Kind/name` for diagnostics; Helm values read `KarpenterValues`.
    pub fn label(&self) -> String {
        match (self.class, self.kind.is_empty(), self.name.is_empty()) {
            (Class::KarpenterValues, ..) => "KarpenterValues".into(),
            (Class::GpuOperatorValues, ..) => "GpuOperatorValues".into(),
            (_, true, _) => "document".into(),
            (_, false, true) => format!("{}/<unnamed>", self.kind),
            _ => format!("{}/{}", self.kind, self.name),
        }
    }

    /// The line the object starts on (its first key), for object-level suppressions.
    pub fn first_line(&self) -> usize {
        self.doc.pos(&FieldPath::root()).line
    }

    pub fn value(&self, path: &FieldPath) -> Option<&Value> {
        kk_model::yaml::get(&self.doc.value, path)
    }

    pub fn embedded(&self, kind: EmbeddedKind) -> Option<&Embedded> {
        self.embedded.iter().find(|e| e.kind == kind)
    }
}

/// Everything read for one run.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub sources: Vec<Source>,
    pub objects: Vec<Object>,
}

/// Tracks the values budget shared by every file and embedded document of a run.
struct Budget {
    values_left: usize,
}

impl Budget {
    /// Loads `text` within the per-file limits and what is left of the run's total.
    fn load(&mut self, text: &str) -> Result<Vec<Document>, YamlError> {
        let total_binds = self.values_left < MAX_FILE_VALUES;
        let limits = LoadLimits {
            max_bytes: MAX_FILE_BYTES,
            max_depth: MAX_DEPTH,
            max_nodes: self.values_left.min(MAX_FILE_VALUES),
            ..LoadLimits::default()
        };
        let docs = load_documents(text, limits).map_err(|mut e| {
            // The loader blames an alias bomb; when the run's total is what ran out, say so.
            if total_binds && e.message.contains(" values (alias expansion bomb?)") {
                e.message = format!(
                    "the inputs hold more than {MAX_TOTAL_VALUES} YAML values in total; lint fewer files at once"
                );
            }
            e
        })?;
        let used: usize = docs.iter().map(Document::values).sum();
        self.values_left = self.values_left.saturating_sub(used);
        Ok(docs)
    }
}

/// Parses and classifies every input. The first unreadable input ends the run.
pub fn load(inputs: &[Input]) -> Result<Loaded, LoadError> {
    let total: usize = inputs.iter().map(|i| i.text.len()).sum();
    if total > MAX_TOTAL_BYTES {
        return Err(LoadError::new(
            "<inputs>",
            None,
            format!("inputs total {total} bytes, over the limit of {MAX_TOTAL_BYTES} bytes"),
        ));
    }
    load_within(inputs, MAX_TOTAL_VALUES)
}

fn load_within(inputs: &[Input], total_values: usize) -> Result<Loaded, LoadError> {
    let mut budget = Budget {
        values_left: total_values,
    };
    let mut loaded = Loaded::default();
    for input in inputs {
        if input.text.len() > MAX_FILE_BYTES {
            return Err(LoadError::new(&input.name, None, too_big(input.text.len())));
        }
        if let Some((pos, c)) = unprintable(&input.text) {
            return Err(LoadError::new(
                &input.name,
                Some(pos),
                format!(
                    "control character U+{:04X}: binary data, not YAML",
                    c as u32
                ),
            ));
        }
        let source_index = loaded.sources.len();
        let source = Source::new(input);
        let docs = budget
            .load(&input.text)
            .map_err(|e| LoadError::new(&input.name, Some(e.pos), e.message))?;
        for (index, doc) in docs.into_iter().enumerate() {
            let object = object(&source, source_index, index, doc, &mut budget)?;
            loaded.objects.push(object);
        }
        loaded.sources.push(source);
    }
    Ok(loaded)
}

/// The first character YAML does not allow in a stream (C0/C1 controls other than tab, line
/// breaks and NEL, and DEL), which is what binary data decoded as UTF-8 is full of.
fn unprintable(text: &str) -> Option<(Pos, char)> {
    let mut pos = Pos { line: 1, col: 1 };
    for c in text.chars() {
        let allowed =
            matches!(c, '\t' | '\n' | '\r' | '\u{85}') || !(c.is_control() || c == '\u{7f}');
        if !allowed {
            return Some((pos, c));
        }
        if c == '\n' {
            pos = Pos {
                line: pos.line + 1,
                col: 1,
            };
        } else {
            pos.col += 1;
        }
    }
    None
}

fn object(
    source: &Source,
    source_index: usize,
    index: usize,
    doc: Document,
    budget: &mut Budget,
) -> Result<Object, LoadError> {
    let Value::Object(map) = &doc.value else {
        // A lone scalar is what prose or a blob parses to: not a manifest, say so.
        if !doc.value.is_array() {
            return Err(LoadError::new(
                &source.name,
                Some(doc.start),
                format!(
                    "document {} is a {}, not a mapping: not a Kubernetes manifest or values file",
                    index + 1,
                    type_name(&doc.value)
                ),
            ));
        }
        return Ok(Object {
            source: source_index,
            index,
            class: Class::Other,
            api_version: String::new(),
            kind: String::new(),
            name: String::new(),
            namespace: None,
            embedded: Vec::new(),
            doc,
        });
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let api_version = text(map.get("apiVersion"));
    let kind = text(map.get("kind"));
    let metadata = map.get("metadata");
    let name = text(metadata.and_then(|m| m.get("name")));
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let class = classify(&api_version, &kind, &doc.value);
    let mut embedded = Vec::new();
    if class == Class::ConfigMap
        && let Some(Value::Object(data)) = map.get("data")
    {
        for (key, value) in data {
            let kind = match key.as_str() {
                "hosts.yml" | "hosts.yaml" => EmbeddedKind::Hosts,
                "group_vars.yml" | "group_vars.yaml" => EmbeddedKind::GroupVars,
                _ => continue,
            };
            let Some(text) = value.as_str() else { continue };
            let path = FieldPath::root().key("data").key(key);
            if let Some(doc) = embedded_doc(source, &doc, &path, text, budget)? {
                embedded.push(Embedded {
                    kind,
                    key: key.clone(),
                    doc,
                });
            }
        }
    }
    Ok(Object {
        source: source_index,
        index,
        doc,
        class,
        api_version,
        kind,
        name,
        namespace,
        embedded,
    })
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

fn classify(api_version: &str, kind: &str, value: &Value) -> Class {
    match (group(api_version), kind) {
        ("karpenter.sh", "NodePool") => Class::NodePool,
        ("karpenter.k8s.aws", "EC2NodeClass") => Class::EC2NodeClass,
        ("kubean.io", "Cluster") => Class::KubeanCluster,
        ("kubean.io", "ClusterOperation") => Class::KubeanClusterOperation,
        ("", "ConfigMap") => Class::ConfigMap,
        (g, "ElasticCluster") if g.starts_with("kubean-karpenter.io") => Class::ElasticCluster,
        (
            "" | "apps" | "batch",
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "CronJob" | "Pod",
        ) => Class::Workload,
        ("", "") if is_karpenter_values(value) => Class::KarpenterValues,
        ("", "") if is_gpu_operator_values(value) => Class::GpuOperatorValues,
        _ => Class::Other,
    }
}

/// Values files are named anything (`values.yaml`, `karpenter-prod.yaml`): recognise the content.
fn is_karpenter_values(value: &Value) -> bool {
    value.get("settings").is_some_and(Value::is_object) && value.get("controller").is_some()
}

/// The GPU Operator's values, recognised as Karpenter's are, by content.
fn is_gpu_operator_values(value: &Value) -> bool {
    value.get("devicePlugin").is_some_and(Value::is_object)
        && ["daemonsets", "driver", "toolkit", "gfd", "dcgmExporter"]
            .iter()
            .any(|k| value.get(k).is_some_and(Value::is_object))
}

/// Parses `text` (the string at `path` of `outer`) and moves its positions onto the file.
fn embedded_doc(
    source: &Source,
    outer: &Document,
    path: &FieldPath,
    text: &str,
    budget: &mut Budget,
) -> Result<Option<Document>, LoadError> {
    let origin = outer.pos(path);
    let map = BlockMap::find(source, origin, text);
    let docs = budget.load(text).map_err(|e| {
        LoadError::new(
            &source.name,
            Some(map.pos(e.pos)),
            format!("{} (in the YAML embedded at {path})", e.message),
        )
    })?;
    Ok(docs.into_iter().next().map(|mut doc| {
        doc.move_positions(|pos| map.pos(pos));
        doc
    }))
}

/// Maps positions inside a string value onto the file. Exact for literal block scalars (`|`),
/// whose lines are the file's lines minus a fixed indent; everything else (folded, quoted,
/// plain) maps to where the value starts.
#[derive(Debug, Clone, Copy)]
pub struct BlockMap {
    origin: Pos,
    /// File line of the value's first line, and the file column of its column 1.
    literal: Option<(usize, usize)>,
}

impl BlockMap {
    /// `origin` is the value's position as the loader recorded it: for a block scalar, its
    /// first non-blank content line.
    pub fn find(source: &Source, origin: Pos, text: &str) -> Self {
        let indent = origin.col.saturating_sub(1);
        let leading_blank = text.lines().take_while(|l| l.trim().is_empty()).count();
        let literal = [origin.line.checked_sub(leading_blank), Some(origin.line)]
            .into_iter()
            .flatten()
            .find(|&first| lines_match(source, first, indent, text))
            .map(|first| (first, indent + 1));
        Self { origin, literal }
    }

    /// The file position of 1-based `pos` inside the value.
    pub fn pos(&self, pos: Pos) -> Pos {
        match self.literal {
            Some((line, col)) if pos.line >= 1 => Pos {
                line: line + pos.line - 1,
                col: col + pos.col.saturating_sub(1),
            },
            _ => self.origin,
        }
    }
}

/// Whether every line of `text` is the file's line at the same offset with `indent` removed.
fn lines_match(source: &Source, first: usize, indent: usize, text: &str) -> bool {
    if first == 0 {
        return false;
    }
    text.lines().enumerate().all(|(i, line)| {
        let Some(file_line) = source.line(first + i) else {
            return false;
        };
        if line.is_empty() {
            return file_line.trim().is_empty();
        }
        file_line.get(..indent).is_some_and(|p| p.trim().is_empty())
            && file_line.get(indent..) == Some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Loaded {
        load(&[Input::new("f.yaml", text)]).unwrap()
    }

    #[test]
    fn embedded_inventory_positions_point_into_the_file() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: h\ndata:\n  hosts.yml: |\n    all:\n      hosts:\n        cp-1:\n          ip: 10.0.0.1\n";
        let loaded = one(text);
        let object = &loaded.objects[0];
        assert_eq!(object.class, Class::ConfigMap);
        let hosts = object.embedded(EmbeddedKind::Hosts).unwrap();
        let pos = hosts.doc.pos(&FieldPath::parse("all.hosts.cp-1.ip"));
        assert_eq!(pos, Pos { line: 10, col: 15 });
        assert_eq!(
            loaded.sources[0].line(pos.line).unwrap().get(pos.col - 1..),
            Some("10.0.0.1")
        );
    }

    #[test]
    fn quoted_embedded_yaml_maps_to_the_value() {
        let text = "kind: ConfigMap\napiVersion: v1\ndata:\n  group_vars.yml: \"a: 1\\nb: 2\\n\"\n";
        let loaded = one(text);
        let vars = loaded.objects[0].embedded(EmbeddedKind::GroupVars).unwrap();
        assert_eq!(
            vars.doc.pos(&FieldPath::parse("b")),
            Pos { line: 4, col: 19 }
        );
    }

    #[test]
    fn values_are_recognised_by_content() {
        let loaded = one("settings:\n  clusterName: x\ncontroller: {}\n");
        assert_eq!(loaded.objects[0].class, Class::KarpenterValues);
        assert_eq!(loaded.objects[0].label(), "KarpenterValues");
        let operator = one("devicePlugin: {enabled: true}\ndaemonsets: {tolerations: []}\n");
        assert_eq!(operator.objects[0].class, Class::GpuOperatorValues);
        assert_eq!(operator.objects[0].label(), "GpuOperatorValues");
        // devicePlugin alone could be anyone's values.
        let alone = one("devicePlugin: {enabled: true}\n");
        assert_eq!(alone.objects[0].class, Class::Other);
    }

    #[test]
    fn scalars_are_refused_lists_are_not() {
        let err = load(&[Input::new("r.md", "Just some prose.\n")]).unwrap_err();
        assert!(err.message.contains("not a mapping"), "{err}");
        assert_eq!(one("- a\n- b\n").objects[0].class, Class::Other);
    }

    #[test]
    fn the_values_budget_spans_every_file() {
        let file = Input::new("f.yaml", "a: [1, 2, 3, 4, 5, 6, 7, 8]\n");
        let three = [file.clone(), file.clone(), file];
        assert!(load_within(&three, 30).is_ok());
        let err = load_within(&three, 25).unwrap_err();
        assert!(err.message.contains("in total"), "{err}");
    }

    #[test]
    fn binary_and_non_utf8_are_refused() {
        let err = load(&[Input::from_bytes("b", vec![b'a', b'\n', b'b', 0]).unwrap()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "b:2:2: control character U+0000: binary data, not YAML"
        );
        assert!(Input::from_bytes("b", vec![0xff, 0xfe, b'a']).is_err());
        assert!(load(&[Input::new("t", "a: b\t\r\n")]).is_ok());
    }
}

//! Embeds the reference CRDs: Karpenter's from `crds/karpenter/` here (written from the Go module
//! the lab builds by testbed/tools/karpenter/export-crds), Kubean's from `shared/crds/kubean/`.
//! Keeps only what validation needs (no `description` text) and writes one JSON document into
//! OUT_DIR, so the library parses JSON at run time and never touches the file system.

use std::{
    env, fs,
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

/// The Karpenter CRDs' folder under this crate, then Kubean's under `<shared>/crds/`: the order
/// they are embedded in, and the name each file's `source` starts with.
const KARPENTER_DIR: &str = "karpenter";
const KUBEAN_DIR: &str = "kubean";

fn main() {
    println!("cargo:rerun-if-env-changed=KK_SHARED_DIR");
    let shared = match env::var_os("KK_SHARED_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(&env_var("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };

    let manifest = PathBuf::from(env_var("CARGO_MANIFEST_DIR"));
    let dirs = [
        (KARPENTER_DIR, manifest.join("crds").join(KARPENTER_DIR)),
        (KUBEAN_DIR, shared.join("crds").join(KUBEAN_DIR)),
    ];
    let mut crds = Vec::new();
    for (sub, dir) in dirs {
        println!("cargo:rerun-if-changed={}", dir.display());
        for file in yaml_files(&dir) {
            println!("cargo:rerun-if-changed={}", file.display());
            let text = fs::read_to_string(&file)
                .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", file.display())));
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| fail(&format!("{} is not valid YAML: {e}", file.display())));
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            for doc in docs.into_iter().filter(|d| !d.is_null()) {
                let source = format!("{sub}/{}", name.as_deref().unwrap_or("?"));
                crds.push(slim_crd(doc, &source));
            }
        }
    }

    let out = Path::new(&env_var("OUT_DIR")).join("crds.json");
    let json = serde_json::to_string(&Value::Array(crds))
        .unwrap_or_else(|e| fail(&format!("cannot serialise the CRDs: {e}")));
    fs::write(&out, json).unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display())));
}

fn env_var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| fail(&format!("cargo did not set {name}")))
}

/// Stops the build with `message` shown as a cargo error (no panic backtrace in the way).
fn fail(message: &str) -> ! {
    println!("cargo::error={message}");
    std::process::exit(1);
}

/// The `*.yaml` files of `dir`, sorted so the embedded order never depends on the file system.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| {
        fail(&format!(
            "CRD directory {} is missing ({e}). It is read from $KK_SHARED_DIR/crds/, or from \
             <repo>/../shared/crds/ when KK_SHARED_DIR is unset: set KK_SHARED_DIR to the folder \
             that holds crds/",
            dir.display()
        ))
    });
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        fail(&format!(
            "no *.yaml CRD in {} (check KK_SHARED_DIR)",
            dir.display()
        ));
    }
    files
}

/// Keeps group, kind, scope and per version: name, served, subresources and the schema.
fn slim_crd(doc: Value, source: &str) -> Value {
    let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
    let mut out = Map::new();
    out.insert("source".into(), Value::String(source.into()));
    for key in ["group", "scope"] {
        out.insert(key.into(), spec.get(key).cloned().unwrap_or(Value::Null));
    }
    let kind = spec.get("names").and_then(|n| n.get("kind")).cloned();
    out.insert("kind".into(), kind.unwrap_or(Value::Null));
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().map(slim_version).collect())
        .unwrap_or_default();
    out.insert("versions".into(), Value::Array(versions));
    Value::Object(out)
}

fn slim_version(version: &Value) -> Value {
    let mut out = Map::new();
    for key in ["name", "served", "subresources"] {
        if let Some(v) = version.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let schema = version
        .get("schema")
        .and_then(|s| s.get("openAPIV3Schema"))
        .cloned()
        .unwrap_or(Value::Null);
    out.insert("schema".into(), strip_descriptions(schema));
    Value::Object(out)
}

/// Drops the `description` keyword of every schema node (not properties that happen to be
/// called "description"): it is most of the text and validation never reads it.
fn strip_descriptions(schema: Value) -> Value {
    let Value::Object(mut node) = schema else {
        return schema;
    };
    node.remove("description");
    if let Some(Value::Object(props)) = node.get_mut("properties") {
        for prop in props.values_mut() {
            *prop = strip_descriptions(prop.take());
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = node.get_mut(key) {
            *child = strip_descriptions(child.take());
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = node.get_mut(key) {
            for branch in branches {
                *branch = strip_descriptions(branch.take());
            }
        }
    }
    Value::Object(node)
}

//! SARIF 2.1.0 for GitHub code scanning (`github/codeql-action/upload-sarif`).
//!
//! Every registered rule is listed in `tool.driver.rules` (so `ruleIndex` is stable across
//! runs); each finding is a result located at its file, line and column. Files rendered in
//! memory from a spec are located at the spec, since only repository files can be annotated;
//! their bundle path and position lead the message.

use serde_json::{Value, json};

use crate::diagnostic::{Diagnostic, Report, RuleMeta, Severity};
use crate::registry::RULES;

pub const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// An advice rule's findings are notes, whatever their severity: code scanning shows them
/// without failing a check on them (their message says why).
fn rule_level(meta: &RuleMeta, severity: Severity) -> &'static str {
    if meta.advice.is_some() {
        "note"
    } else {
        level(severity)
    }
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

pub fn render(report: &Report) -> String {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            let m = r.meta();
            json!({
                "id": m.code,
                "name": m.name,
                "shortDescription": {"text": m.summary},
                "fullDescription": {"text": m.summary},
                "help": {"text": m.doc.trim(), "markdown": m.doc.trim()},
                "defaultConfiguration": {"level": rule_level(m, m.severity)},
                "properties": {"tags": if m.advice.is_some() { vec!["advice"] } else { vec![] }},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .diagnostics
        .iter()
        .map(|d| result(d, report))
        .collect();
    let value = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "kubean-karpenter",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

fn result(d: &Diagnostic, report: &Report) -> Value {
    let rule_index = RULES.iter().position(|r| r.code() == d.code);
    let meta = rule_index.map(|i| RULES[i].meta());
    let mut text = format!("{}: {}", d.object, d.message);
    let (uri, region) = match report.origins.get(&d.file) {
        Some(origin) => {
            text = format!("{} ({}:{}) {text}", d.file, d.pos.line, d.pos.col);
            (artifact_uri(origin), json!({"startLine": 1}))
        }
        None => (
            artifact_uri(&d.file),
            json!({"startLine": d.pos.line.max(1), "startColumn": d.pos.col.max(1)}),
        ),
    };
    if let Some(help) = &d.help {
        text.push_str("\nHelp: ");
        text.push_str(help);
    }
    json!({
        "ruleId": d.code,
        "ruleIndex": rule_index,
        "level": meta.map_or_else(|| level(d.severity), |m| rule_level(m, d.severity)),
        "message": {"text": text},
        "locations": [{
            "physicalLocation": {
                "artifactLocation": {"uri": uri},
                "region": region,
            },
            "logicalLocations": [{"name": d.object, "kind": "object"}],
        }],
    })
}

/// A relative path as a URI reference (forward slashes, percent-encoded); absolute paths as
/// `file://` URIs.
pub fn artifact_uri(path: &str) -> String {
    let path = path.replace('\\', "/");
    let path = path.strip_prefix("./").unwrap_or(&path);
    let mut out = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if path.starts_with('/') {
        format!("file://{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        assert_eq!(artifact_uri("./a b/c.yaml"), "a%20b/c.yaml");
        assert_eq!(artifact_uri("/tmp/x.yaml"), "file:///tmp/x.yaml");
        assert_eq!(artifact_uri("<stdin>"), "%3Cstdin%3E");
    }
}

//! Machine-readable output. The shape is versioned; fields are only ever added.

use serde_json::{Value, json};

use crate::diagnostic::{Report, Severity};

pub fn render(report: &Report) -> String {
    let diagnostics: Vec<Value> = report
        .diagnostics
        .iter()
        .map(|d| {
            json!({
                "code": d.code,
                "rule": d.rule,
                "severity": d.severity.as_str(),
                "object": d.object,
                "file": d.file,
                "line": d.pos.line,
                "column": d.pos.col,
                "message": d.message,
                "help": d.help,
            })
        })
        .collect();
    let value = json!({
        "version": 1,
        "summary": {
            "files": report.files,
            "objects": report.objects,
            "errors": report.count(Severity::Error),
            "warnings": report.count(Severity::Warning),
            "infos": report.count(Severity::Info),
            "suppressed": report.suppressed,
        },
        "diagnostics": diagnostics,
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

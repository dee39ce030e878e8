//! Compiler-style output: one block per finding with the offending line and a caret.
//!
//! ```text
//! error[KK007]: EC2NodeClass/gpu: amiSelectorTerms[0].alias al2023@latest ...
//!   --> nodeclasses/gpu.yaml:12:14
//!    |
//! 12 |   - alias: al2023@latest
//!    |            ^
//!    = help: pin a release: al2023@v20260827
//! ```

use crate::diagnostic::{Diagnostic, Report, Severity};

/// Lines longer than this are shown cut around the column.
const MAX_SHOWN: usize = 120;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for d in &report.diagnostics {
        block(d, &mut out);
        out.push('\n');
    }
    out.push_str(&summary(report));
    out.push('\n');
    out
}

fn block(d: &Diagnostic, out: &mut String) {
    out.push_str(&format!(
        "{}[{}]: {}: {}\n",
        d.severity, d.code, d.object, d.message
    ));
    let number = d.pos.line.to_string();
    let pad = " ".repeat(number.len());
    out.push_str(&format!("{pad}--> {}:{}\n", d.file, d.pos));
    if let Some(line) = &d.source_line {
        let (shown, caret_at) = window(line, d.pos.col.saturating_sub(1));
        out.push_str(&format!("{pad} |\n{number} | {shown}\n"));
        out.push_str(&format!("{pad} | {caret_at}^\n"));
    }
    if let Some(help) = &d.help {
        out.push_str(&format!("{pad} = help: {help}\n"));
    }
}

/// The part of `line` to show and the whitespace that puts a caret under char `col` (0-based).
fn window(line: &str, col: usize) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    let col = col.min(chars.len());
    let start = if chars.len() > MAX_SHOWN && col > MAX_SHOWN / 2 {
        col - MAX_SHOWN / 2
    } else {
        0
    };
    let end = (start + MAX_SHOWN).min(chars.len());
    let mut shown: String = chars[start..end].iter().collect();
    let mut caret: String = chars[start..col]
        .iter()
        .map(|c| if *c == '\t' { '\t' } else { ' ' })
        .collect();
    if start > 0 {
        shown.insert(0, '…');
        caret.insert(0, ' ');
    }
    if end < chars.len() {
        shown.push('…');
    }
    (shown, caret)
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

pub fn summary(report: &Report) -> String {
    let scope = format!(
        "{} in {}",
        plural(report.objects, "object"),
        plural(report.files, "file")
    );
    let suppressed = if report.suppressed > 0 {
        format!(", {} suppressed", report.suppressed)
    } else {
        String::new()
    };
    if report.diagnostics.is_empty() {
        return format!("no problems found ({scope}{suppressed})");
    }
    let counts: Vec<String> = [
        (Severity::Error, "error"),
        (Severity::Warning, "warning"),
        (Severity::Info, "info"),
    ]
    .into_iter()
    .filter_map(|(s, word)| {
        let n = report.count(s);
        (n > 0).then(|| {
            if s == Severity::Info {
                format!("{n} info")
            } else {
                plural(n, word)
            }
        })
    })
    .collect();
    format!(
        "found {}: {} ({scope}{suppressed})",
        plural(report.diagnostics.len(), "problem"),
        counts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_keeps_the_caret_under_the_column() {
        assert_eq!(
            window("  - alias: x", 11),
            ("  - alias: x".into(), " ".repeat(11))
        );
        let long = "a".repeat(300);
        let (shown, caret) = window(&long, 200);
        assert!(shown.starts_with('…') && shown.ends_with('…'));
        assert_eq!(caret.chars().count(), 61);
    }
}

//! What a rule reports (and the [`RuleMeta`] every finding carries), and the sorted result
//! of one lint run.

use std::fmt;
use std::str::FromStr;

use kk_model::Pos;

/// How bad a finding is. Ordered: `Info < Warning < Error`, so `--fail-on` is a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so `{:<8}` lines up columns.
        f.pad(self.as_str())
    }
}

impl FromStr for Severity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "info" | "note" => Ok(Severity::Info),
            "warning" | "warn" => Ok(Severity::Warning),
            "error" => Ok(Severity::Error),
            other => Err(format!(
                "unknown severity {other:?} (expected error, warning or info)"
            )),
        }
    }
}

/// One finding, located in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Rule code, `KK007`.
    pub code: &'static str,
    /// Rule name, `ami-alias-latest`.
    pub rule: &'static str,
    pub severity: Severity,
    /// `Kind/name` of the object the finding is about (`EC2NodeClass/gpu`).
    pub object: String,
    /// File name as given on the command line, or `<spec>#<bundle path>` for a rendered bundle.
    pub file: String,
    pub pos: Pos,
    pub message: String,
    /// What to do about it, one or two sentences.
    pub help: Option<String>,
    /// The source line at `pos`, filled in by the framework for the code frame.
    pub source_line: Option<String>,
    /// The line the object starts on, for object-level inline suppressions.
    pub object_line: usize,
}

impl Diagnostic {
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Overrides the rule's default severity for this one finding.
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// Moves the finding to another position in the same file.
    pub fn at(mut self, pos: Pos) -> Self {
        self.pos = pos;
        self
    }

    /// The deterministic output order: file, line, column, code, then message.
    pub fn sort_key(&self) -> (&str, usize, usize, &str, &str) {
        (
            &self.file,
            self.pos.line,
            self.pos.col,
            self.code,
            &self.message,
        )
    }
}

/// The result of linting a set of inputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Sorted by file, line, column, code.
    pub diagnostics: Vec<Diagnostic>,
    /// Input files read (a rendered spec counts each bundle file).
    pub files: usize,
    /// Documents linted (embedded inventory documents not counted).
    pub objects: usize,
    /// Findings dropped by the config file or inline comments.
    pub suppressed: usize,
    /// For files rendered in memory: the spec each came from (file name → spec path).
    pub origins: std::collections::BTreeMap<String, String>,
}

impl Report {
    /// Findings at or above `severity`.
    pub fn count_at_least(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity >= severity)
            .count()
    }

    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// Whether the run should exit 1 under `--fail-on severity`.
    pub fn fails(&self, fail_on: Severity) -> bool {
        self.count_at_least(fail_on) > 0
    }
}

/// What a rule is, for `--list-rules`, `--explain`, docs and SARIF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleMeta {
    /// `KK007`: `KK` and three digits, never reused.
    pub code: &'static str,
    /// Kebab-case, `ami-alias-latest`.
    pub name: &'static str,
    /// Severity of its findings unless a finding says otherwise.
    pub severity: Severity,
    /// One sentence, no trailing period: the title of its docs page.
    pub summary: &'static str,
    /// Markdown with the sections `## What`, `## Why`, `## Example`, `## Fix`, in that order.
    pub doc: &'static str,
    /// `Some` for a rule that encodes this project's advice (the seed runbooks' choices) rather
    /// than a defect Karpenter or the cluster would show: its findings say so.
    pub advice: Option<Advice>,
}

/// What an advice rule's findings add: that it is advice, the alternative, what that costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    /// What people do instead, e.g. "follow `@latest`".
    pub alternative: &'static str,
    /// What the alternative costs, e.g. "every AMI release replaces every node".
    pub cost: &'static str,
}

impl RuleMeta {
    /// The sentence an advice rule's findings end with: that it is advice, the alternative and
    /// its cost, and the two ways to silence it.
    pub fn advice_note(&self) -> Option<String> {
        let advice = self.advice?;
        Some(format!(
            "this is the project's advice, not a defect: the alternative, {}, costs {}; silence \
             it with `# {} disable={}` above the line or `disable: [{}]` in {}",
            advice.alternative,
            advice.cost,
            crate::suppress::DIRECTIVE,
            self.code,
            self.code,
            crate::config::CONFIG_FILE_NAME,
        ))
    }
}

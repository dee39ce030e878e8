//! `kubean-karpenter lint`: checks Karpenter, Kubean and NVIDIA manifests (or a rendered
//! bundle) object by object and across objects, and reports each finding with a rule code,
//! severity, object, file:line:col, message and help.
//!
//! Owns the rules and their diagnostics. Must not do I/O, change the objects it reads, or
//! re-implement Karpenter's semantics: requirements, tolerations and label domains come from
//! `kk-karpenter`.
//!
//! Pure: the caller reads files (see the CLI) and passes [`Input`]s; nothing here does I/O.
//! Flow: [`input::load`] parses and classifies → [`Context::new`] indexes across objects →
//! every enabled rule of [`registry::RULES`] runs → suppressions → sorted [`Report`].

pub mod config;
pub mod context;
pub mod diagnostic;
pub mod docs;
pub mod gpu;
pub mod input;
pub mod output;
pub mod registry;
pub mod reservations;
pub mod rule;
pub mod rules;
pub mod sched;
pub mod suppress;
pub mod userdata;

use std::collections::BTreeMap;

pub use config::Config;
pub use context::Context;
pub use diagnostic::{Diagnostic, Report, Severity};
pub use input::{Input, LoadError, Loaded};
pub use registry::RULES;
pub use rule::{Rule, RuleMeta};

/// Loads `inputs` and lints them. An input that is not YAML we accept is an error (exit 2),
/// never a finding.
pub fn lint(inputs: &[Input], config: &Config) -> Result<Report, LoadError> {
    let loaded = input::load(inputs)?;
    Ok(check(&loaded, config))
}

/// Runs every enabled rule over already loaded inputs.
pub fn check(loaded: &Loaded, config: &Config) -> Report {
    let ctx = Context::new(loaded);
    let mut found = Vec::new();
    for rule in RULES.iter().filter(|r| config.is_enabled(r.code())) {
        rule.check(&ctx, &mut found);
    }
    let sources: BTreeMap<&str, &input::Source> = loaded
        .sources
        .iter()
        .rev()
        .map(|s| (s.name.as_str(), s))
        .collect();
    let mut report = Report {
        files: loaded.sources.len(),
        objects: loaded.objects.len(),
        origins: loaded
            .sources
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.origin.clone()?)))
            .collect(),
        ..Report::default()
    };
    for mut diagnostic in found {
        let source = sources.get(diagnostic.file.as_str());
        if source.is_some_and(|s| s.directives.suppresses(&diagnostic, diagnostic.object_line)) {
            report.suppressed += 1;
            continue;
        }
        // An advice rule's finding says it is advice, the alternative, and how to silence it.
        if let Some(note) = RULES
            .iter()
            .find(|r| r.code() == diagnostic.code)
            .and_then(|r| r.meta().advice_note())
        {
            diagnostic.message = format!("{} ({note})", diagnostic.message);
        }
        // Code frames never show a bootstrap token or AWS key (KK009 masks them in messages).
        diagnostic.source_line = source
            .and_then(|s| s.line(diagnostic.pos.line))
            .map(rules::userdata::literal_secret::redact);
        report.diagnostics.push(diagnostic);
    }
    report
        .diagnostics
        .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    report.diagnostics.dedup();
    report
}

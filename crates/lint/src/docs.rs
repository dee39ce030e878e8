//! Rule documentation: `lint --explain CODE` and the generated `docs/rules/*.md`.
//! Both come from each rule's `DOC`, so the docs cannot drift from the code.

use crate::registry::RULES;
use crate::rule::Rule;

/// The sections every rule's `DOC` has, in this order.
pub const SECTIONS: [&str; 4] = ["## What", "## Why", "## Example", "## Fix"];

/// How a rule's `DOC` breaks the four-section layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocError {
    #[error("sections are {0:?}, expected {SECTIONS:?} in that order")]
    Sections(Vec<String>),
    #[error("section {0:?} is empty")]
    Empty(&'static str),
}

/// Checks that `doc` has exactly the four sections, in order, each with text.
pub fn check_doc(doc: &str) -> Result<(), DocError> {
    let headings: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("## "))
        .map(str::trim_end)
        .collect();
    if headings != SECTIONS {
        return Err(DocError::Sections(
            headings.into_iter().map(str::to_owned).collect(),
        ));
    }
    for (i, heading) in SECTIONS.iter().enumerate() {
        let start = doc.find(heading).map(|at| at + heading.len()).unwrap_or(0);
        let end = SECTIONS
            .get(i + 1)
            .and_then(|next| doc.find(next))
            .unwrap_or(doc.len());
        if doc
            .get(start..end)
            .is_none_or(|body| body.trim().is_empty())
        {
            return Err(DocError::Empty(heading));
        }
    }
    Ok(())
}

/// The page of one rule (`docs/rules/<CODE>.md`, and what `--explain` prints).
pub fn rule_page(rule: &dyn Rule) -> String {
    let meta = rule.meta();
    format!(
        "<!-- Generated from crates/lint/src/rules: edit the rule's DOC, then run \
         KK_UPDATE_DOCS=1 cargo test -p kk-lint --test it docs:: -->\n\
         # {code} {name}\n\n\
         {summary}.\n\n\
         Default severity: **{severity}**. Disable with `disable: [{code}]` in \
         `.kubean-karpenter-lint.yaml`, or `# kubean-karpenter-lint: disable={code}` on or above \
         the line.\n\n\
         {advice}{doc}\n",
        code = meta.code,
        name = meta.name,
        summary = meta.summary,
        severity = meta.severity,
        advice = advice_paragraph(meta),
        doc = meta.doc.trim(),
    )
}

/// For an advice rule: that it is advice, the alternative and what it costs, and that SARIF
/// reports it as a note.
fn advice_paragraph(meta: &crate::rule::RuleMeta) -> String {
    match meta.advice {
        Some(advice) => format!(
            "**Advice, not a defect.** This rule encodes the seed runbooks' choice; Karpenter and \
             the cluster work either way. The alternative, {}, costs {}. Its findings say so, \
             and SARIF reports them as notes.\n\n",
            advice.alternative, advice.cost
        ),
        None => String::new(),
    }
}

/// What `lint --explain` prints: the page without the generated-file marker.
pub fn explain(rule: &dyn Rule) -> String {
    let page = rule_page(rule);
    match page.split_once("-->\n") {
        Some((_, rest)) => rest.to_owned(),
        None => page,
    }
}

/// `docs/rules/README.md`: every rule in a table.
pub fn index() -> String {
    let mut out = String::from(
        "<!-- Generated from crates/lint/src/rules: run KK_UPDATE_DOCS=1 cargo test -p kk-lint --test it docs:: -->\n\
         # kubean-karpenter lint rules\n\n\
         `kubean-karpenter lint --explain CODE` prints a rule's page; see [../reference/rules.md](../reference/rules.md) for \
         usage, output formats and suppressions.\n\n\
         Rules marked *advice* encode the seed runbooks' choices rather than defects; their \
         findings say so and name the alternative.\n\n\
         | Code | Name | Severity | Summary |\n\
         | --- | --- | --- | --- |\n",
    );
    for rule in RULES {
        let meta = rule.meta();
        out.push_str(&format!(
            "| [{code}]({code}.md) | {name} | {severity} | {summary} |\n",
            code = meta.code,
            name = meta.name,
            severity = meta.severity,
            summary = if meta.advice.is_some() {
                format!("*advice*: {}", meta.summary)
            } else {
                meta.summary.to_owned()
            },
        ));
    }
    out
}

/// Every generated file, relative to `docs/rules/`.
pub fn generated() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = RULES
        .iter()
        .map(|r| (format!("{}.md", r.meta().code), rule_page(*r)))
        .collect();
    files.push(("README.md".into(), index()));
    files.sort();
    files
}

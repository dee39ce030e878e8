//! What the two differential tests (provisioning's `differential`, disruption's
//! `disrupt_differential`) share: reading what docs/internals/fidelity.md lists under a heading, and the
//! per-kind summary of a comparison's divergences.

use std::collections::{BTreeMap, BTreeSet};

/// The lines of docs/internals/fidelity.md's section under the heading line `heading`
/// (`## Divergence kinds`), up to the next heading of its level or above.
fn section<'a>(doc: &'a str, heading: &str) -> impl Iterator<Item = &'a str> {
    let level = |line: &str| {
        let hashes = line.len() - line.trim_start_matches('#').len();
        (hashes > 0 && line[hashes..].starts_with(' ')).then_some(hashes)
    };
    let Some(own) = level(heading) else {
        panic!("{heading:?} is not a Markdown heading");
    };
    doc.lines()
        .skip_while(move |line| line.trim_end() != heading)
        .skip(1)
        .take_while(move |line| level(line).is_none_or(|l| l > own))
}

/// Names in backticks in the section under `heading`.
pub fn backticked<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    section(doc, heading)
        .flat_map(|line| line.split('`').skip(1).step_by(2))
        .collect()
}

/// The divergence kinds (`deterministic:…`, `nondeterministic:…`) the section under `heading`
/// lists: each the first cell of a table row. The prose around the table names kinds too,
/// those it does not accept (`nondeterministic:candidates` under "Disruption divergence
/// kinds").
pub fn listed_kinds(doc: &str, heading: &str) -> BTreeSet<String> {
    section(doc, heading)
        .filter_map(|line| line.strip_prefix("| `")?.split('`').next())
        .filter(|s| s.starts_with("deterministic:") || s.starts_with("nondeterministic:"))
        .map(str::to_owned)
        .collect()
}

/// Divergences `(scenario, kind)` grouped by kind, each kind printed on a line of its own
/// after `prefix`, marked when docs/internals/fidelity.md does not list it (`known`).
pub fn by_kind<'a>(
    prefix: &str,
    divergences: impl IntoIterator<Item = (&'a str, &'a str)>,
    known: &BTreeSet<String>,
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let mut by_kind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, kind) in divergences {
        by_kind.entry(kind).or_default().push(name);
    }
    for (kind, names) in &by_kind {
        println!(
            "{prefix}: {} {kind}{}: {}",
            names.len(),
            if known.contains(*kind) {
                ""
            } else {
                " (NEW KIND)"
            },
            names.join(" ")
        );
    }
    by_kind
}

#[test]
fn a_section_ends_at_the_next_heading_of_its_level_or_above() {
    let doc = "## Divergence kinds\n| `deterministic:grouping` | `gen-s1-0001` |\n### A subsection\n\
               | `nondeterministic:pending-pods` | why |\n## Next\n| `deterministic:reason` |\n\
               ### Disruption divergence kinds\n`nondeterministic:method`\n#### Deeper\n\
               `deterministic:nodes`\n### After\n`deterministic:decision`\n";
    assert_eq!(
        listed_kinds(doc, "## Divergence kinds"),
        BTreeSet::from([
            "deterministic:grouping".to_owned(),
            "nondeterministic:pending-pods".to_owned()
        ])
    );
    assert_eq!(
        backticked(doc, "### Disruption divergence kinds"),
        ["nondeterministic:method", "deterministic:nodes"]
    );
    assert!(backticked(doc, "## Absent").is_empty());
}

#[test]
fn the_fidelity_doc_lists_the_kinds_its_tables_accept_and_not_those_its_prose_refuses() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/internals/fidelity.md"),
    )
    .unwrap();
    let provisioning = listed_kinds(&doc, "## Divergence kinds");
    assert!(
        provisioning.contains("nondeterministic:pending-pods"),
        "{provisioning:?}"
    );
    assert!(
        provisioning.contains("deterministic:instance-type"),
        "{provisioning:?}"
    );
    assert!(!provisioning.contains("deterministic:"), "{provisioning:?}");
    let disruption = listed_kinds(&doc, "### Disruption divergence kinds");
    assert_eq!(
        disruption,
        BTreeSet::from(
            ["method", "nodes", "decision", "replacements"]
                .map(|a| format!("nondeterministic:{a}"))
        )
    );
}

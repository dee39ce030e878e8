//! KK044: an EC2NodeClass selector term whose only selecting fields are empty (`tags: {}`,
//! `name: ""`, `ssmParameter: ""`) selects everything up to Karpenter 1.15.2 and nothing after.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a term of an EC2NodeClass's `subnetSelectorTerms`, `securityGroupSelectorTerms` or
`amiSelectorTerms` whose selecting fields are all empty: `tags: {}`, `name: ""`,
`ssmParameter: ""` (alone or together; an AMI term's `owner` narrows, it does not select). The
CRD admits such terms: its rules check that a field is present and that tag keys and values are
not empty strings, not that the map has a key.

## Why
What Karpenter does with the term depends on its version:
- **up to 1.15.2** (read in the v1.15.2 module's `pkg/providers/{subnet,securitygroup,amifamily}`):
  the term becomes a query **without filters**. A subnet term then matches every subnet of the
  region, in every VPC; a security-group term every security group, all attached to each node;
  an AMI term every image the account may launch, public ones included (only `owner` narrows
  it), and the newest of them is launched. The class stays Ready.
- **1.15.3, 1.14.4 and 1.9.4** (announced by the AWS provider's release notes as "Action
  Required"; those releases are not served where this rule was written, so this part is their
  word, not a test): an empty term is ignored. If every term of the list is empty the class turns
  NotReady and launches nothing; if only some are, the selection narrows and nodes placed by the
  empty term (a subnet, security groups or an AMI outside the other terms) drift and are replaced.

`tags: {}` is usually a templating accident: a Helm value or a Kustomize patch that was meant
to fill the map rendered nothing.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  subnetSelectorTerms:
    - tags: {}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
```

## Fix
Give the term what it is meant to select (`tags: {karpenter.sh/discovery: <cluster>}`, an
`id`, a `name`), or remove it. `kubean-karpenter render` writes discovery tags or IDs from the
spec, never an empty term (`validate` refuses an empty discovery tag).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK044",
    name: "empty-selector-term",
    severity: Severity::Error,
    summary: "EC2NodeClass selector term with only empty fields: matches everything up to Karpenter 1.15.2, ignored from 1.15.3 (NotReady or drift)",
    doc: DOC,
    advice: None,
};

pub struct EmptySelectorTerm;

/// The selector lists this rule reads: (field, what it selects, the fields that select).
const LISTS: [(&str, &str, &[&str]); 3] = [
    (
        "subnetSelectorTerms",
        "every subnet of the region, in any VPC",
        &["tags", "id"],
    ),
    (
        "securityGroupSelectorTerms",
        "every security group of the region, all attached to each node",
        &["tags", "id", "name"],
    ),
    (
        "amiSelectorTerms",
        "every image the account may launch (public ones too, unless `owner` narrows it), launching the newest",
        &["tags", "id", "name", "alias", "ssmParameter"],
    ),
];

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::String(text) => text.is_empty(),
        Value::Null => true,
        _ => false,
    }
}

/// The empty selecting fields of `term`, when it has no other: the fields that make it select
/// everything.
fn empty_fields<'a>(term: &Value, selecting: &[&'a str]) -> Option<Vec<&'a str>> {
    let present: Vec<&str> = selecting
        .iter()
        .copied()
        .filter(|f| term.get(*f).is_some())
        .collect();
    let empty: Vec<&str> = present
        .iter()
        .copied()
        .filter(|f| is_empty(&term[*f]))
        .collect();
    (!empty.is_empty() && empty.len() == present.len()).then_some(empty)
}

impl Rule for EmptySelectorTerm {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            let spec = &view.obj.doc.value["spec"];
            for (list, everything, selecting) in LISTS {
                let Some(terms) = spec[list].as_array() else {
                    continue;
                };
                let empty: Vec<(usize, Vec<&str>)> = terms
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| empty_fields(t, selecting).map(|f| (i, f)))
                    .collect();
                let all = empty.len() == terms.len();
                let later = if all {
                    "from 1.15.3 Karpenter ignores it and, with no other term, the class turns NotReady"
                } else {
                    "from 1.15.3 Karpenter ignores it, and nodes it placed outside the other terms drift"
                };
                for (i, fields) in empty {
                    let shown: Vec<String> = fields
                        .iter()
                        .map(|f| {
                            if *f == "tags" {
                                "tags: {}".to_owned()
                            } else {
                                format!("{f}: \"\"")
                            }
                        })
                        .collect();
                    let at = FieldPath::parse(&format!("spec.{list}"))
                        .index(i)
                        .key(fields[0]);
                    out.push(
                        ctx.diag(
                            &META,
                            view.obj,
                            &at,
                            format!(
                                "{list}[{i}] selects with {} only: up to Karpenter 1.15.2 it matches {everything}; {later}",
                                shown.join(", ")
                            ),
                        )
                        .with_help("give the term what it should select (tags with a key, an id or a name), or remove it"),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_term_whose_every_selecting_field_is_empty_selects_everything() {
        let selecting = &["tags", "id", "name"][..];
        assert_eq!(
            empty_fields(&json!({"tags": {}}), selecting),
            Some(vec!["tags"])
        );
        assert_eq!(
            empty_fields(&json!({"tags": {}, "name": ""}), selecting),
            Some(vec!["tags", "name"])
        );
        assert_eq!(
            empty_fields(&json!({"tags": {}, "name": "sg-web"}), selecting),
            None
        );
        assert_eq!(empty_fields(&json!({"tags": {"a": "b"}}), selecting), None);
        assert_eq!(empty_fields(&json!({"id": "sg-0123"}), selecting), None);
        // An owner alone is refused by the CRD; with an empty term it narrows, never selects.
        assert_eq!(
            empty_fields(&json!({"tags": {}, "owner": "self"}), &["tags", "name"]),
            Some(vec!["tags"])
        );
    }
}

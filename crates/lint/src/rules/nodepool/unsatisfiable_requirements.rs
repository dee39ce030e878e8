//! KK016: NodePool requirements that no instance type of the EC2 catalog satisfies, and
//! instance types or families the catalog does not know.

use kk_karpenter::labels::{INSTANCE_FAMILY, INSTANCE_TYPE};
use std::collections::BTreeSet;
use std::sync::LazyLock;

use kk_catalog::{InstanceType, catalog};
use kk_karpenter::{Operator, Requirement};
use kk_model::FieldPath;
use kk_model::karpenter::NodeSelectorRequirement;

use crate::context::{Context, NodePoolView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Evaluates each NodePool's `spec.template.spec.requirements`, in order, against the labels of
the 1,363 EC2 instance types of the built-in catalog (Karpenter's well-known labels at
v1.14.1: `node.kubernetes.io/instance-type`, `kubernetes.io/arch`,
`karpenter.k8s.aws/instance-family`, `-size`, `-generation`, `-category`, `-cpu`, `-memory`,
`-gpu-name`, `-gpu-count`, `-gpu-manufacturer`, `-gpu-memory`, ...) with Kubernetes' operators
(`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, and Karpenter's `Gte`, `Lte`). Keys the catalog does not carry (your
own labels, `topology.kubernetes.io/zone`, `karpenter.sh/capacity-type`, `kubernetes.io/os`)
are skipped. Reports:

- the first requirement after which no instance type is left, with what the types allowed by
  the requirements before it have for that key;
- a `minValues` that the remaining types cannot meet: an error under Karpenter's default
  `minValuesPolicy: Strict` (the pool launches nothing), a warning when the linted Karpenter
  values set `settings.minValuesPolicy: BestEffort` (Karpenter 1.15 launches with the
  `minValues` lowered to what the types offer);
- each value of an `In` on `node.kubernetes.io/instance-type` or
  `karpenter.k8s.aws/instance-family` that names no type or family of the catalog, with the
  closest name as a suggestion (a warning: a type newer than the catalog is possible).

## Why
Karpenter intersects the requirements with the instance types it can launch. When nothing is
left the pool is silently useless: pending pods that only this pool could take stay Pending,
and Karpenter logs "no instance type satisfied the requirements" deep in its controller log.
A typo in an instance type (`m6i.lrage`), a family without the asked GPU (`g6` has L4 GPUs,
not A10G) or a size that the family does not come in all look valid to the CRD schema.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: ["g6"]
        - key: karpenter.k8s.aws/instance-gpu-name   # g6 has l4: nothing is left
          operator: In
          values: ["a10g"]
```

## Fix
Make the requirements agree: ask for the GPU by name and drop the family (`instance-gpu-name
In [a10g]` alone gives the g5 family), or name the family that has it (`g5` for A10G, `g6` for
L4, `g6e` for L40S, `p5` for H100). `kubean-karpenter catalog` lists the types and their
labels. Correct misspelt instance types and families to the suggested name.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK016",
    name: "unsatisfiable-requirements",
    severity: Severity::Error,
    summary: "NodePool requirements that no instance type of the EC2 catalog satisfies, or unknown instance types and families",
    doc: DOC,
    advice: None,
};

pub struct UnsatisfiableRequirements;

/// Label keys the catalog carries on some type. `kubernetes.io/os` is left out: the catalog is
/// the Linux (AL2023) view, while Karpenter labels types by the node class's AMI family.
static KNOWN_KEYS: LazyLock<BTreeSet<&'static str>> = LazyLock::new(|| {
    catalog()
        .types()
        .iter()
        .flat_map(|t| t.labels.keys().map(|k| k.as_ref()))
        .filter(|k| *k != "kubernetes.io/os")
        .collect()
});

impl Rule for UnsatisfiableRequirements {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            check_pool(ctx, view, out);
        }
    }
}

fn requirements_path() -> FieldPath {
    FieldPath::parse("spec.template.spec.requirements")
}

/// The requirement in Karpenter's algebra; `None` when it cannot be evaluated (an unknown
/// operator, a `Gt` bound that is not an integer).
fn requirement(req: &NodeSelectorRequirement) -> Option<Requirement> {
    let op = Operator::parse(&req.operator).ok()?;
    Requirement::new(op, &req.values).ok()
}

fn evaluable(req: &NodeSelectorRequirement) -> bool {
    requirement(req).is_some()
}

/// Whether the instance types `req` allows include `t` (an unevaluable requirement allows all).
fn matcher(req: &NodeSelectorRequirement) -> impl Fn(&InstanceType) -> bool + '_ {
    let parsed = requirement(req);
    move |t| parsed.as_ref().is_none_or(|r| r.matches(t.label(&req.key)))
}

#[cfg(test)]
fn satisfies(t: &InstanceType, req: &NodeSelectorRequirement) -> bool {
    matcher(req)(t)
}

fn check_pool(ctx: &Context<'_>, view: &NodePoolView<'_>, out: &mut Vec<Diagnostic>) {
    let reqs = &view.pool.spec.template.spec.requirements;
    let base = requirements_path();
    let catalog = catalog();

    // Unknown instance types and families named in `In` values.
    let mut all_unknown = vec![false; reqs.len()];
    let mut some_unknown = false;
    for (i, req) in reqs.iter().enumerate() {
        if req.operator != "In" {
            continue;
        }
        let (what, known): (&str, &dyn Fn(&str) -> bool) = match req.key.as_str() {
            INSTANCE_TYPE => ("instance type", &|v: &str| catalog.get(v).is_some()),
            INSTANCE_FAMILY => ("instance family", &|v: &str| is_family(v)),
            _ => continue,
        };
        let mut unknown = 0;
        for (j, value) in req.values.iter().enumerate() {
            if known(value) {
                continue;
            }
            unknown += 1;
            let suggestion = if req.key == INSTANCE_TYPE {
                closest(value, catalog.types().iter().map(|t| t.name.as_str()))
            } else {
                closest(value, catalog.families().into_iter())
            };
            let d = ctx
                .diag(
                    &META,
                    view.obj,
                    &base.index(i).key("values").index(j),
                    format!(
                        "{what} {value:?} is not in the catalog of {} EC2 instance types",
                        catalog.len()
                    ),
                )
                .with_severity(Severity::Warning);
            out.push(match suggestion {
                Some(near) => d.with_help(format!("did you mean {near:?}?")),
                None => d.with_help(format!(
                    "`kubean-karpenter catalog` lists the known {what}s; a type newer than \
                     the catalog (Karpenter v1.14.1) is not checked"
                )),
            });
        }
        some_unknown |= unknown > 0;
        all_unknown[i] = unknown > 0 && unknown == req.values.len();
    }

    // The first requirement that leaves no type.
    let mut left: Vec<&InstanceType> = catalog.types().iter().collect();
    for (i, req) in reqs.iter().enumerate() {
        if !considered(req) {
            continue;
        }
        let allows = matcher(req);
        let next: Vec<&InstanceType> = left.iter().copied().filter(|t| allows(t)).collect();
        if next.is_empty() {
            if all_unknown[i] {
                // The unknown-value findings above already name the culprit.
                return;
            }
            let d = ctx.diag(
                &META,
                view.obj,
                &base.index(i),
                format!(
                    "requirement {} leaves no instance type: {}; this NodePool can never launch \
                     a node",
                    describe(req),
                    why_empty(&reqs[..i], req)
                ),
            );
            let d = if some_unknown {
                d.with_severity(Severity::Warning).with_help(
                    "make the requirements agree; instance types or families the catalog does \
                     not know were left out, check those first",
                )
            } else {
                d.with_help(
                    "make the requirements agree (`kubean-karpenter catalog` lists the types and \
                     their labels), or drop the one that over-constrains",
                )
            };
            out.push(d);
            return;
        }
        left = next;
    }

    // minValues the remaining types cannot meet.
    for (i, req) in reqs.iter().enumerate() {
        let Some(min) = req.min_values else { continue };
        if !considered(req) {
            continue;
        }
        let distinct: BTreeSet<&str> = left.iter().filter_map(|t| t.label(&req.key)).collect();
        if (distinct.len() as i64) < min {
            let have = format!(
                "minValues {min} on {}, but the instance types the requirements allow have only {} \
                 value{} of it ({})",
                req.key,
                distinct.len(),
                if distinct.len() == 1 { "" } else { "s" },
                shorten(sorted(distinct.clone()).into_iter(), 6)
            );
            let d = ctx.diag(&META, view.obj, &base.index(i).key("minValues"), have);
            out.push(if best_effort(ctx) {
                // Karpenter 1.15 BestEffort: the claim launches with minValues lowered.
                Diagnostic {
                    message: format!(
                        "{}: under the values' minValuesPolicy BestEffort Karpenter launches with \
                         minValues lowered to {}, less diversity than asked",
                        d.message,
                        distinct.len()
                    ),
                    ..d
                }
                .with_severity(Severity::Warning)
                .with_help("lower minValues to what the types offer, or widen the requirements")
            } else {
                Diagnostic {
                    message: format!(
                        "{}: Karpenter launches nothing for this pool (minValuesPolicy Strict, the \
                         default)",
                        d.message
                    ),
                    ..d
                }
                .with_help(
                    "lower minValues or widen the requirements (or set the Karpenter values' \
                     settings.minValuesPolicy: BestEffort to launch with fewer values)",
                )
            });
        }
    }
}

/// The linted Karpenter values set `settings.minValuesPolicy: BestEffort`.
fn best_effort(ctx: &Context<'_>) -> bool {
    ctx.values.iter().any(|v| {
        v.value(&FieldPath::parse("settings.minValuesPolicy"))
            .and_then(serde_json::Value::as_str)
            == Some("BestEffort")
    })
}

fn is_family(family: &str) -> bool {
    static FAMILIES: LazyLock<BTreeSet<&'static str>> =
        LazyLock::new(|| catalog().families().into_iter().collect());
    FAMILIES.contains(family)
}

/// `key In [a, b]`, `key Exists`.
fn describe(req: &NodeSelectorRequirement) -> String {
    if req.values.is_empty() {
        format!("{} {}", req.key, req.operator)
    } else {
        format!("{} {} [{}]", req.key, req.operator, req.values.join(", "))
    }
}

/// Whether a requirement takes part: a key the catalog carries and an operator we evaluate.
fn considered(req: &NodeSelectorRequirement) -> bool {
    KNOWN_KEYS.contains(req.key.as_str()) && evaluable(req)
}

/// `instance-gpu-name` of `karpenter.k8s.aws/instance-gpu-name`.
fn short(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// Why `req` leaves nothing after `before`: no catalog type satisfies it at all, or the types
/// that do are ruled out by an earlier requirement (the one at which they run out).
fn why_empty(before: &[NodeSelectorRequirement], req: &NodeSelectorRequirement) -> String {
    let catalog = catalog();
    let mut fitting: Vec<&InstanceType> =
        catalog.types().iter().filter(|t| matcher(req)(t)).collect();
    if fitting.is_empty() {
        let values: BTreeSet<&str> = catalog
            .types()
            .iter()
            .filter_map(|t| t.label(&req.key))
            .collect();
        return format!(
            "no type of the catalog's {} satisfies it (they have {} {})",
            catalog.len(),
            short(&req.key),
            shorten(sorted(values).into_iter(), 8)
        );
    }
    let allowed = format!(
        "the {} type{} it allows ({})",
        fitting.len(),
        if fitting.len() == 1 { "" } else { "s" },
        shorten(fitting.iter().map(|t| t.name.as_str()), 4)
    );
    for earlier in before.iter().filter(|r| considered(r)) {
        let next: Vec<&InstanceType> = fitting
            .iter()
            .copied()
            .filter(|t| matcher(earlier)(t))
            .collect();
        if next.is_empty() {
            let values: BTreeSet<&str> = fitting
                .iter()
                .filter_map(|t| t.label(&earlier.key))
                .collect();
            let have = if values.is_empty() {
                format!("have no {}", short(&earlier.key))
            } else {
                format!(
                    "have {} {}",
                    short(&earlier.key),
                    shorten(sorted(values).into_iter(), 6)
                )
            };
            return format!(
                "{allowed} {have}, which requirement {} rules out",
                describe(earlier)
            );
        }
        fitting = next;
    }
    // Unreachable when `before` left no type; said plainly all the same.
    format!("{allowed} are ruled out by the requirements before it")
}

/// Values in natural order: numbers by value, then text.
fn sorted(values: BTreeSet<&str>) -> Vec<&str> {
    let mut values: Vec<&str> = values.into_iter().collect();
    values.sort_by_key(|v| {
        (
            v.parse::<i64>().map_or(1, |_| 0),
            v.parse::<i64>().unwrap_or(0),
            *v,
        )
    });
    values
}

/// `a, b, c, ... (12 in all)`.
fn shorten<'a>(items: impl Iterator<Item = &'a str>, max: usize) -> String {
    let items: Vec<&str> = items.collect();
    if items.len() <= max {
        items.join(", ")
    } else {
        format!("{}, ... ({} in all)", items[..max].join(", "), items.len())
    }
}

/// The candidate within a few edits of `value` (transpositions count one), if any: the
/// nearest, the first in order on a tie.
fn closest<'a>(value: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = value.to_ascii_lowercase();
    let limit = 1.max(value.chars().count() / 4);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = if c == lower {
            0
        } else {
            edit_distance(&lower, c)
        };
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions cost one each.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for (i, row) in d.chunks_mut(width).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = v;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn suggestions_allow_a_transposition() {
        assert_eq!(edit_distance("m6i.lrage", "m6i.large"), 1);
        let names = catalog().types().iter().map(|t| t.name.as_str());
        assert_eq!(closest("m6i.lrage", names), Some("m6i.large"));
        let names = catalog().types().iter().map(|t| t.name.as_str());
        assert_eq!(closest("M6I.LARGE", names), Some("m6i.large"));
        assert_eq!(closest("zzzz", catalog().families().into_iter()), None);
    }

    #[test]
    fn operators_follow_kubernetes() {
        let g6 = catalog().get("g6.xlarge").unwrap();
        let m6i = catalog().get("m6i.large").unwrap();
        let gpu = "karpenter.k8s.aws/instance-gpu-count";
        assert!(satisfies(g6, &req(gpu, "Gt", &["0"])));
        assert!(!satisfies(m6i, &req(gpu, "Gt", &["0"])));
        assert!(satisfies(m6i, &req(gpu, "DoesNotExist", &[])));
        assert!(satisfies(m6i, &req(gpu, "NotIn", &["1"])));
        assert!(!satisfies(g6, &req(gpu, "NotIn", &["1"])));
        assert!(satisfies(
            g6,
            &req("karpenter.k8s.aws/instance-cpu", "Lt", &["5"])
        ));
        assert!(!evaluable(&req(gpu, "Gt", &["x"])));
        assert!(satisfies(g6, &req(gpu, "Gte", &["1"])));
        assert!(!satisfies(g6, &req(gpu, "Lte", &["0"])));
        assert!(KNOWN_KEYS.contains(INSTANCE_TYPE));
        assert!(!KNOWN_KEYS.contains("topology.kubernetes.io/zone"));
    }
}

//! KK045: Karpenter's default topology spread (`SCHEDULER_CONFIG`) that Karpenter would refuse,
//! or that differs from the defaults kube-scheduler applies (Kubespray's
//! `kube_scheduler_profiles`).

use kk_karpenter::default_spread::{Written, canonical, problems};
use kk_model::FieldPath;
use kk_model::yaml::{LoadLimits, load_documents_unlocated};
use serde_json::Value;

use crate::context::{Context, EmbeddedView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reads Karpenter's default topology spread constraints from its Helm values
(`controller.env` `SCHEDULER_CONFIG`, Karpenter 1.15: `podTopologySpread.defaultConstraints`)
and kube-scheduler's from the Kubespray variables (`kube_scheduler_profiles`, the
`PodTopologySpread` plugin's `defaultConstraints` with `defaultingType: List`) and reports:
- a `SCHEDULER_CONFIG` Karpenter refuses: not YAML, a field other than
  `podTopologySpread.defaultConstraints`, a constraint with a `labelSelector` or
  `matchLabelKeys`, a `maxSkew` below 1, a `topologyKey` that is not a label key, a
  `whenUnsatisfiable` other than DoNotSchedule / ScheduleAnyway, `minDomains` without
  DoNotSchedule, a repeated (topologyKey, whenUnsatisfiable) pair (error);
- both present in the linted set and different, compared in any order (error);
- kube-scheduler given defaults and Karpenter none, or Karpenter given defaults and
  kube-scheduler none of them (warning).

## Why
kube-scheduler gives every pod without topology spread constraints of its own the default
constraints, with a selector deduced from the pod's Services and ReplicaSet or StatefulSet.
Karpenter decides which nodes to launch by simulating that scheduler; from 1.15 it applies the
same defaults only when `SCHEDULER_CONFIG` lists them. If the two lists differ, Karpenter plans
one placement and kube-scheduler binds another: pods it meant to spread land together, nodes
launched for them stay empty and are consolidated away, and pods that kube-scheduler spreads
wait for nodes in zones Karpenter did not plan for. Karpenter parses `SCHEDULER_CONFIG` strictly
and exits at start-up on anything it refuses. It never mirrors kube-scheduler's built-in
*System* defaults (used when a cluster lists none): list the constraints explicitly on both.
Karpenter before 1.15 ignores the variable.

## Example
```yaml
# Kubespray variables (group_vars.yml in Kubean's vars ConfigMap)
kube_scheduler_profiles:
  - schedulerName: default-scheduler
    pluginConfig:
      - name: PodTopologySpread
        args:
          defaultingType: List
          defaultConstraints:
            - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
---
# Karpenter Helm values
controller:
  env:
    - name: SCHEDULER_CONFIG
      value: |
        podTopologySpread:
          defaultConstraints:
            - {maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
```

## Fix
Give both the same list, once: an ElasticCluster spec's `scheduler.defaultConstraints` renders
it into the Kubespray variables and into Karpenter's values together.
```yaml
controller:
  env:
    - name: SCHEDULER_CONFIG
      value: |
        podTopologySpread:
          defaultConstraints:
            - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK045",
    name: "scheduler-defaults-mismatch",
    severity: Severity::Error,
    summary: "Karpenter's default topology spread (SCHEDULER_CONFIG) is refused by Karpenter or differs from kube-scheduler's",
    doc: DOC,
    advice: None,
};

pub struct SchedulerDefaultsMismatch;

/// One list of default constraints, as JSON, or why it cannot be read.
type Constraints = Result<Vec<Value>, String>;

fn written(list: &[Value]) -> Vec<Written<'_>> {
    let int = |c: &Value, k: &str| c.get(k).and_then(Value::as_i64);
    list.iter()
        .map(|c| Written {
            max_skew: int(c, "maxSkew").unwrap_or(0),
            topology_key: c.get("topologyKey").and_then(Value::as_str).unwrap_or(""),
            when_unsatisfiable: c
                .get("whenUnsatisfiable")
                .and_then(Value::as_str)
                .unwrap_or(""),
            min_domains: int(c, "minDomains"),
            // Spelled out as their defaults, so written and omitted compare equal.
            node_affinity_policy: Some(
                c.get("nodeAffinityPolicy")
                    .and_then(Value::as_str)
                    .unwrap_or("Honor"),
            ),
            node_taints_policy: Some(
                c.get("nodeTaintsPolicy")
                    .and_then(Value::as_str)
                    .unwrap_or("Ignore"),
            ),
            has_selector: c.get("labelSelector").is_some_and(|s| !s.is_null()),
            has_match_label_keys: c
                .get("matchLabelKeys")
                .and_then(Value::as_array)
                .is_some_and(|k| !k.is_empty()),
        })
        .collect()
}

fn describe(list: &[Value]) -> String {
    let items: Vec<String> = canonical(&written(list))
        .iter()
        .map(|c| {
            format!(
                "{} maxSkew {} {}",
                c.topology_key, c.max_skew, c.when_unsatisfiable
            )
        })
        .collect();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// `SCHEDULER_CONFIG`'s text → its constraints, as Karpenter reads it (strictly).
fn karpenter_constraints(text: &str) -> Constraints {
    let docs = load_documents_unlocated(text, LoadLimits::default())
        .map_err(|e| format!("not YAML: {}", e.message))?;
    let Some(doc) = docs.into_iter().next() else {
        return Ok(Vec::new());
    };
    let value = doc.value;
    let Some(object) = value.as_object() else {
        return Err("not a mapping with podTopologySpread".into());
    };
    if let Some(other) = object.keys().find(|k| *k != "podTopologySpread") {
        return Err(format!(
            "{other}: not a field of Karpenter's scheduler configuration"
        ));
    }
    let spread = object
        .get("podTopologySpread")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(other) = spread
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| *k != "defaultConstraints")
    {
        return Err(format!(
            "podTopologySpread.{other}: not a field Karpenter reads (it has no defaultingType)"
        ));
    }
    let list = match spread.get("defaultConstraints") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err("podTopologySpread.defaultConstraints: not a list".into()),
    };
    if let Some(p) = problems(&written(&list)).first() {
        let field = if p.field.is_empty() {
            String::new()
        } else {
            format!(".{}", p.field)
        };
        return Err(format!(
            "podTopologySpread.defaultConstraints[{}]{field}: {}",
            p.index, p.message
        ));
    }
    Ok(list)
}

/// kube-scheduler's default constraints from the Kubespray variables: `None` when the profiles
/// list none (kube-scheduler then uses its System defaults, which Karpenter never mirrors).
fn cluster_constraints(vars: &EmbeddedView<'_>) -> Option<Vec<Value>> {
    let profiles = vars
        .embedded
        .doc
        .value
        .get("kube_scheduler_profiles")?
        .as_array()?;
    profiles
        .iter()
        .flat_map(|p| p.get("pluginConfig").and_then(Value::as_array))
        .flatten()
        .find(|c| c.get("name").and_then(Value::as_str) == Some("PodTopologySpread"))
        .and_then(|c| c.get("args"))
        .filter(|a| a.get("defaultingType").and_then(Value::as_str) == Some("List"))
        .and_then(|a| a.get("defaultConstraints"))
        .and_then(Value::as_array)
        .cloned()
}

/// The `controller.env` entry holding `SCHEDULER_CONFIG`: its path and text.
fn scheduler_config(obj: &Object) -> Option<(FieldPath, &str)> {
    let env = obj.value(&FieldPath::parse("controller.env"))?.as_array()?;
    env.iter().enumerate().find_map(|(i, e)| {
        (e.get("name").and_then(Value::as_str) == Some("SCHEDULER_CONFIG")).then(|| {
            (
                FieldPath::parse("controller.env").index(i).key("value"),
                e.get("value").and_then(Value::as_str).unwrap_or(""),
            )
        })
    })
}

impl Rule for SchedulerDefaultsMismatch {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let cluster: Vec<Option<Vec<Value>>> =
            ctx.group_vars.iter().map(cluster_constraints).collect();
        for &obj in &ctx.values {
            let config = scheduler_config(obj);
            let karpenter = match &config {
                Some((path, text)) => match karpenter_constraints(text) {
                    Ok(list) => Some(list),
                    Err(why) => {
                        out.push(
                            ctx.diag(
                                &META,
                                obj,
                                path,
                                format!("SCHEDULER_CONFIG: {why}: Karpenter exits at start-up"),
                            )
                            .with_help(
                                "write podTopologySpread.defaultConstraints as kube-scheduler's \
                                 List defaulting has them, without labelSelector or matchLabelKeys",
                            ),
                        );
                        continue;
                    }
                },
                None => None,
            };
            let at = config
                .as_ref()
                .map_or_else(|| FieldPath::parse("controller"), |(p, _)| p.clone());
            for theirs in &cluster {
                let same =
                    |a: &[Value], b: &[Value]| canonical(&written(a)) == canonical(&written(b));
                match (&karpenter, theirs) {
                    (Some(ours), Some(theirs)) if !same(ours, theirs) => out.push(
                        ctx.diag(
                            &META,
                            obj,
                            &at,
                            format!(
                                "Karpenter's default topology spread ({}) differs from \
                                 kube-scheduler's in kube_scheduler_profiles ({}): Karpenter \
                                 launches nodes for one placement and kube-scheduler binds \
                                 another",
                                describe(ours),
                                describe(theirs)
                            ),
                        )
                        .with_help("give SCHEDULER_CONFIG the same defaultConstraints"),
                    ),
                    (None, Some(theirs)) if !theirs.is_empty() => out.push(
                        ctx.diag(
                            &META,
                            obj,
                            &at,
                            format!(
                                "kube-scheduler spreads pods without constraints of their own \
                                 ({}), but Karpenter's values set no SCHEDULER_CONFIG: it plans \
                                 those pods unspread, and launches nodes kube-scheduler will not \
                                 fill as planned",
                                describe(theirs)
                            ),
                        )
                        .with_severity(Severity::Warning)
                        .with_help(
                            "add controller.env SCHEDULER_CONFIG with the same \
                             podTopologySpread.defaultConstraints (Karpenter 1.15 or later)",
                        ),
                    ),
                    (Some(ours), None) if !ours.is_empty() => out.push(
                        ctx.diag(
                            &META,
                            obj,
                            &at,
                            format!(
                                "Karpenter spreads pods by default ({}), but the Kubespray \
                                 variables list no default constraints for kube-scheduler (it \
                                 then uses its System defaults, hostname maxSkew 3 and zone \
                                 maxSkew 5, ScheduleAnyway)",
                                describe(ours)
                            ),
                        )
                        .with_severity(Severity::Warning)
                        .with_help(
                            "set kube_scheduler_profiles with PodTopologySpread's defaultingType: \
                             List and the same defaultConstraints",
                        ),
                    ),
                    _ => {}
                }
            }
        }
    }
}

//! KK001: the Karpenter controller runs on Kubean's infra nodes, and no NodePool launches nodes
//! that pass for infra, control-plane or etcd nodes.

use kk_karpenter::labels::NODEPOOL;
use kk_model::FieldPath;
use serde_json::{Value, json};

use crate::context::{Context, NodePoolView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};
use crate::sched::{self, Reach};

/// The label Kubespray puts on Kubean's infra workers (`node_labels`), which host Karpenter.
pub const INFRA_LABEL: &str = "node-role.kubernetes.io/infra";
const ROLE_DOMAIN: &str = "node-role.kubernetes.io/";
/// Role labels a Karpenter node may carry: a plain worker role claims nothing Kubean owns.
const WORKER_ROLES: &[&str] = &["worker"];

pub const DOC: &str = r#"
## What
Checks where the Karpenter controller runs, from the Karpenter Helm values and the NodePools
linted with them:
- The values must pin the controller to Kubean's infra workers: a `nodeSelector` on
  `node-role.kubernetes.io/infra`, or a required node affinity whose every term requires it.
  Unpinned values are a warning, or an error when the controller could be scheduled onto nodes
  of a linted NodePool (the values replace the chart's default affinity, which keeps the
  controller off nodes with a `karpenter.sh/nodepool` label, and the pool's taints do not stop
  it).
- A NodePool must not give its nodes a role label Kubean owns: any
  `node-role.kubernetes.io/*` label other than `node-role.kubernetes.io/worker`, as a template
  label or as an `In` / `Exists` requirement (error).
- A NodePool whose template labels satisfy the controller's `nodeSelector` is reported (error
  when the controller can really land there, warning when only the chart's default affinity
  keeps it off).

## Why
"Do not allow Karpenter to manage the control plane, etcd, or the infra workers hosting the
Karpenter controller." Karpenter consolidates, drifts and expires the nodes it launches. A
controller running on one of them can delete its own node, and until it is rescheduled and
elected again nothing launches or replaces nodes. A pool
that labels its nodes `node-role.kubernetes.io/infra` (or `control-plane`, `etcd`) makes
elastic, spot, short-lived nodes pass for Kubean's fixed ones: whatever is pinned to those
roles (the Karpenter controller, the cloud controller manager, ingress, monitoring) follows
them there.

## Example
```yaml
# karpenter/values.yaml: no nodeSelector, and an affinity that drops the chart's default
settings:
  clusterName: demo
controller:
  env: [{name: AWS_REGION, value: us-east-1}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/os, operator: In, values: [linux]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: infra-burst
spec:
  template:
    metadata:
      labels:
        node-role.kubernetes.io/infra: ""     # Karpenter nodes posing as infra workers
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: cpu}
```

## Fix
Pin the controller in the values, and keep role labels off NodePools:
```yaml
nodeSelector:
  node-role.kubernetes.io/infra: ""
tolerations:
  - key: CriticalAddonsOnly
    operator: Exists
```
Give elastic nodes their own labels (`node.lifecycle: karpenter`) and let Kubean alone label
the infra, control-plane and etcd hosts (`node_labels` in the inventory).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK001",
    name: "karpenter-controller-placement",
    severity: Severity::Error,
    summary: "Karpenter controller not pinned to infra nodes, or NodePool whose nodes pass for infra, control-plane or etcd nodes",
    doc: DOC,
    advice: None,
};

pub struct ControllerPlacement;

impl Rule for ControllerPlacement {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let controllers: Vec<Controller<'_>> =
            ctx.values.iter().map(|v| Controller::of(v)).collect();
        for c in &controllers {
            check_values(ctx, c, out);
        }
        for pool in &ctx.node_pools {
            check_pool(ctx, pool, &controllers, out);
        }
    }
}

/// The controller's placement as the chart renders it from one values document.
struct Controller<'a> {
    obj: &'a Object,
    /// `nodeSelector` entries (non-string values read as "").
    selector: Vec<(String, String)>,
    /// The required node affinity terms in effect, and whether they come from the values (else
    /// they are the chart's default: `karpenter.sh/nodepool DoesNotExist`).
    terms: Vec<Value>,
    terms_from_values: bool,
    /// A pseudo pod spec for the scheduling helpers.
    pod: Value,
}

impl<'a> Controller<'a> {
    fn of(obj: &'a Object) -> Self {
        let v = &obj.doc.value;
        let selector = match v.get("nodeSelector") {
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect(),
            _ => Vec::new(),
        };
        let (terms, terms_from_values) = match user_terms(v) {
            Some(terms) => (terms, true),
            None => (
                vec![json!({"matchExpressions": [{"key": NODEPOOL, "operator": "DoesNotExist"}]})],
                false,
            ),
        };
        let pod = json!({"tolerations": v.get("tolerations").cloned().unwrap_or(Value::Null)});
        Controller {
            obj,
            selector,
            terms,
            terms_from_values,
            pod,
        }
    }

    /// Pinned to infra workers: the nodeSelector or every required affinity term asks for the
    /// infra role.
    fn pinned(&self) -> bool {
        self.selector.iter().any(|(k, _)| k == INFRA_LABEL)
            || (!self.terms.is_empty() && self.terms.iter().all(term_requires_infra))
    }

    /// Whether the controller can be scheduled onto nodes of `pool`: selector, affinity in
    /// effect, and the pool's hard taints against the controller's tolerations.
    fn lands_on(&self, pool: &NodePoolView<'_>) -> bool {
        let tolerations = sched::tolerations(&self.pod);
        if !sched::untolerated_taints(&pool.pool, &tolerations).is_empty() {
            return false;
        }
        let affinity = any_term(&self.terms, pool);
        matches!(
            and(self.selector_reach(pool), affinity),
            Reach::All | Reach::Partial(_)
        )
    }

    fn selector_reach(&self, pool: &NodePoolView<'_>) -> Reach {
        self.selector.iter().fold(Reach::All, |acc, (k, v)| {
            and(
                acc,
                sched::expression_reach(k, "In", std::slice::from_ref(v), &pool.labels),
            )
        })
    }

    /// `values.yaml:12:1`, for messages about pools.
    fn at(&self, ctx: &Context<'_>) -> String {
        format!(
            "{}:{}",
            ctx.source(self.obj).name,
            self.obj.doc.pos(&FieldPath::root().key("nodeSelector"))
        )
    }
}

/// The values' own `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
/// .nodeSelectorTerms`, when they replace the chart's default (Helm merges maps, replaces
/// lists, and drops a key set to null).
fn user_terms(values: &Value) -> Option<Vec<Value>> {
    let mut at = values;
    for key in [
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    ] {
        match at.get(key) {
            None => return None,
            Some(Value::Null) => return Some(Vec::new()),
            Some(next) => at = next,
        }
    }
    Some(at.as_array().cloned().unwrap_or_default())
}

fn expressions(term: &Value) -> impl Iterator<Item = (&str, &str, Vec<String>)> {
    term.get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
            let values = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect();
            (text("key"), text("operator"), values)
        })
}

fn term_requires_infra(term: &Value) -> bool {
    expressions(term).any(|(key, op, values)| {
        key == INFRA_LABEL && (op == "Exists" || (op == "In" && !values.is_empty()))
    })
}

/// Reach ordered weakest first: `and` keeps the weakest, `or` the strongest (as `sched`).
fn rank(r: &Reach) -> u8 {
    match r {
        Reach::Never(_) => 0,
        Reach::Partial(_) => 1,
        Reach::Unknown => 2,
        Reach::All => 3,
    }
}

fn and(a: Reach, b: Reach) -> Reach {
    if rank(&b) < rank(&a) { b } else { a }
}

fn or(a: Reach, b: Reach) -> Reach {
    if rank(&b) > rank(&a) { b } else { a }
}

fn any_term(terms: &[Value], pool: &NodePoolView<'_>) -> Reach {
    if terms.is_empty() {
        return Reach::All;
    }
    terms.iter().fold(Reach::Never(String::new()), |acc, term| {
        let has_fields = term
            .get("matchFields")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let reach = if has_fields {
            Reach::Unknown
        } else {
            expressions(term).fold(Reach::All, |acc, (key, op, values)| {
                and(acc, sched::expression_reach(key, op, &values, &pool.labels))
            })
        };
        or(acc, reach)
    })
}

fn check_values(ctx: &Context<'_>, c: &Controller<'_>, out: &mut Vec<Diagnostic>) {
    if c.pinned() {
        return;
    }
    let lands: Vec<&str> = ctx
        .node_pools
        .iter()
        .filter(|p| c.lands_on(p))
        .map(NodePoolView::name)
        .collect();
    let (path, what) = if !c.selector.is_empty() {
        let shown: Vec<String> = c.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        (
            FieldPath::root().key("nodeSelector"),
            format!("nodeSelector ({}) does not select", shown.join(", ")),
        )
    } else if c.terms_from_values && !c.terms.is_empty() {
        (
            FieldPath::parse(
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            ),
            "required node affinity does not require, in every term,".to_owned(),
        )
    } else {
        (
            FieldPath::root(),
            "values set no nodeSelector or required node affinity on".to_owned(),
        )
    };
    let consequence = if !lands.is_empty() {
        format!(
            "it can be scheduled onto nodes of NodePool {}, which Karpenter itself consolidates, \
             drifts and expires",
            lands.join(", ")
        )
    } else if c.terms_from_values {
        "it may run on any worker, and the values replace the chart's default affinity that kept \
         it off Karpenter's own nodes"
            .to_owned()
    } else {
        "it may run on any worker; only the chart's default affinity (karpenter.sh/nodepool \
         DoesNotExist) keeps it off Karpenter's own nodes"
            .to_owned()
    };
    let message = format!(
        "Karpenter controller is not pinned to infra nodes: the {what} {INFRA_LABEL}, so \
         {consequence}"
    );
    let d = if path.is_root() {
        ctx.diag(&META, c.obj, &path, message)
    } else {
        ctx.diag_key(&META, c.obj, &path, message)
    };
    let severity = if lands.is_empty() {
        Severity::Warning
    } else {
        Severity::Error
    };
    out.push(d.with_severity(severity).with_help(format!(
        "set nodeSelector: {{{INFRA_LABEL}: \"\"}} in the Karpenter values and tolerate the infra \
         nodes' taint (CriticalAddonsOnly)"
    )));
}

/// A role label the pool claims for its nodes: where, which key, and how.
struct Claim {
    path: FieldPath,
    on_key: bool,
    key: String,
    how: &'static str,
}

fn is_claimed_role(key: &str) -> bool {
    key.strip_prefix(ROLE_DOMAIN)
        .is_some_and(|role| !WORKER_ROLES.contains(&role))
}

fn claims(pool: &NodePoolView<'_>) -> Vec<Claim> {
    let mut found = Vec::new();
    let labels_path = FieldPath::parse("spec.template.metadata.labels");
    if let Some(meta) = &pool.pool.spec.template.metadata {
        for key in meta.labels.keys().filter(|k| is_claimed_role(k)) {
            found.push(Claim {
                path: labels_path.key(key),
                on_key: true,
                key: key.clone(),
                how: "template label",
            });
        }
    }
    let reqs_path = FieldPath::parse("spec.template.spec.requirements");
    for (i, req) in pool.pool.spec.template.spec.requirements.iter().enumerate() {
        if is_claimed_role(&req.key) && matches!(req.operator.as_str(), "In" | "Exists") {
            found.push(Claim {
                path: reqs_path.index(i),
                on_key: false,
                key: req.key.clone(),
                how: "requirement",
            });
        }
    }
    found
}

/// Whether the controller's own nodeSelector (and affinity, when the values set one) reaches
/// the pool's nodes, for pool findings: `Some(lands)`, `lands` when nothing else (the chart's
/// default affinity, the pool's taints) keeps the controller off them.
fn selector_matches(c: &Controller<'_>, pool: &NodePoolView<'_>) -> Option<bool> {
    if c.selector.is_empty() {
        return None;
    }
    let explicit = if c.terms_from_values {
        and(c.selector_reach(pool), any_term(&c.terms, pool))
    } else {
        c.selector_reach(pool)
    };
    matches!(explicit, Reach::All | Reach::Partial(_)).then(|| c.lands_on(pool))
}

fn consequence(lands: bool) -> &'static str {
    if lands {
        "the controller can be scheduled onto nodes it manages itself"
    } else {
        "only the chart's default affinity or the pool's taints keep the controller off them"
    }
}

fn check_pool(
    ctx: &Context<'_>,
    pool: &NodePoolView<'_>,
    controllers: &[Controller<'_>],
    out: &mut Vec<Diagnostic>,
) {
    let matching: Vec<(&Controller<'_>, bool)> = controllers
        .iter()
        .filter_map(|c| Some((c, selector_matches(c, pool)?)))
        .collect();
    let found = claims(pool);
    for claim in &found {
        let role = claim.key.trim_start_matches(ROLE_DOMAIN);
        let mut message = format!(
            "NodePool gives its nodes the role label {} ({}): Karpenter-launched nodes pass for \
             Kubean's {role} nodes, and whatever is pinned to that role follows them onto nodes \
             Karpenter consolidates, drifts and expires",
            claim.key, claim.how
        );
        for (c, lands) in &matching {
            message.push_str(&format!(
                "; they satisfy the Karpenter controller's nodeSelector ({}): {}",
                c.at(ctx),
                consequence(*lands)
            ));
        }
        let d = if claim.on_key {
            ctx.diag_key(&META, pool.obj, &claim.path, message)
        } else {
            ctx.diag(&META, pool.obj, &claim.path, message)
        };
        out.push(d.with_help(format!(
            "remove {} from the NodePool: Kubean labels the infra, control-plane and etcd hosts \
             (node_labels in the inventory); label elastic nodes node.lifecycle=karpenter",
            claim.key
        )));
    }
    if !found.is_empty() {
        return;
    }
    // No role label, yet a template label of the pool meets the controller's nodeSelector.
    let Some(labels) = pool.pool.spec.template.metadata.as_ref().map(|m| &m.labels) else {
        return;
    };
    for (c, lands) in matching {
        let Some((key, value)) = c.selector.iter().find(|(k, _)| labels.contains_key(k)) else {
            continue;
        };
        let path = FieldPath::parse("spec.template.metadata.labels").key(key);
        let severity = if lands {
            Severity::Error
        } else {
            Severity::Warning
        };
        out.push(
            ctx.diag_key(
                &META,
                pool.obj,
                &path,
                format!(
                    "NodePool's template label {key}={value} puts its nodes under the Karpenter \
                     controller's nodeSelector ({}): {}",
                    c.at(ctx),
                    consequence(lands)
                ),
            )
            .with_severity(severity)
            .with_help(
                "pin the controller to node-role.kubernetes.io/infra and drop the label from the \
                 controller's nodeSelector",
            ),
        );
    }
}

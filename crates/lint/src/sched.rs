//! Scheduling questions shared by rules: the labels a NodePool's nodes will carry, whether a
//! pod's nodeSelector / required node affinity reaches them, and which of the pool's taints a
//! pod leaves untolerated. The semantics underneath (requirement algebra, toleration matching,
//! label domains) are Karpenter's, from `kk-karpenter`; this module only reads objects into them
//! and adds lint's "cannot tell".
//!
//! Label knowledge is three-valued on purpose: a label Karpenter or a node agent manages
//! (`topology.kubernetes.io/zone`, `nvidia.com/gpu.present`) is "unknown", and a rule must not
//! report on what it cannot know.

use std::collections::{BTreeMap, BTreeSet};

use kk_karpenter::{Operator, Requirement, labels};
use kk_model::FieldPath;
use kk_model::karpenter::NodePool;
use serde_json::Value;

pub use kk_karpenter::taint::{Effect, Taint, Toleration, TolerationOp, tolerated};

/// A taint of a NodePool as Karpenter applies it; `None` for an effect Kubernetes does not know
/// (the CRD schema refuses it, and it keeps no pod off).
pub fn taint_from_k8s(taint: &k8s_openapi::api::core::v1::Taint) -> Option<Taint> {
    Some(Taint {
        key: taint.key.clone(),
        value: taint.value.clone().unwrap_or_default(),
        effect: Effect::parse(&taint.effect).ok()?,
    })
}

/// The taints of a NodePool's nodes (`spec.template.spec.taints`).
pub fn pool_taints(pool: &NodePool) -> Vec<Taint> {
    pool.spec
        .template
        .spec
        .taints
        .iter()
        .filter_map(taint_from_k8s)
        .collect()
}

/// One entry of a pod's `tolerations` (`None` when malformed: an unknown operator or effect,
/// which the apiserver refuses).
pub fn toleration(value: &Value) -> Option<Toleration> {
    let text = |k: &str| value.get(k).and_then(Value::as_str);
    Toleration::from_fields(text("key"), text("operator"), text("value"), text("effect")).ok()
}

/// The `tolerations` of a pod spec (missing or malformed entries read as none).
pub fn tolerations(pod_spec: &Value) -> Vec<Toleration> {
    pod_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(toleration).collect())
        .unwrap_or_default()
}

/// The pool's `NoSchedule`/`NoExecute` taints that `tolerations` leave untolerated: what keeps
/// the pod off the pool's nodes for good (`PreferNoSchedule` only steers). The one place lint
/// asks "does the pod tolerate the pool's taints".
pub fn untolerated_taints(pool: &NodePool, tolerations: &[Toleration]) -> Vec<Taint> {
    kk_karpenter::taint::untolerated_hard(&pool_taints(pool), tolerations)
        .cloned()
        .collect()
}

/// What the pool says about one label on its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelValues {
    /// Set on every node, to one of these values.
    OneOf(BTreeSet<String>),
    /// Set on every node, value not constrained by the pool.
    Any,
    /// Managed by Karpenter, the cloud provider or a node agent: cannot tell.
    Unknown,
    /// Never set on the pool's nodes.
    Absent,
}

impl LabelValues {
    /// What a pool's combined requirement on a key says of its nodes' label (`None`: the key's
    /// requirements could not be read; `absent`: one of them is `DoesNotExist`).
    fn of(req: Option<&Requirement>, absent: bool) -> LabelValues {
        let Some(req) = req else {
            return LabelValues::Unknown;
        };
        match (req.is_complement(), req.values().next().is_some()) {
            (false, false) if absent => LabelValues::Absent,
            (false, _) => LabelValues::OneOf(req.values().map(str::to_owned).collect()),
            // Exists, or a Gt/Lt bound: set, value not pinned.
            (true, false) => LabelValues::Any,
            // NotIn alone: set or not, cannot tell.
            (true, true) => LabelValues::Unknown,
        }
    }
}

/// The labels a NodePool's nodes carry: template labels, requirements, `karpenter.sh/nodepool`,
/// and labels its userData passes to the kubelet with `--node-labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolLabels {
    pub pool: String,
    known: BTreeMap<String, LabelValues>,
}

impl PoolLabels {
    pub fn of(pool: &NodePool, kubelet_labels: &BTreeMap<String, String>) -> Self {
        let name = pool.metadata.name.clone().unwrap_or_default();
        // Each key's requirements intersected in Karpenter's algebra (keys as written).
        let mut combined: BTreeMap<&str, (Option<Requirement>, bool)> = BTreeMap::new();
        for req in &pool.spec.template.spec.requirements {
            let entry = combined.entry(req.key.as_str()).or_insert((None, false));
            let parsed = Operator::parse(&req.operator)
                .ok()
                .and_then(|op| Some((op, Requirement::new(op, &req.values).ok()?)));
            let Some((op, parsed)) = parsed else {
                continue;
            };
            entry.1 |= op == Operator::DoesNotExist;
            entry.0 = Some(match entry.0.take() {
                Some(have) => have.intersection(&parsed),
                None => parsed,
            });
        }
        let mut known: BTreeMap<String, LabelValues> = combined
            .into_iter()
            .map(|(key, (req, absent))| (key.to_owned(), LabelValues::of(req.as_ref(), absent)))
            .collect();
        for (key, value) in kubelet_labels {
            known
                .entry(key.clone())
                .or_insert_with(|| LabelValues::OneOf(BTreeSet::from([value.clone()])));
        }
        if let Some(meta) = &pool.spec.template.metadata {
            for (key, value) in &meta.labels {
                known.insert(
                    key.clone(),
                    LabelValues::OneOf(BTreeSet::from([value.clone()])),
                );
            }
        }
        known.insert(
            labels::NODEPOOL.into(),
            LabelValues::OneOf(BTreeSet::from([name.clone()])),
        );
        Self { pool: name, known }
    }

    pub fn get(&self, key: &str) -> LabelValues {
        match self.known.get(key) {
            Some(values) => values.clone(),
            None if is_managed_label(key) => LabelValues::Unknown,
            None => LabelValues::Absent,
        }
    }

    fn describe(&self, key: &str) -> String {
        match self.get(key) {
            LabelValues::Absent => format!("have no label {key}"),
            LabelValues::OneOf(values) if values.is_empty() => {
                format!("allow no value of {key}")
            }
            LabelValues::OneOf(values) => format!(
                "have {key}={}",
                values.into_iter().collect::<Vec<_>>().join(" or ")
            ),
            LabelValues::Any | LabelValues::Unknown => format!("have {key} with any value"),
        }
    }
}

/// Labels someone other than the NodePool sets: Karpenter's well-known labels, the kubelet's,
/// the cloud provider's, NVIDIA GPU feature discovery's. `node-role.kubernetes.io/*` is not
/// among them: the kubelet refuses to set it and Karpenter never does.
pub fn is_managed_label(key: &str) -> bool {
    if labels::domain(key) == Some("node-role.kubernetes.io") {
        return false;
    }
    labels::KUBERNETES_DOMAINS
        .into_iter()
        .chain(labels::KARPENTER_DOMAINS)
        .chain(["k8s.aws", "nvidia.com", "amd.com", "eks.amazonaws.com"])
        .any(|d| labels::in_domain(key, d))
}

/// Whether a selector reaches the pool's nodes: every one, some, none, or cannot tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    All,
    /// Some nodes only; the reason names what the others have.
    Partial(String),
    /// No node; the reason says why.
    Never(String),
    Unknown,
}

impl Reach {
    /// Both must hold (entries of a nodeSelector, expressions of one term).
    fn and(self, other: Reach) -> Reach {
        match (self, other) {
            (n @ Reach::Never(_), _) | (_, n @ Reach::Never(_)) => n,
            (p @ Reach::Partial(_), _) | (_, p @ Reach::Partial(_)) => p,
            (Reach::Unknown, _) | (_, Reach::Unknown) => Reach::Unknown,
            _ => Reach::All,
        }
    }

    /// Either may hold (the terms of a node affinity).
    fn or(self, other: Reach) -> Reach {
        match (self, other) {
            (Reach::All, _) | (_, Reach::All) => Reach::All,
            (Reach::Unknown, _) | (_, Reach::Unknown) => Reach::Unknown,
            (p @ Reach::Partial(_), _) | (_, p @ Reach::Partial(_)) => p,
            (n, _) => n,
        }
    }
}

/// Whether `key <op> values` holds on the pool's nodes.
pub fn expression_reach(key: &str, op: &str, values: &[String], labels: &PoolLabels) -> Reach {
    let have = labels.get(key);
    let pool = &labels.pool;
    let why = || format!("NodePool {pool}'s nodes {}", labels.describe(key));
    let split = |set: &BTreeSet<String>, pass: &dyn Fn(&str) -> bool| {
        let hits = set.iter().filter(|v| pass(v)).count();
        if set.is_empty() || hits == 0 {
            Reach::Never(why())
        } else if hits == set.len() {
            Reach::All
        } else {
            Reach::Partial(why())
        }
    };
    // An unknown operator or a bound that is not an integer: cannot tell.
    let Some((op, wanted)) = Operator::parse(op)
        .ok()
        .and_then(|op| Some((op, Requirement::new(op, values).ok()?)))
    else {
        return Reach::Unknown;
    };
    match (op, have) {
        (_, LabelValues::Unknown) => Reach::Unknown,
        (_, LabelValues::Absent) if wanted.matches(None) => Reach::All,
        (_, LabelValues::Absent) => Reach::Never(why()),
        (Operator::Exists, LabelValues::OneOf(_) | LabelValues::Any) => Reach::All,
        (Operator::DoesNotExist, LabelValues::OneOf(_) | LabelValues::Any) => Reach::Never(why()),
        (_, LabelValues::OneOf(set)) => split(&set, &|v| wanted.has(v)),
        (_, LabelValues::Any) => Reach::Unknown,
    }
}

/// Whether the pod spec's `nodeSelector` and required node affinity, together, reach the pool's
/// nodes: every entry of the selector and one of the affinity terms must hold.
pub fn placement_reach(pod_spec: &Value, labels: &PoolLabels) -> Reach {
    let mut reach = Reach::All;
    if let Some(Value::Object(selector)) = pod_spec.get("nodeSelector") {
        for (key, value) in selector {
            let value = value.as_str().map(str::to_owned).unwrap_or_default();
            reach = reach.and(expression_reach(key, "In", &[value], labels));
        }
    }
    let terms = pod_spec
        .get("affinity")
        .and_then(|a| a.get("nodeAffinity"))
        .and_then(|a| a.get("requiredDuringSchedulingIgnoredDuringExecution"))
        .and_then(|a| a.get("nodeSelectorTerms"))
        .and_then(Value::as_array);
    if let Some(terms) = terms
        && let Some(any) = terms
            .iter()
            .map(|t| term_reach(t, labels))
            .reduce(Reach::or)
    {
        reach = reach.and(any);
    }
    reach
}

/// Where a pod's placement constraints stop it from reaching every node of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// The nodeSelector entry or affinity term that misses.
    pub path: FieldPath,
    /// `nodeSelector node.accelerator=nvidia-gpu` or `required node affinity`.
    pub what: String,
    pub reach: Reach,
}

/// Combines `nodeSelector` and required node affinity of `pod_spec` (at `base`): `None` when
/// the pod reaches every node of the pool or it cannot be told, else the first constraint that
/// misses and how much of the pool it misses.
pub fn placement_miss(pod_spec: &Value, base: &FieldPath, labels: &PoolLabels) -> Option<Miss> {
    if let Some(Value::Object(selector)) = pod_spec.get("nodeSelector") {
        for (key, value) in selector {
            let value = value.as_str().map(str::to_owned).unwrap_or_default();
            let what = format!("nodeSelector {key}={value}");
            let reach = expression_reach(key, "In", &[value], labels);
            if matches!(reach, Reach::Never(_) | Reach::Partial(_)) {
                return Some(Miss {
                    path: base.key("nodeSelector").key(key),
                    what,
                    reach,
                });
            }
        }
    }
    let terms_path = base
        .key("affinity")
        .key("nodeAffinity")
        .key("requiredDuringSchedulingIgnoredDuringExecution")
        .key("nodeSelectorTerms");
    let terms = pod_spec
        .get("affinity")
        .and_then(|a| a.get("nodeAffinity"))
        .and_then(|a| a.get("requiredDuringSchedulingIgnoredDuringExecution"))
        .and_then(|a| a.get("nodeSelectorTerms"))
        .and_then(Value::as_array)?;
    let mut combined: Option<Reach> = None;
    let mut first_miss = None;
    for (i, term) in terms.iter().enumerate() {
        let reach = term_reach(term, labels);
        if first_miss.is_none() && matches!(reach, Reach::Never(_) | Reach::Partial(_)) {
            first_miss = Some(terms_path.index(i));
        }
        combined = Some(match combined {
            None => reach,
            Some(c) => c.or(reach),
        });
    }
    match (combined, first_miss) {
        (Some(reach @ (Reach::Never(_) | Reach::Partial(_))), Some(path)) => Some(Miss {
            path,
            what: "required node affinity".into(),
            reach,
        }),
        _ => None,
    }
}

fn term_reach(term: &Value, labels: &PoolLabels) -> Reach {
    // matchFields select by node name: nothing a pool decides.
    if term
        .get("matchFields")
        .is_some_and(|f| f.as_array().is_some_and(|a| !a.is_empty()))
    {
        return Reach::Unknown;
    }
    let mut reach = Reach::All;
    for expr in term
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
        let op = expr
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values: Vec<String> = expr
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        reach = reach.and(expression_reach(key, op, &values, labels));
    }
    reach
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerations_read_from_a_pod_spec() {
        let gpu = Taint {
            key: "gpu".into(),
            value: "true".into(),
            effect: Effect::NoSchedule,
        };
        let spec = json!({"tolerations": [
            {"key": "gpu", "operator": "Exists"},
            {"key": "x", "operator": "Near"},
            {"operator": "Exists", "effect": "Sometimes"},
        ]});
        let tols = tolerations(&spec);
        assert_eq!(tols.len(), 1, "malformed entries read as none");
        assert!(tolerated(&gpu, &tols));
        assert!(!tolerated(&gpu, &tolerations(&json!({}))));
        assert!(
            toleration(&json!({"operator": "Exists"}))
                .unwrap()
                .tolerates_everything()
        );
    }

    fn pool(yaml: &str) -> NodePool {
        let docs = kk_model::yaml::load_documents(yaml, Default::default()).unwrap();
        serde_json::from_value(docs[0].value.clone()).unwrap()
    }

    #[test]
    fn selectors_against_pool_labels() {
        let p = pool(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  template:\n    metadata:\n      labels: {node.accelerator: nvidia-gpu}\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: x}\n      requirements:\n      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g5, g6]}\n",
        );
        let labels = PoolLabels::of(&p, &BTreeMap::new());
        let reach = |k: &str, op: &str, v: &[&str]| {
            let values: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            expression_reach(k, op, &values, &labels)
        };
        assert_eq!(reach("node.accelerator", "In", &["nvidia-gpu"]), Reach::All);
        assert!(matches!(
            reach("node.accelerator", "In", &["x"]),
            Reach::Never(_)
        ));
        assert!(matches!(
            reach("karpenter.k8s.aws/instance-family", "In", &["g5"]),
            Reach::Partial(_)
        ));
        assert!(matches!(reach("gpu", "Exists", &[]), Reach::Never(_)));
        assert_eq!(
            reach("nvidia.com/gpu.present", "In", &["true"]),
            Reach::Unknown
        );
        assert_eq!(reach("karpenter.sh/nodepool", "In", &["gpu"]), Reach::All);
        let spec = json!({"nodeSelector": {"node.accelerator": "nvidia-gpu"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "other", "operator": "Exists"}]}]}}}});
        let miss = placement_miss(&spec, &FieldPath::parse("spec"), &labels).unwrap();
        assert_eq!(
            miss.path.to_string(),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        );
    }
}

//! Scheduling semantics shared by rules: taints and tolerations, the labels a NodePool's nodes
//! will carry, and whether a pod's nodeSelector / required node affinity reaches them.
//!
//! Label knowledge is three-valued on purpose: a label Karpenter or a node agent manages
//! (`topology.kubernetes.io/zone`, `nvidia.com/gpu.present`) is "unknown", and a rule must not
//! report on what it cannot know.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kk_model::FieldPath;
use kk_model::karpenter::NodePool;
use serde_json::Value;

/// A taint as the kubelet / Karpenter applies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaintSpec {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

impl TaintSpec {
    pub fn from_k8s(taint: &k8s_openapi::api::core::v1::Taint) -> Self {
        Self {
            key: taint.key.clone(),
            value: taint.value.clone().filter(|v| !v.is_empty()),
            effect: taint.effect.clone(),
        }
    }

    /// `NoSchedule` and `NoExecute` keep untolerating pods off; `PreferNoSchedule` does not.
    pub fn is_hard(&self) -> bool {
        matches!(self.effect.as_str(), "NoSchedule" | "NoExecute")
    }
}

impl fmt::Display for TaintSpec {
    /// `key=value:Effect`, as `kubectl taint` and `--register-with-taints` write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v}:{}", self.key, self.effect),
            None => write!(f, "{}:{}", self.key, self.effect),
        }
    }
}

/// One entry of a pod's `tolerations`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
}

impl Toleration {
    pub fn parse(value: &Value) -> Self {
        let text = |k: &str| {
            value
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Self {
            key: text("key"),
            operator: text("operator"),
            value: text("value"),
            effect: text("effect"),
        }
    }

    fn is_exists(&self) -> bool {
        self.operator.as_deref() == Some("Exists")
    }

    /// The apiserver's matching: empty effect matches every effect, empty key with `Exists`
    /// matches every key, `Equal` (the default) compares values.
    pub fn tolerates(&self, taint: &TaintSpec) -> bool {
        if self.effect.as_ref().is_some_and(|e| *e != taint.effect) {
            return false;
        }
        match &self.key {
            None => self.is_exists(),
            Some(key) if *key != taint.key => false,
            Some(_) => match self.operator.as_deref().unwrap_or("Equal") {
                "Exists" => true,
                "Equal" => self.value == taint.value,
                _ => false,
            },
        }
    }

    /// `- operator: Exists` with no key and no effect: tolerates every taint.
    pub fn tolerates_everything(&self) -> bool {
        self.key.is_none() && self.is_exists() && self.effect.is_none()
    }
}

/// The `tolerations` of a pod spec (missing or malformed entries read as none).
pub fn tolerations(pod_spec: &Value) -> Vec<Toleration> {
    pod_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(Toleration::parse).collect())
        .unwrap_or_default()
}

pub fn tolerated(tolerations: &[Toleration], taint: &TaintSpec) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
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
        let mut known: BTreeMap<String, LabelValues> = BTreeMap::new();
        for req in &pool.spec.template.spec.requirements {
            let values: BTreeSet<String> = req.values.iter().cloned().collect();
            let current = known.remove(&req.key);
            let next = match (req.operator.as_str(), current) {
                ("In", Some(LabelValues::OneOf(have))) => {
                    LabelValues::OneOf(have.intersection(&values).cloned().collect())
                }
                ("In", _) => LabelValues::OneOf(values),
                ("NotIn", Some(LabelValues::OneOf(have))) => {
                    LabelValues::OneOf(have.difference(&values).cloned().collect())
                }
                ("NotIn", _) => LabelValues::Unknown,
                ("Exists" | "Gt" | "Lt", Some(LabelValues::OneOf(have))) => {
                    LabelValues::OneOf(have)
                }
                ("Exists" | "Gt" | "Lt", _) => LabelValues::Any,
                ("DoesNotExist", _) => LabelValues::Absent,
                (_, current) => current.unwrap_or(LabelValues::Unknown),
            };
            known.insert(req.key.clone(), next);
        }
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
            "karpenter.sh/nodepool".into(),
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
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    if domain == "node-role.kubernetes.io" {
        return false;
    }
    [
        "kubernetes.io",
        "k8s.io",
        "karpenter.sh",
        "karpenter.k8s.aws",
        "k8s.aws",
        "nvidia.com",
        "amd.com",
        "eks.amazonaws.com",
    ]
    .iter()
    .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
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
    let wanted: BTreeSet<&str> = values.iter().map(String::as_str).collect();
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
    let number = |v: &str| v.parse::<i64>().ok();
    let bound = values.first().and_then(|v| number(v));
    match (op, have) {
        (_, LabelValues::Unknown) => Reach::Unknown,
        ("In", LabelValues::OneOf(set)) => split(&set, &|v| wanted.contains(v)),
        ("In", LabelValues::Absent) => Reach::Never(why()),
        ("NotIn", LabelValues::OneOf(set)) => split(&set, &|v| !wanted.contains(v)),
        ("NotIn" | "DoesNotExist", LabelValues::Absent) => Reach::All,
        ("Exists", LabelValues::OneOf(_) | LabelValues::Any) => Reach::All,
        ("Exists", LabelValues::Absent) => Reach::Never(why()),
        ("DoesNotExist", LabelValues::OneOf(_) | LabelValues::Any) => Reach::Never(why()),
        ("Gt" | "Lt", LabelValues::Absent) => Reach::Never(why()),
        ("Gt", LabelValues::OneOf(set)) if bound.is_some() => {
            split(&set, &|v| number(v).is_some_and(|n| Some(n) > bound))
        }
        ("Lt", LabelValues::OneOf(set)) if bound.is_some() => {
            split(&set, &|v| number(v).is_some_and(|n| Some(n) < bound))
        }
        _ => Reach::Unknown,
    }
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

    fn taint(key: &str, value: Option<&str>, effect: &str) -> TaintSpec {
        TaintSpec {
            key: key.into(),
            value: value.map(str::to_owned),
            effect: effect.into(),
        }
    }

    #[test]
    fn toleration_matching_follows_the_apiserver() {
        let gpu = taint("gpu", Some("true"), "NoSchedule");
        let t = |v| Toleration::parse(&v);
        assert!(t(json!({"key": "gpu", "value": "true", "effect": "NoSchedule"})).tolerates(&gpu));
        assert!(t(json!({"key": "gpu", "operator": "Exists"})).tolerates(&gpu));
        assert!(t(json!({"operator": "Exists"})).tolerates(&gpu));
        assert!(!t(json!({"operator": "Exists", "effect": "NoExecute"})).tolerates(&gpu));
        assert!(!t(json!({"key": "gpu", "value": "false"})).tolerates(&gpu));
        assert!(!t(json!({"key": "gpu"})).tolerates(&gpu));
        assert!(t(json!({"operator": "Exists"})).tolerates_everything());
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

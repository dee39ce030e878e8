//! The cross-object index every rule reads: node classes by name, node pools (typed, with GPU
//! evidence and node labels), workloads and their pod specs, device plugin DaemonSets, Helm
//! values, the Kubean inventory and group vars. Built once per run.

use std::collections::BTreeMap;

use kk_karpenter::labels::CAPACITY_TYPE;
use kk_karpenter::{Operator, Requirement};
use kk_model::karpenter::{EC2NodeClass, NodePool, NodeSelectorRequirement};
use kk_model::{FieldPath, Pos};
use serde_json::Value;

use crate::diagnostic::{Diagnostic, RuleMeta};
use crate::gpu::{GpuEvidence, gpu_evidence};
use crate::input::{BlockMap, Class, Embedded, EmbeddedKind, Loaded, Object, Source};
use crate::sched::PoolLabels;
use crate::userdata;

/// An EC2NodeClass that deserialised into the typed model.
#[derive(Debug, Clone)]
pub struct NodeClassView<'a> {
    pub obj: &'a Object,
    pub class: EC2NodeClass,
}

impl NodeClassView<'_> {
    pub fn name(&self) -> &str {
        &self.obj.name
    }

    /// The AMI family, lower case (`al2023`, `custom`, `bottlerocket`…): `spec.amiFamily`, else
    /// the family of the first alias (Karpenter v1 takes the family from an alias term when
    /// `amiFamily` is left out). `None` when neither says.
    pub fn family(&self) -> Option<String> {
        if let Some(family) = self.class.spec.ami_family.as_deref() {
            return Some(family.to_ascii_lowercase());
        }
        self.class
            .spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .map(|a| a.split('@').next().unwrap_or(a).to_ascii_lowercase())
    }

    /// `spec.metadataOptions.httpTokens`, defaulted as Karpenter does (`required`).
    pub fn http_tokens(&self) -> &str {
        self.class
            .spec
            .metadata_options
            .as_ref()
            .and_then(|m| m.http_tokens.as_deref())
            .unwrap_or("required")
    }
}

/// Whether every `karpenter.sh/capacity-type` requirement admits `capacity`; with none, only
/// on-demand is allowed (Karpenter's default).
pub fn capacity_allowed(reqs: &[NodeSelectorRequirement], capacity: &str) -> bool {
    let mut seen = false;
    for req in reqs.iter().filter(|r| r.key == CAPACITY_TYPE) {
        seen = true;
        // A malformed requirement is KK000's finding, not the caller's.
        let ok = Operator::parse(&req.operator)
            .ok()
            .and_then(|op| Requirement::new(op, &req.values).ok())
            .is_none_or(|r| r.has(capacity));
        if !ok {
            return false;
        }
    }
    if seen { true } else { capacity == "on-demand" }
}

/// A NodePool that deserialised into the typed model.
#[derive(Debug, Clone)]
pub struct NodePoolView<'a> {
    pub obj: &'a Object,
    pub pool: NodePool,
    /// Set when the pool launches GPU nodes.
    pub gpu: Option<GpuEvidence>,
    /// Labels its nodes carry (including `--node-labels` of its node class's userData).
    pub labels: PoolLabels,
}

impl NodePoolView<'_> {
    pub fn name(&self) -> &str {
        &self.obj.name
    }

    pub fn node_class_name(&self) -> &str {
        &self.pool.spec.template.spec.node_class_ref.name
    }

    /// Whether the pool may launch `capacity` (`spot`, `on-demand`, `reserved`).
    pub fn allows_capacity(&self, capacity: &str) -> bool {
        capacity_allowed(&self.pool.spec.template.spec.requirements, capacity)
    }
}

/// A Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or Pod and its pod spec.
#[derive(Debug, Clone)]
pub struct WorkloadView<'a> {
    pub obj: &'a Object,
    /// Where the pod spec is: `spec`, `spec.template.spec`, `spec.jobTemplate.spec.template.spec`.
    pub pod_spec_path: FieldPath,
    pub pod_spec: &'a Value,
}

impl WorkloadView<'_> {
    pub fn is_daemonset(&self) -> bool {
        self.obj.kind == "DaemonSet"
    }

    /// A DaemonSet running NVIDIA's `k8s-device-plugin` image.
    pub fn is_device_plugin(&self) -> bool {
        self.is_daemonset() && self.images().any(|i| i.contains("k8s-device-plugin"))
    }

    /// Images of its containers and init containers.
    pub fn images(&self) -> impl Iterator<Item = &str> {
        ["containers", "initContainers"]
            .into_iter()
            .filter_map(|k| self.pod_spec.get(k).and_then(Value::as_array))
            .flatten()
            .filter_map(|c| c.get("image").and_then(Value::as_str))
    }
}

/// A Kubean ConfigMap payload (`hosts.yml`, `group_vars.yml`).
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedView<'a> {
    pub obj: &'a Object,
    pub embedded: &'a Embedded,
}

/// Everything a rule sees.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub sources: &'a [Source],
    pub objects: &'a [Object],
    pub node_classes: Vec<NodeClassView<'a>>,
    pub node_pools: Vec<NodePoolView<'a>>,
    pub workloads: Vec<WorkloadView<'a>>,
    /// Karpenter Helm values documents.
    pub values: Vec<&'a Object>,
    /// NVIDIA GPU Operator Helm values documents.
    pub gpu_operator_values: Vec<&'a Object>,
    pub kubean_clusters: Vec<&'a Object>,
    pub cluster_operations: Vec<&'a Object>,
    /// `hosts.yml` documents.
    pub inventories: Vec<EmbeddedView<'a>>,
    /// `group_vars.yml` documents.
    pub group_vars: Vec<EmbeddedView<'a>>,
}

impl<'a> Context<'a> {
    pub fn new(loaded: &'a Loaded) -> Self {
        let objects = &loaded.objects;
        let of = |class: Class| objects.iter().filter(move |o| o.class == class);
        let node_classes: Vec<NodeClassView<'a>> = of(Class::EC2NodeClass)
            .filter_map(|obj| {
                let class = serde_json::from_value(obj.doc.value.clone()).ok()?;
                Some(NodeClassView { obj, class })
            })
            .collect();
        let node_pools = of(Class::NodePool)
            .filter_map(|obj| {
                let pool: NodePool = serde_json::from_value(obj.doc.value.clone()).ok()?;
                let class_name = &pool.spec.template.spec.node_class_ref.name;
                let kubelet_labels = node_classes
                    .iter()
                    .find(|c| c.name() == class_name)
                    .and_then(|c| c.class.spec.user_data.as_deref())
                    .map(userdata::node_labels)
                    .unwrap_or_default();
                Some(NodePoolView {
                    obj,
                    gpu: gpu_evidence(&pool),
                    labels: PoolLabels::of(&pool, &kubelet_labels),
                    pool,
                })
            })
            .collect();
        let workloads = of(Class::Workload)
            .filter_map(|obj| {
                let pod_spec_path = match obj.kind.as_str() {
                    "Pod" => FieldPath::parse("spec"),
                    "CronJob" => FieldPath::parse("spec.jobTemplate.spec.template.spec"),
                    _ => FieldPath::parse("spec.template.spec"),
                };
                let pod_spec = obj.value(&pod_spec_path).filter(|v| v.is_object())?;
                Some(WorkloadView {
                    obj,
                    pod_spec_path,
                    pod_spec,
                })
            })
            .collect();
        let embedded = |kind: EmbeddedKind| {
            of(Class::ConfigMap)
                .flat_map(move |obj| {
                    obj.embedded
                        .iter()
                        .filter(move |e| e.kind == kind)
                        .map(move |embedded| EmbeddedView { obj, embedded })
                })
                .collect()
        };
        Context {
            sources: &loaded.sources,
            objects,
            node_classes,
            node_pools,
            workloads,
            values: of(Class::KarpenterValues).collect(),
            gpu_operator_values: of(Class::GpuOperatorValues).collect(),
            kubean_clusters: of(Class::KubeanCluster).collect(),
            cluster_operations: of(Class::KubeanClusterOperation).collect(),
            inventories: embedded(EmbeddedKind::Hosts),
            group_vars: embedded(EmbeddedKind::GroupVars),
        }
    }

    /// Node classes by name (a name defined twice keeps the first).
    pub fn node_class(&self, name: &str) -> Option<&NodeClassView<'a>> {
        self.node_classes.iter().find(|c| c.name() == name)
    }

    pub fn node_class_names(&self) -> BTreeMap<&str, &NodeClassView<'a>> {
        let mut names = BTreeMap::new();
        for class in &self.node_classes {
            names.entry(class.name()).or_insert(class);
        }
        names
    }

    pub fn gpu_pools(&self) -> impl Iterator<Item = &NodePoolView<'a>> {
        self.node_pools.iter().filter(|p| p.gpu.is_some())
    }

    /// Pools whose `nodeClassRef` names `class`.
    pub fn pools_of_class(&self, class: &str) -> impl Iterator<Item = &NodePoolView<'a>> {
        self.node_pools
            .iter()
            .filter(move |p| p.node_class_name() == class)
    }

    pub fn device_plugins(&self) -> impl Iterator<Item = &WorkloadView<'a>> {
        self.workloads.iter().filter(|w| w.is_device_plugin())
    }

    pub fn source(&self, obj: &Object) -> &'a Source {
        &self.sources[obj.source]
    }

    /// A finding about `obj` at the value of `path` (or its nearest ancestor that exists).
    pub fn diag(
        &self,
        meta: &'static RuleMeta,
        obj: &Object,
        path: &FieldPath,
        message: impl Into<String>,
    ) -> Diagnostic {
        self.diag_at(meta, obj, obj.doc.pos(path), message)
    }

    /// A finding about `obj` at the key of `path` (for "this field should not be here").
    pub fn diag_key(
        &self,
        meta: &'static RuleMeta,
        obj: &Object,
        path: &FieldPath,
        message: impl Into<String>,
    ) -> Diagnostic {
        self.diag_at(meta, obj, obj.doc.key_pos(path), message)
    }

    pub fn diag_at(
        &self,
        meta: &'static RuleMeta,
        obj: &Object,
        pos: Pos,
        message: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic {
            code: meta.code,
            rule: meta.name,
            severity: meta.severity,
            object: obj.label(),
            file: self.source(obj).name.clone(),
            pos,
            message: message.into(),
            help: None,
            source_line: None,
            object_line: obj.first_line(),
        }
    }

    /// The file position of 1-based `line`:`col` inside the string at `path` (a userData
    /// script, an embedded file). Exact for literal block scalars (`|`), else the value's start.
    pub fn pos_in_string(&self, obj: &Object, path: &FieldPath, line: usize, col: usize) -> Pos {
        let origin = obj.doc.pos(path);
        match obj.value(path).and_then(Value::as_str) {
            Some(text) => BlockMap::find(self.source(obj), origin, text).pos(Pos { line, col }),
            None => origin,
        }
    }
}

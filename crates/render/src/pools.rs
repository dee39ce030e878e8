//! `nodeclasses/` and `nodepools/`: one EC2NodeClass per distinct node class, one NodePool per pool.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kk_model::karpenter::*;
use kk_spec::{Discovery, ElasticCluster, JoinMethod, Pool, PoolType, node_class_name};
use serde_json::Value;

use crate::names::{self, MANAGED_BY};
use crate::nodeadm;
use crate::userdata::{self, NodeBoot};
use crate::{Bundle, RenderError};
use kk_spec::ca::ClusterCa;

/// What later stages (verification workloads) need to know about a rendered pool.
pub struct RenderedPool {
    pub name: String,
    pub gpu: bool,
    pub taints: Vec<Taint>,
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into()),
        ..Default::default()
    }
}

fn selector_terms(d: &Discovery) -> Vec<SelectorTerm> {
    match &d.discovery_tag {
        Some(tag) => vec![SelectorTerm {
            tags: [(tag.key.clone(), tag.value.clone())].into(),
            ..Default::default()
        }],
        None => d
            .ids
            .iter()
            .map(|id| SelectorTerm {
                id: Some(id.clone()),
                ..Default::default()
            })
            .collect(),
    }
}

/// The AMI selector: an ID, a pinned alias, or the SSM parameter of one EKS AMI release.
fn ami_term(pool: &Pool) -> AmiSelectorTerm {
    let ami = &pool.ami;
    if let Some(release) = &ami.ssm_release {
        // 1.36.3-20260827 → /aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/nvidia/
        //   amazon-eks-node-al2023-x86_64-nvidia-1.36-v20260827/image_id (immutable: no drift).
        let arch = match pool.instances.arch.first().map(String::as_str) {
            Some("arm64") => "arm64",
            _ => "x86_64",
        };
        let variant = if pool.pool_type == PoolType::Gpu {
            "nvidia"
        } else {
            "standard"
        };
        return AmiSelectorTerm {
            ssm_parameter: Some(kk_karpenter::ami::al2023_release_parameter(
                release, arch, variant,
            )),
            ..Default::default()
        };
    }
    AmiSelectorTerm {
        id: ami.id.clone(),
        alias: ami.alias.clone(),
        ..Default::default()
    }
}

fn kubelet(pool: &Pool) -> Option<KubeletConfiguration> {
    let reserved = pool.kubelet.as_ref();
    Some(KubeletConfiguration {
        max_pods: Some(names::max_pods(pool)),
        kube_reserved: reserved
            .map(|k| k.kube_reserved.clone())
            .unwrap_or_default(),
        system_reserved: reserved
            .map(|k| k.system_reserved.clone())
            .unwrap_or_default(),
        ..Default::default()
    })
}

fn node_class(
    cluster: &ElasticCluster,
    ca: &ClusterCa,
    name: &str,
    pools: &[&Pool],
) -> Result<EC2NodeClass, RenderError> {
    let spec = &cluster.spec;
    let first = pools[0];
    let labels = names::pool_labels(first);
    let boot = NodeBoot {
        node_class: name,
        pools: pools.iter().map(|p| p.name.as_str()).collect(),
        spec,
        cluster_name: &cluster.metadata.name,
        ca,
        pool: first,
        labels: &labels,
        kubelet_flags: names::kubelet_flags(first),
    };
    let block_device_mappings = first
        .root_volume
        .as_ref()
        .map(|v| {
            vec![BlockDeviceMapping {
                device_name: Some(v.device_name.clone()),
                root_volume: Some(true),
                ebs: Some(BlockDevice {
                    volume_size: Some(v.size.clone()),
                    volume_type: Some(v.volume_type.clone()),
                    iops: v.iops,
                    throughput: v.throughput,
                    encrypted: Some(v.encrypted),
                    kms_key_id: v.kms_key_id.clone(),
                    delete_on_termination: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }]
        })
        .unwrap_or_default();
    let pool_names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let user_data = match first.join_method {
        JoinMethod::KubeadmToken => userdata::render(&boot),
        JoinMethod::Iam => nodeadm::render(cluster, ca, name, &pool_names, first)?,
    };
    Ok(EC2NodeClass {
        api_version: EC2_NODE_CLASS_API_VERSION.into(),
        kind: "EC2NodeClass".into(),
        metadata: meta(name),
        spec: EC2NodeClassSpec {
            // Custom: Karpenter passes our userData through untouched (no EKS nodeadm merge;
            // its AL2023 family would call eks:DescribeCluster, which fails off EKS).
            ami_family: Some("Custom".into()),
            ami_selector_terms: vec![ami_term(first)],
            subnet_selector_terms: selector_terms(&spec.aws.subnets),
            security_group_selector_terms: selector_terms(&spec.aws.security_groups),
            capacity_reservation_selector_terms: first
                .capacity_reservations
                .iter()
                .map(|t| CapacityReservationSelectorTerm {
                    id: t.id.clone(),
                    tags: t.tags.clone(),
                    owner_id: t.owner_id.clone(),
                    instance_match_criteria: t.instance_match_criteria.clone(),
                    ..Default::default()
                })
                .collect(),
            role: Some(spec.aws.node_role.clone()),
            kubelet: kubelet(first),
            block_device_mappings,
            // Explicit, though it is the default: the userData relies on IMDSv2 and a
            // hop limit of 1 keeps pods from reaching the node's credentials.
            metadata_options: Some(MetadataOptions {
                http_endpoint: Some("enabled".into()),
                http_protocol_ipv6: Some("disabled".into()),
                http_put_response_hop_limit: Some(1),
                http_tokens: Some("required".into()),
                ..Default::default()
            }),
            tags: [
                (
                    kk_spec::names::CLUSTER_LABEL.to_owned(),
                    cluster.metadata.name.clone(),
                ),
                ("kubean-karpenter.io/node-class".to_owned(), name.to_owned()),
            ]
            .into(),
            // Karpenter's userData ignores it with amiFamily Custom (ours builds the RAID0),
            // but it is what makes Karpenter count the instance store as the node's
            // ephemeral-storage (pkg/providers/instancetype/types.go, ephemeralStorage).
            instance_store_policy: first
                .local_storage
                .map(|kk_spec::LocalStorage::Raid0| "RAID0".to_owned()),
            user_data: Some(user_data),
            ..Default::default()
        },
        status: None,
        extra: Default::default(),
    })
}

fn requirement(key: &str, values: &[String]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: values.to_vec(),
        ..Default::default()
    }
}

/// The `capacity-reservation-type` requirement that keeps a pool's reserved offerings to one
/// kind of reservation. Karpenter labels spot and on-demand offerings with this key
/// `DoesNotExist` (aws/karpenter-provider-aws v1.14.3
/// pkg/providers/instancetype/offering/base_resolver.go), so `In [capacity-block]` would
/// drop them; `NotIn [default]` is compatible with an absent label (sigs.k8s.io/karpenter
/// pkg/scheduling/requirements.go `Intersects`: NotIn against DoesNotExist passes), so a
/// pool that also allows spot or on-demand keeps its fallback.
fn reservation_type(kind: &str, capacity_types: &[String]) -> NodeSelectorRequirement {
    if capacity_types.iter().all(|c| c == "reserved") {
        return requirement(kk_karpenter::labels::RESERVATION_TYPE, &[kind.to_owned()]);
    }
    let other = if kind == "capacity-block" {
        "default"
    } else {
        "capacity-block"
    };
    NodeSelectorRequirement {
        key: kk_karpenter::labels::RESERVATION_TYPE.into(),
        operator: "NotIn".into(),
        values: vec![other.into()],
        ..Default::default()
    }
}

fn node_pool(pool: &Pool, spec: &kk_spec::ClusterSpec) -> NodePool {
    let inst = &pool.instances;
    let mut requirements = vec![
        requirement("kubernetes.io/arch", &inst.arch),
        requirement("kubernetes.io/os", &["linux".to_owned()]),
        requirement("karpenter.sh/capacity-type", &inst.capacity_types),
    ];
    if !inst.families.is_empty() {
        requirements.push(requirement(
            "karpenter.k8s.aws/instance-family",
            &inst.families,
        ));
    }
    if !inst.sizes.is_empty() {
        requirements.push(requirement("karpenter.k8s.aws/instance-size", &inst.sizes));
    }
    if !inst.types.is_empty() {
        requirements.push(requirement("node.kubernetes.io/instance-type", &inst.types));
    }
    if let Some(min) = inst.min_values {
        // Flexibility goes on the widest instance requirement present.
        if let Some(req) = requirements.iter_mut().rev().find(|r| {
            r.key != "kubernetes.io/arch"
                && r.key != "kubernetes.io/os"
                && r.key != "karpenter.sh/capacity-type"
        }) {
            req.min_values = Some(min);
        }
    }
    if let Some(kind) = &inst.capacity_reservation_type {
        requirements.push(reservation_type(kind, &inst.capacity_types));
    }
    match &pool.gpu {
        Some(gpu) if pool.pool_type == PoolType::Gpu => {
            requirements.push(requirement(
                "karpenter.k8s.aws/instance-gpu-manufacturer",
                std::slice::from_ref(&gpu.manufacturer),
            ));
            if !gpu.names.is_empty() {
                requirements.push(requirement(
                    "karpenter.k8s.aws/instance-gpu-name",
                    &gpu.names,
                ));
            }
            if let Some(count) = gpu.count {
                requirements.push(requirement(
                    "karpenter.k8s.aws/instance-gpu-count",
                    &[count.to_string()],
                ));
            }
        }
        _ => {
            // CPU pools never take GPU instances, whatever the families say.
            requirements.push(NodeSelectorRequirement {
                key: "karpenter.k8s.aws/instance-gpu-count".into(),
                operator: "DoesNotExist".into(),
                ..Default::default()
            });
        }
    }
    let mut limits: BTreeMap<String, Value> = pool
        .limits
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.as_text())))
        .collect();
    let mut metadata = meta(&pool.name);
    if let Some(annotations) = budget_annotations(pool, spec) {
        // The budget controller owns this limit (its own field manager): apply never sends it,
        // so the two never fight over it; the spec's value is its ceiling.
        limits.remove(&pool.budget_resource());
        metadata.annotations = Some(annotations);
    }
    let disruption = pool.disruption.as_ref().map(|d| Disruption {
        consolidation_policy: d.consolidation_policy.clone(),
        // A static pool never consolidates: no consolidateAfter of ours on it.
        consolidate_after: match pool.replicas {
            Some(_) => d.consolidate_after.clone(),
            None => Some(d.consolidate_after.clone().unwrap_or_else(|| "0s".into())),
        },
        budgets: d
            .budgets
            .iter()
            .map(|b| Budget {
                nodes: b.nodes.clone(),
                reasons: b.reasons.clone(),
                schedule: b.schedule.clone(),
                duration: b.duration.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    NodePool {
        api_version: NODE_POOL_API_VERSION.into(),
        kind: "NodePool".into(),
        metadata,
        spec: NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: Some(TemplateMetadata {
                    labels: {
                        let mut labels = names::pool_labels(pool);
                        // Karpenter puts it on the Node; the GPU Operator's config manager
                        // reads it there (not a kubelet flag: pools of one node class differ).
                        labels.extend(crate::gpu_operator::config_label(spec, pool));
                        labels
                    },
                    ..Default::default()
                }),
                spec: NodeClaimSpec {
                    node_class_ref: NodeClassReference {
                        group: "karpenter.k8s.aws".into(),
                        kind: "EC2NodeClass".into(),
                        name: node_class_name(pool).to_owned(),
                        ..Default::default()
                    },
                    requirements,
                    taints: pool.taints.iter().map(core_taint).collect(),
                    expire_after: pool.expire_after.clone(),
                    termination_grace_period: pool.termination_grace_period.clone(),
                    ..Default::default()
                },
                ..Default::default()
            },
            disruption,
            limits,
            weight: pool.weight,
            replicas: pool.replicas,
            ..Default::default()
        },
        status: None,
        extra: Default::default(),
    }
}

/// A budgeted pool's budget as annotations on its NodePool (kk-model's `spend`), which plan,
/// top and the budget controller read; `None` for a pool no budget narrows.
fn budget_annotations(
    pool: &Pool,
    spec: &kk_spec::ClusterSpec,
) -> Option<BTreeMap<String, String>> {
    use kk_model::spend::annotation;
    let (_, resource) = spec
        .budgeted_pools()
        .find(|(budgeted, _)| budgeted.name == pool.name)?;
    let mut annotations = BTreeMap::new();
    if let Some(own) = &pool.budget {
        annotations.insert(annotation::PER_HOUR.to_owned(), own.per_hour.as_text());
    }
    if let Some(cluster) = &spec.budget {
        annotations.insert(
            annotation::CLUSTER_PER_HOUR.to_owned(),
            cluster.per_hour.as_text(),
        );
    }
    if let Some(warn) = pool
        .budget
        .as_ref()
        .and_then(|b| b.warn_at.clone())
        .or_else(|| spec.budget.as_ref().and_then(|b| b.warn_at.clone()))
    {
        annotations.insert(annotation::WARN_AT.to_owned(), warn);
    }
    if let Some(ceiling) = pool.limits.get(&resource) {
        annotations.insert(annotation::CEILING.to_owned(), ceiling.as_text());
    }
    annotations.insert(annotation::RESOURCE.to_owned(), resource);
    Some(annotations)
}

/// The NodePool render writes for `pool`: what the CLI prices a budget against.
pub fn node_pool_for(pool: &Pool, spec: &kk_spec::ClusterSpec) -> NodePool {
    node_pool(pool, spec)
}

pub fn core_taint(t: &kk_spec::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
        time_added: None,
    }
}

pub fn render(
    cluster: &ElasticCluster,
    ca: &ClusterCa,
    bundle: &mut Bundle,
) -> Result<Vec<RenderedPool>, RenderError> {
    let mut classes: BTreeMap<&str, Vec<&Pool>> = BTreeMap::new();
    for pool in &cluster.spec.pools {
        classes.entry(node_class_name(pool)).or_default().push(pool);
    }
    for (name, pools) in &classes {
        let class = node_class(cluster, ca, name, pools)?;
        bundle.add_yaml(&format!("nodeclasses/{name}.yaml"), &[to_value(&class)?])?;
    }
    let mut rendered = Vec::new();
    for pool in &cluster.spec.pools {
        bundle.add_yaml(
            &format!("nodepools/{}.yaml", pool.name),
            &[to_value(&node_pool(pool, &cluster.spec))?],
        )?;
        let overlays = gpu_sharing_overlays(cluster, pool);
        if !overlays.is_empty() {
            bundle.add_yaml(&format!("nodeoverlays/{}.yaml", pool.name), &overlays)?;
        }
        rendered.push(RenderedPool {
            name: pool.name.clone(),
            gpu: pool.pool_type == PoolType::Gpu,
            taints: pool.taints.iter().map(core_taint).collect(),
        });
    }
    Ok(rendered)
}

/// NVIDIA GPUs per EC2 instance that exist (g4dn.12xlarge 4, p4d 8, p2.16xlarge 16, ...): one
/// overlay per count when the pool does not pin `gpu.count`; a count no type of the pool has
/// selects nothing.
const GPUS_PER_INSTANCE: [i64; 5] = [1, 2, 4, 8, 16];

/// NodeOverlays (karpenter.sh/v1alpha1) telling Karpenter's scheduler what a time-sliced pool's
/// new node will advertise: `nvidia.com/gpu` = GPUs × replicas. Without one Karpenter assumes
/// the physical count and launches a node per pod (checked against its scheduler:
/// testbed/karpenter-oracle/overlay_test.go; the overlay's capacity replaces the type's, it
/// does not add to it). Only with the `nodeOverlay` gate, which the overlays need to take effect.
fn gpu_sharing_overlays(cluster: &ElasticCluster, pool: &Pool) -> Vec<Value> {
    let gate = cluster.spec.karpenter.feature_gates.get("nodeOverlay") == Some(&true);
    let Some(gpu) = pool
        .gpu
        .as_ref()
        .filter(|_| pool.pool_type == PoolType::Gpu)
    else {
        return Vec::new();
    };
    if !gate || gpu.sharing_replicas <= 1 || gpu.manufacturer != "nvidia" {
        return Vec::new();
    }
    let counts: Vec<i64> = match gpu.count {
        Some(count) => vec![count],
        None => GPUS_PER_INSTANCE.to_vec(),
    };
    counts
        .into_iter()
        .map(|count| {
            serde_json::json!({
                "apiVersion": "karpenter.sh/v1alpha1",
                "kind": "NodeOverlay",
                "metadata": {
                    "name": format!("{}-gpu-sharing-{count}", pool.name),
                    "labels": {MANAGED_BY.0: MANAGED_BY.1},
                },
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool.name]},
                        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": [count.to_string()]},
                    ],
                    "capacity": {"nvidia.com/gpu": (count * gpu.sharing_replicas).to_string()},
                },
            })
        })
        .collect()
}

pub fn to_value<T: serde::Serialize>(object: &T) -> Result<Value, RenderError> {
    serde_json::to_value(object).map_err(|e| RenderError::Serialize {
        path: "object".into(),
        message: e.to_string(),
    })
}

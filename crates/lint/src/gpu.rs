//! Which NodePools launch GPU nodes, and why we think so.

use kk_karpenter::labels::{
    INSTANCE_FAMILY, INSTANCE_GPU_COUNT, INSTANCE_GPU_MANUFACTURER, INSTANCE_GPU_MEMORY,
    INSTANCE_GPU_NAME, INSTANCE_TYPE,
};
use kk_model::FieldPath;
use kk_model::karpenter::NodePool;

/// EC2 instance families with GPUs (the catalog in shared/data/ec2 plus older and newer names).
/// `g4ad` is AMD; every other family here is NVIDIA.
pub const GPU_FAMILIES: &[&str] = &[
    "g3",
    "g3s",
    "g4ad",
    "g4dn",
    "g5",
    "g5g",
    "g6",
    "g6e",
    "g6f",
    "g7",
    "g7e",
    "gr6",
    "gr6f",
    "p2",
    "p3",
    "p3dn",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "p6-b200",
    "p6-b300",
    "p6e-gb200",
];

const AMD_FAMILIES: &[&str] = &["g4ad"];

/// Instance categories made only of GPU families.
const GPU_CATEGORIES: &[&str] = &["g", "gr", "p"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuVendor {
    Nvidia,
    Amd,
    Unknown,
}

/// Why a pool counts as a GPU pool, and where that is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuEvidence {
    /// `requirement karpenter.k8s.aws/instance-family In [g6]`.
    pub reason: String,
    pub path: FieldPath,
    pub vendor: GpuVendor,
}

/// `g5` of `g5.xlarge`.
pub fn family_of(instance_type: &str) -> &str {
    instance_type
        .split_once('.')
        .map(|(f, _)| f)
        .unwrap_or(instance_type)
}

pub fn is_gpu_family(family: &str) -> bool {
    GPU_FAMILIES.contains(&family)
}

/// A GPU pool: its requirements ask for GPU instance types (gpu count/name/manufacturer with
/// `In` or `Gt`, a GPU family, category or instance type), or it limits `nvidia.com/gpu`, or its
/// template labels carry `node.accelerator`.
pub fn gpu_evidence(pool: &NodePool) -> Option<GpuEvidence> {
    let vendor = vendor(pool);
    let base = FieldPath::parse("spec.template.spec.requirements");
    for (i, req) in pool.spec.template.spec.requirements.iter().enumerate() {
        let values = &req.values;
        let hit = match (req.key.as_str(), req.operator.as_str()) {
            (INSTANCE_GPU_COUNT, "In") => {
                values.iter().any(|v| v.parse::<i64>().is_ok_and(|n| n > 0))
            }
            (INSTANCE_GPU_COUNT, "Gt") => values
                .iter()
                .any(|v| v.parse::<i64>().is_ok_and(|n| n >= 0)),
            (INSTANCE_GPU_NAME | INSTANCE_GPU_MANUFACTURER | INSTANCE_GPU_MEMORY, "In" | "Gt") => {
                !values.is_empty()
            }
            (INSTANCE_FAMILY, "In") => values.iter().any(|v| is_gpu_family(v)),
            ("karpenter.k8s.aws/instance-category", "In") => {
                values.iter().any(|v| GPU_CATEGORIES.contains(&v.as_str()))
            }
            (INSTANCE_TYPE, "In") => values.iter().any(|v| is_gpu_family(family_of(v))),
            _ => false,
        };
        if hit {
            return Some(GpuEvidence {
                reason: format!(
                    "requirement {} {} [{}]",
                    req.key,
                    req.operator,
                    values.join(", ")
                ),
                path: base.index(i),
                vendor,
            });
        }
    }
    for key in ["nvidia.com/gpu", "amd.com/gpu"] {
        if pool.spec.limits.contains_key(key) {
            return Some(GpuEvidence {
                reason: format!("limit {key}"),
                path: FieldPath::root().key("spec").key("limits").key(key),
                vendor,
            });
        }
    }
    let labels = pool.spec.template.metadata.as_ref().map(|m| &m.labels);
    if let Some(value) = labels.and_then(|l| l.get("node.accelerator")) {
        return Some(GpuEvidence {
            reason: format!("label node.accelerator={value}"),
            path: FieldPath::parse("spec.template.metadata.labels").key("node.accelerator"),
            vendor,
        });
    }
    None
}

fn vendor(pool: &NodePool) -> GpuVendor {
    let mut seen = Vec::new();
    for req in &pool.spec.template.spec.requirements {
        if req.operator != "In" {
            continue;
        }
        match req.key.as_str() {
            INSTANCE_GPU_MANUFACTURER => {
                for v in &req.values {
                    seen.push(match v.as_str() {
                        "nvidia" => GpuVendor::Nvidia,
                        "amd" => GpuVendor::Amd,
                        _ => GpuVendor::Unknown,
                    });
                }
            }
            INSTANCE_FAMILY | INSTANCE_TYPE => {
                for v in &req.values {
                    let family = family_of(v);
                    if AMD_FAMILIES.contains(&family) {
                        seen.push(GpuVendor::Amd);
                    } else if is_gpu_family(family) {
                        seen.push(GpuVendor::Nvidia);
                    }
                }
            }
            _ => {}
        }
    }
    if pool.spec.limits.contains_key("nvidia.com/gpu") {
        seen.push(GpuVendor::Nvidia);
    }
    if pool.spec.limits.contains_key("amd.com/gpu") {
        seen.push(GpuVendor::Amd);
    }
    seen.sort();
    seen.dedup();
    match seen.as_slice() {
        [only] => *only,
        [] => {
            let label = pool
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.get("node.accelerator"));
            if label.is_some_and(|l| l.contains("nvidia")) {
                GpuVendor::Nvidia
            } else {
                GpuVendor::Unknown
            }
        }
        _ => GpuVendor::Unknown,
    }
}

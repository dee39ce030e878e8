//! Capacity, overhead and allocatable resources, with the formulas of Karpenter's AWS provider
//! (aws/karpenter-provider-aws `pkg/providers/instancetype/types.go`, v1.14.1: `memory`,
//! `pods`, `ENILimitedPods`, `kubeReservedResources`, `systemReservedResources`,
//! `evictionThreshold`, `ephemeralStorage`) and of core Karpenter's
//! `InstanceType.Allocatable()` (kubernetes-sigs/karpenter `pkg/cloudprovider/types.go`):
//!
//! ```text
//! cpu capacity        = vCPUs × 1000m
//! memory capacity     = M − ⌈M × vmMemoryOverheadPercent⌉ MiB, M = EC2 MiB (− 64 MiB on arm64:
//!                       Graviton's CMA reservation), overhead percent 0.075 by default
//! pods capacity       = maxPods if set, else ENIs × (IPv4 per ENI − 1) + 2 (default card,
//!                       less reservedENIs); then min(podsPerCore × vCPUs, ·) when podsPerCore > 0
//! ephemeral-storage   = 20Gi (root volume; or the EC2NodeClass's, or the NVMe total with RAID0)
//! kube-reserved       = cpu: 6 % of core 1 + 1 % of core 2 + 0.5 % of cores 3–4 + 0.25 % above
//!                       (each band truncated to whole millicores);
//!                       memory: 11 MiB × ENI-limited pods (reservedENIs = 0, *not* maxPods) + 255 MiB;
//!                       ephemeral-storage: 1Gi; spec.kubelet.kubeReserved replaces per resource
//! system-reserved     = spec.kubelet.systemReserved (nothing by default)
//! eviction threshold  = memory 100Mi, ephemeral-storage ⌈10 % of capacity⌉; evictionHard's
//!                       memory.available / nodefs.available replace them (quantity or % of capacity)
//! allocatable         = capacity − (kube-reserved + system-reserved + eviction), per resource
//!                       present in capacity (may go negative, as in Karpenter)
//! ```
//!
//! This is the `AL2023` / `Custom` / `AL2` behaviour (`DefaultFamily` feature flags:
//! ENI-limited pod density and ENI-limited memory overhead, podsPerCore honoured). Bottlerocket
//! and Windows differ and are not modelled; neither are EFA-only network interfaces of the
//! EC2NodeClass or CEL-expression kubelet values.

use std::collections::BTreeMap;

use kk_model::karpenter::KubeletConfiguration;
use kk_model::quantity::Quantity;

use crate::resources::{self as r, Resources, quantity_units};
use crate::types::{Arch, InstanceType};

/// Karpenter's `--vm-memory-overhead-percent` default.
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// Memory Graviton (arm64) instances reserve for CMA, MiB.
pub const ARM64_CMA_RESERVED_MIB: i64 = 64;
/// The default root volume (`amifamily.DefaultEBS`, 20Gi).
pub const DEFAULT_EPHEMERAL_STORAGE_BYTES: i64 = 20 << 30;
/// Pods when neither maxPods nor ENI limits are known (Karpenter's non-ENI default).
pub const DEFAULT_MAX_PODS: i64 = 110;

/// How an instance type's overhead is computed.
#[derive(Debug, Clone, PartialEq)]
pub enum OverheadModel {
    /// Karpenter's AWS provider formulas (this module).
    Aws,
    /// A fixed overhead regardless of kubelet settings (KWOK: 100m CPU, 10Mi memory).
    Fixed(Resources),
}

/// An eviction signal value: an absolute amount (bytes) or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Bytes(i64),
    Percent(f64),
}

/// The EC2NodeClass settings that change capacity or overhead: `spec.kubelet` (maxPods,
/// podsPerCore, kubeReserved, systemReserved, evictionHard), plus three that are not kubelet
/// fields: the root volume size (`spec.blockDeviceMappings`), `spec.instanceStorePolicy:
/// RAID0`, and the controller options `RESERVED_ENIS` and `VM_MEMORY_OVERHEAD_PERCENT`.
/// `Default` is Karpenter's default everywhere.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KubeletOverrides {
    pub max_pods: Option<i64>,
    pub pods_per_core: Option<i64>,
    /// Resource name → amount in [`Resources`] units (cpu millicores, memory bytes, ...).
    /// Each entry replaces Karpenter's computed default for that resource.
    pub kube_reserved: BTreeMap<String, i64>,
    pub system_reserved: BTreeMap<String, i64>,
    /// `evictionHard["memory.available"]`.
    pub eviction_hard_memory: Option<Threshold>,
    /// `evictionHard["nodefs.available"]`.
    pub eviction_hard_nodefs: Option<Threshold>,
    /// Root volume size from `blockDeviceMappings`; 20Gi when `None`.
    pub ephemeral_storage_bytes: Option<i64>,
    /// `instanceStorePolicy: RAID0`: ephemeral storage is the local NVMe total (GB) where the
    /// type has one.
    pub instance_store_raid0: bool,
    /// Karpenter's `RESERVED_ENIS` option (ENIs kept from pod density); 0 by default.
    pub reserved_enis: u32,
    /// Karpenter's `VM_MEMORY_OVERHEAD_PERCENT` option; 0.075 when `None`.
    pub vm_memory_overhead_percent: Option<f64>,
}

/// Why a kubelet setting cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.kubelet.{field}: {message}")]
pub struct OverrideError {
    pub field: String,
    pub message: String,
}

impl KubeletOverrides {
    /// Reads an EC2NodeClass `spec.kubelet`.
    pub fn from_kubelet(kubelet: &KubeletConfiguration) -> Result<Self, OverrideError> {
        let err = |field: String, message: String| OverrideError { field, message };
        for (field, v) in [
            ("maxPods", kubelet.max_pods),
            ("podsPerCore", kubelet.pods_per_core),
        ] {
            if v.is_some_and(|n| n < 0) {
                return Err(err(field.into(), "must not be negative".into()));
            }
        }
        let reserved = |field: &str, map: &BTreeMap<String, String>| {
            map.iter()
                .map(|(k, v)| {
                    let q = Quantity::parse(v)
                        .map_err(|e| err(format!("{field}.{k}"), e.to_string()))?;
                    if q.is_negative() {
                        return Err(err(format!("{field}.{k}"), "must not be negative".into()));
                    }
                    Ok((k.clone(), quantity_units(k, &q)))
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
        };
        let threshold = |key: &str| -> Result<Option<Threshold>, OverrideError> {
            let Some(v) = kubelet.eviction_hard.get(key) else {
                return Ok(None);
            };
            let field = || format!("evictionHard.{key}");
            if let Some(p) = v.strip_suffix('%') {
                let p: f64 = p
                    .parse()
                    .ok()
                    .filter(|p: &f64| (0.0..=100.0).contains(p))
                    .ok_or_else(|| err(field(), format!("{v:?} is not a percentage 0-100%")))?;
                return Ok(Some(Threshold::Percent(p)));
            }
            let q = Quantity::parse(v).map_err(|e| err(field(), e.to_string()))?;
            Ok(Some(Threshold::Bytes(quantity_units(r::MEMORY, &q))))
        };
        Ok(KubeletOverrides {
            max_pods: kubelet.max_pods,
            pods_per_core: kubelet.pods_per_core,
            kube_reserved: reserved("kubeReserved", &kubelet.kube_reserved)?,
            system_reserved: reserved("systemReserved", &kubelet.system_reserved)?,
            eviction_hard_memory: threshold("memory.available")?,
            eviction_hard_nodefs: threshold("nodefs.available")?,
            ..KubeletOverrides::default()
        })
    }
}

/// The three parts of Karpenter's `InstanceTypeOverhead`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overhead {
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    /// The sum of the three (`InstanceTypeOverhead.Total()`).
    pub fn total(&self) -> Resources {
        self.kube_reserved
            .plus(&self.system_reserved)
            .plus(&self.eviction_threshold)
    }
}

/// Memory capacity in MiB after Graviton's CMA reservation and the VM overhead:
/// `M − ⌈M × percent⌉`, computed in bytes then MiB as Karpenter's `memory()` does.
pub fn memory_capacity_mib(it: &InstanceType, vm_memory_overhead_percent: f64) -> i64 {
    let mut mib = it.memory_mib as i64;
    if it.arch == Arch::Arm64 {
        mib -= ARM64_CMA_RESERVED_MIB;
    }
    let bytes = (mib << 20) as f64;
    let overhead_mib = (bytes * vm_memory_overhead_percent / 1024.0 / 1024.0).ceil() as i64;
    mib - overhead_mib
}

/// The pod capacity: maxPods, else ENI-limited pods (110 without ENI data), capped by
/// podsPerCore × vCPUs.
pub fn max_pods(it: &InstanceType, overrides: &KubeletOverrides) -> i64 {
    let mut count = match overrides.max_pods {
        Some(n) => n,
        None => it
            .eni_limited_pods(overrides.reserved_enis)
            .unwrap_or(DEFAULT_MAX_PODS),
    };
    if let Some(per_core) = overrides.pods_per_core.filter(|&n| n > 0) {
        count = count.min(per_core.saturating_mul(i64::from(it.vcpu)));
    }
    count
}

/// Kube-reserved CPU in millicores for a CPU capacity in millicores (Bottlerocket's bands).
pub fn kube_reserved_cpu_milli(cpu_milli: i64) -> i64 {
    const BANDS: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, 1 << 31, 0.0025),
    ];
    BANDS
        .iter()
        .filter(|(start, _, _)| cpu_milli >= *start)
        .map(|&(start, end, pct)| {
            let span = (cpu_milli.min(end) - start) as f64;
            (span * pct) as i64
        })
        .sum()
}

/// Capacity with these settings.
pub fn capacity(it: &InstanceType, overrides: &KubeletOverrides) -> Resources {
    if let OverheadModel::Fixed(_) = it.overhead {
        return it.capacity.clone();
    }
    Resources {
        extended: it.capacity.extended.clone(),
        ..core_capacity(it, overrides)
    }
}

/// cpu, memory, ephemeral-storage and pods of the AWS model (no extended resources).
pub(crate) fn core_capacity(it: &InstanceType, overrides: &KubeletOverrides) -> Resources {
    let percent = overrides
        .vm_memory_overhead_percent
        .unwrap_or(DEFAULT_VM_MEMORY_OVERHEAD_PERCENT);
    let ephemeral = match it.local_nvme_gb {
        Some(gb) if overrides.instance_store_raid0 => (gb as i64).saturating_mul(1_000_000_000),
        _ => overrides
            .ephemeral_storage_bytes
            .unwrap_or(DEFAULT_EPHEMERAL_STORAGE_BYTES),
    };
    Resources {
        cpu_milli: i64::from(it.vcpu) * 1000,
        memory_bytes: memory_capacity_mib(it, percent) << 20,
        ephemeral_storage_bytes: ephemeral,
        pods: max_pods(it, overrides),
        extended: BTreeMap::new(),
    }
}

/// Kube-reserved, system-reserved and eviction threshold with these settings.
pub fn overhead(it: &InstanceType, overrides: &KubeletOverrides) -> Overhead {
    if let OverheadModel::Fixed(fixed) = &it.overhead {
        return Overhead {
            kube_reserved: fixed.clone(),
            ..Overhead::default()
        };
    }
    let cap = capacity(it, overrides);
    // AL2023/Custom (UsesENILimitedMemoryOverhead): memory overhead follows the ENI-limited
    // pod count with no reserved ENIs, whatever maxPods says.
    let memory_pods = it
        .eni_limited_pods(0)
        .unwrap_or_else(|| max_pods(it, overrides));
    let mut kube_reserved = Resources {
        cpu_milli: kube_reserved_cpu_milli(cap.cpu_milli),
        memory_bytes: (11 * memory_pods + 255) << 20,
        ephemeral_storage_bytes: 1 << 30,
        ..Resources::default()
    };
    for (k, v) in &overrides.kube_reserved {
        kube_reserved.set(k, *v);
    }
    let mut system_reserved = Resources::default();
    for (k, v) in &overrides.system_reserved {
        system_reserved.set(k, *v);
    }
    let signal = |capacity: i64, t: Threshold| match t {
        Threshold::Bytes(b) => b,
        // 100 % disables the threshold (kubelet semantics).
        Threshold::Percent(p) => {
            let p = if p == 100.0 { 0.0 } else { p };
            (capacity as f64 / 100.0 * p).ceil() as i64
        }
    };
    let eviction_threshold = Resources {
        memory_bytes: overrides
            .eviction_hard_memory
            .map_or(100 << 20, |t| signal(cap.memory_bytes, t)),
        ephemeral_storage_bytes: overrides.eviction_hard_nodefs.map_or_else(
            || (cap.ephemeral_storage_bytes as f64 / 100.0 * 10.0).ceil() as i64,
            |t| signal(cap.ephemeral_storage_bytes, t),
        ),
        ..Resources::default()
    };
    Overhead {
        kube_reserved,
        system_reserved,
        eviction_threshold,
    }
}

/// Allocatable resources: capacity − overhead, for each resource the capacity lists
/// (a reserved `pid` does not create a negative `pid`).
pub fn allocatable(it: &InstanceType, overrides: &KubeletOverrides) -> Resources {
    let mut alloc = capacity(it, overrides);
    let total = overhead(it, overrides).total();
    for (name, v) in total.iter() {
        let present = matches!(name, r::CPU | r::MEMORY | r::EPHEMERAL_STORAGE | r::PODS)
            || alloc.extended.contains_key(name);
        if present {
            alloc.set(name, alloc.get(name).saturating_sub(v));
        }
    }
    alloc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_bands() {
        assert_eq!(kube_reserved_cpu_milli(1000), 60);
        assert_eq!(kube_reserved_cpu_milli(2000), 70);
        assert_eq!(kube_reserved_cpu_milli(4000), 80);
        assert_eq!(kube_reserved_cpu_milli(8000), 90);
        assert_eq!(kube_reserved_cpu_milli(96000), 310);
        // Fractions of a millicore are dropped per band.
        assert_eq!(kube_reserved_cpu_milli(4100), 80);
    }
}

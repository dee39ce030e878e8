//! The instance-type model the scheduler consumes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::allocatable::{KubeletOverrides, OverheadModel, allocatable, capacity, core_capacity};
use crate::labels as l;
use crate::raw::{RawAws, RawKwok};
use crate::resources::{self as r, Resources};

/// Label key → value. `Cow` so the embedded catalog's labels borrow static data (no
/// allocation per label); look up with `&str` (`labels.get("kubernetes.io/arch")`,
/// `labels["kubernetes.io/arch"]`) and insert with `.into()` from `&'static str` or `String`.
pub type Labels = BTreeMap<Cow<'static, str>, Cow<'static, str>>;

/// CPU architecture, as the `kubernetes.io/arch` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not one of the values an enum of this crate takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownValue {
    #[error("unknown architecture {0:?} (expected amd64 or arm64)")]
    Arch(String),
    #[error("unknown capacity type {0:?} (expected spot, on-demand or reserved)")]
    CapacityType(String),
}

impl FromStr for Arch {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        match s {
            "amd64" => Ok(Arch::Amd64),
            "arm64" => Ok(Arch::Arm64),
            _ => Err(UnknownValue::Arch(s.to_owned())),
        }
    }
}

/// `karpenter.sh/capacity-type` values. The catalog prices `on-demand` and `spot` itself;
/// `reserved` offerings come from an account's capacity reservations
/// ([`crate::Catalog::add_reservation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapacityType {
    OnDemand,
    Spot,
    Reserved,
}

impl CapacityType {
    /// The capacity types with public prices, which the catalog builds offerings for.
    pub const ALL: [CapacityType; 2] = [CapacityType::OnDemand, CapacityType::Spot];

    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => "on-demand",
            CapacityType::Spot => "spot",
            CapacityType::Reserved => "reserved",
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CapacityType {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        match s {
            "on-demand" => Ok(CapacityType::OnDemand),
            "spot" => Ok(CapacityType::Spot),
            "reserved" => Ok(CapacityType::Reserved),
            _ => Err(UnknownValue::CapacityType(s.to_owned())),
        }
    }
}

/// Where and how an instance type can be bought: one zone × one capacity type.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    /// Shared between the offerings of all types (one allocation per zone).
    pub zone: Arc<str>,
    pub capacity_type: CapacityType,
    /// US dollars per hour.
    pub price: f64,
    /// False when the caller marked it unavailable (e.g. an insufficient-capacity error
    /// cached for a few minutes, as Karpenter does). The catalog itself creates all
    /// offerings available.
    pub available: bool,
    /// The capacity reservation of a `reserved` offering; `None` for the others.
    pub reservation: Option<Reservation>,
}

impl Offering {
    /// Whether a node can be launched into it now (Karpenter's `Launchable`): available and,
    /// for a reserved offering, with an instance left in its reservation.
    pub fn launchable(&self) -> bool {
        self.available && self.reservation.as_ref().is_none_or(|r| r.capacity > 0)
    }
}

/// An EC2 capacity reservation (On-Demand Capacity Reservation or capacity block for ML) as
/// Karpenter's AWS provider turns it into one `reserved` offering of its type and zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// `cr-…`, the `karpenter.k8s.aws/capacity-reservation-id` label.
    pub id: Arc<str>,
    /// `default` or `capacity-block`, the `karpenter.k8s.aws/capacity-reservation-type` label.
    pub kind: Arc<str>,
    /// The `karpenter.k8s.aws/capacity-reservation-interruptible` label.
    pub interruptible: bool,
    /// Instances still available in it (EC2's `AvailableInstanceCount`). A full reservation is
    /// still an available offering, only not launchable.
    pub capacity: u32,
}

/// The GPU model of a type (EC2 `GpuInfo` when it lists exactly one model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Lower kebab case, as the `instance-gpu-name` label (`l4`, `a10g`, `h100`).
    pub name: String,
    /// Lower kebab case (`nvidia`, `amd`).
    pub manufacturer: String,
    /// GPUs per instance. 0 on fractional-GPU types (g6f, gr6f), which get no
    /// `nvidia.com/gpu` resource either.
    pub count: u32,
    /// Memory per GPU, MiB.
    pub memory_mib: u32,
}

/// A non-GPU accelerator (Inferentia, Trainium, Qualcomm AI 100).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accelerator {
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
}

/// ENI limits (aws/karpenter-provider-aws `zz_generated.vpclimits.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EniLimits {
    /// ENIs over all network cards.
    pub max_enis: u32,
    /// ENIs on the default network card: the VPC CNI's pod density uses only these.
    pub default_card_max_enis: u32,
    pub ipv4_per_eni: u32,
    /// Branch ENIs (security groups for pods), `vpc.amazonaws.com/pod-eni` when trunking works.
    pub branch_enis: u32,
    pub trunking_compatible: bool,
    pub network_cards: u32,
}

/// The allocatable resources Karpenter's documentation lists for a type (the shared table's
/// `alloc_*` columns: AL2023, no block device mappings, ENI-limited pods). Kept for comparison;
/// the catalog computes its own with [`crate::allocatable()`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DocumentedAllocatable {
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub ephemeral_storage_gib: f64,
    pub pods: i64,
    /// `vpc.amazonaws.com/pod-eni` as documented; `None` where the documentation lists none
    /// (56 newer types whose ENI limits arrived after the page was generated).
    pub pod_eni: Option<i64>,
    /// The table's own `eni_limited_pods` column (its check of the ENI formula).
    pub eni_limited_pods: Option<i64>,
}

/// One instance type: what the scheduler matches requirements against (`labels`), packs pods
/// into ([`InstanceType::allocatable`]) and pays for (`offerings`).
///
/// Every field is public so tests can build or tweak types; [`crate::allocatable()`] reads only
/// `vcpu`, `memory_mib`, `arch`, `eni`, `documented`, `local_nvme_gb`, `overhead` and the
/// device counts in `capacity.extended`.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    pub family: String,
    pub size: String,
    /// Letters before the generation (`m` for `m6i`, `inf` for `inf2`).
    pub category: String,
    /// `None` for synthetic (KWOK) types.
    pub generation: Option<u32>,
    pub arch: Arch,
    pub os: String,
    pub vcpu: u32,
    /// Memory EC2 reports, MiB (before any overhead).
    pub memory_mib: u64,
    pub cpu_manufacturer: Option<String>,
    pub gpu: Option<Gpu>,
    pub accelerator: Option<Accelerator>,
    /// `nitro` or `xen`; `None` on bare metal.
    pub hypervisor: Option<String>,
    pub bare_metal: bool,
    /// Local NVMe instance storage, GB.
    pub local_nvme_gb: Option<u64>,
    pub network_bandwidth_mbps: Option<u64>,
    /// `None` for the 8 types the ENI-limit table lacks (hpc*, trn2.48xlarge) and KWOK types.
    pub eni: Option<EniLimits>,
    /// On-demand Linux price, US dollars per hour (us-east-1 for the EC2 catalog).
    pub on_demand_price: Option<f64>,
    /// Spot price from the data itself (the KWOK types have one); `None` for EC2 types, whose
    /// spot price is modelled (see [`crate::OfferingConfig`]).
    pub spot_price: Option<f64>,
    /// Karpenter's single-valued well-known labels for the type (zone, region and capacity
    /// type come from the offering instead).
    pub labels: Labels,
    /// Capacity with default kubelet settings; its `extended` entries are the device counts
    /// (`nvidia.com/gpu`, `vpc.amazonaws.com/efa`, ...).
    pub capacity: Resources,
    pub overhead: OverheadModel,
    pub documented: Option<DocumentedAllocatable>,
    /// By zone (in the configured order), then on-demand before spot.
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(|v| v.as_ref())
    }

    /// Capacity with these kubelet settings (pods may change; the rest does not).
    pub fn capacity_with(&self, overrides: &KubeletOverrides) -> Resources {
        capacity(self, overrides)
    }

    /// Allocatable resources (capacity − kube-reserved − system-reserved − eviction threshold).
    pub fn allocatable(&self, overrides: &KubeletOverrides) -> Resources {
        allocatable(self, overrides)
    }

    /// Pods the VPC CNI can address: `ENIs × (IPv4 per ENI − 1) + 2` on the default network
    /// card, less `reserved_enis`; 0 when no ENI is left. Types without ENI data fall back to
    /// the documented pod count; `None` when there is neither.
    pub fn eni_limited_pods(&self, reserved_enis: u32) -> Option<i64> {
        match (&self.eni, &self.documented) {
            (Some(eni), _) => {
                let usable = i64::from(eni.default_card_max_enis) - i64::from(reserved_enis);
                Some(if usable <= 0 {
                    0
                } else {
                    usable * (i64::from(eni.ipv4_per_eni) - 1) + 2
                })
            }
            (None, Some(doc)) => Some(doc.pods),
            (None, None) => None,
        }
    }

    /// The cheapest available offering, optionally of one capacity type.
    pub fn cheapest(&self, capacity_type: Option<CapacityType>) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && capacity_type.is_none_or(|c| o.capacity_type == c))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }

    /// The offering for a zone and capacity type, available or not.
    pub fn offering(&self, zone: &str, capacity_type: CapacityType) -> Option<&Offering> {
        self.offerings
            .iter()
            .find(|o| &*o.zone == zone && o.capacity_type == capacity_type)
    }

    pub(crate) fn from_aws(raw: &RawAws) -> InstanceType {
        let gpu = raw.gpu.as_ref().map(|g| Gpu {
            name: g.name.to_owned(),
            manufacturer: g.manufacturer.to_owned(),
            count: g.count,
            memory_mib: g.memory_mib,
        });
        let accelerator = raw.accelerator.as_ref().map(|a| Accelerator {
            name: a.name.to_owned(),
            manufacturer: a.manufacturer.to_owned(),
            count: a.count,
        });
        let eni = raw.eni.as_ref().map(|e| EniLimits {
            max_enis: e.max_enis,
            default_card_max_enis: e.default_card_max_enis,
            ipv4_per_eni: e.ipv4_per_eni,
            branch_enis: e.branch_enis,
            trunking_compatible: e.trunking_compatible,
            network_cards: e.network_cards,
        });
        let arch = if raw.arm64 { Arch::Arm64 } else { Arch::Amd64 };

        // Device resources as computeCapacity() lists them; pod-eni from the ENI limits.
        let pod_eni = eni
            .filter(|e| e.trunking_compatible)
            .map_or(0, |e| e.branch_enis);
        let mut devices = Resources::default();
        for (name, n) in [
            (r::NVIDIA_GPU, raw.nvidia_gpu),
            (r::AMD_GPU, raw.amd_gpu),
            (r::HABANA_GAUDI, raw.habana_gaudi),
            (r::AWS_NEURON, raw.aws_neuron),
            (r::AWS_NEURON_CORE, raw.aws_neuroncore),
            (r::EFA, raw.efa),
            (r::POD_ENI, pod_eni),
        ] {
            devices.set(name, i64::from(n));
        }

        let labels: Labels = raw
            .labels
            .iter()
            .map(|&(k, v)| (Cow::Borrowed(k), Cow::Borrowed(v)))
            .collect();

        let mut it = InstanceType {
            name: raw.name.to_owned(),
            family: raw.family.to_owned(),
            size: raw.size.to_owned(),
            category: raw.category.to_owned(),
            generation: raw.generation.parse().ok(),
            arch,
            os: raw.os.to_owned(),
            vcpu: raw.vcpu,
            memory_mib: raw.memory_mib,
            cpu_manufacturer: (!raw.cpu_manufacturer.is_empty())
                .then(|| raw.cpu_manufacturer.to_owned()),
            gpu,
            accelerator,
            hypervisor: (!raw.hypervisor.is_empty()).then(|| raw.hypervisor.to_owned()),
            bare_metal: raw
                .eni
                .as_ref()
                .map_or(raw.hypervisor.is_empty(), |e| e.bare_metal),
            local_nvme_gb: raw.local_nvme_gb,
            network_bandwidth_mbps: raw.network_bandwidth_mbps,
            eni,
            on_demand_price: raw.od_price,
            spot_price: None,
            labels,
            capacity: devices,
            overhead: OverheadModel::Aws,
            documented: Some(DocumentedAllocatable {
                cpu_milli: i64::from(raw.alloc_cpu_m),
                memory_mib: raw.alloc_memory_mib as i64,
                ephemeral_storage_gib: raw.alloc_ephemeral_storage_gib,
                pods: i64::from(raw.alloc_pods),
                pod_eni: raw.pod_eni.map(|n| n as i64),
                eni_limited_pods: raw.eni.as_ref().map(|e| i64::from(e.eni_limited_pods)),
            }),
            offerings: Vec::new(),
        };
        let extended = std::mem::take(&mut it.capacity.extended);
        it.capacity = Resources {
            extended,
            ..core_capacity(&it, &KubeletOverrides::default())
        };
        it
    }

    pub(crate) fn from_kwok(raw: &RawKwok) -> InstanceType {
        let arch = if raw.arm64 { Arch::Arm64 } else { Arch::Amd64 };
        // KWOK's parseFamilyFromType: the name up to the first '.' or '-'.
        let family: &'static str = raw.name.split(['.', '-']).next().unwrap_or(raw.name);
        let labels: Labels = [
            (l::ARCH, arch.as_str()),
            (l::INSTANCE_TYPE, raw.name),
            // Synthetic names match no AWS size pattern, so KWOK uses the CPU count as size.
            (l::KWOK_INSTANCE_CPU, raw.cpu_label),
            (l::KWOK_INSTANCE_FAMILY, family),
            (l::KWOK_INSTANCE_MEMORY, raw.memory_label),
            (l::KWOK_INSTANCE_SIZE, raw.cpu_label),
            (l::OS, raw.os),
        ]
        .into_iter()
        .map(|(k, v)| (Cow::Borrowed(k), Cow::Borrowed(v)))
        .collect();
        let capacity = Resources {
            cpu_milli: i64::from(raw.vcpu) * 1000,
            memory_bytes: (raw.memory_mib as i64) << 20,
            ephemeral_storage_bytes: raw.ephemeral_storage_bytes as i64,
            pods: raw.pods as i64,
            extended: BTreeMap::new(),
        };
        InstanceType {
            name: raw.name.to_owned(),
            category: family.to_owned(),
            family: family.to_owned(),
            size: raw.cpu_label.to_owned(),
            generation: None,
            arch,
            os: raw.os.to_owned(),
            vcpu: raw.vcpu,
            memory_mib: raw.memory_mib,
            cpu_manufacturer: None,
            gpu: None,
            accelerator: None,
            hypervisor: None,
            bare_metal: false,
            local_nvme_gb: None,
            network_bandwidth_mbps: None,
            eni: None,
            on_demand_price: Some(raw.od_price),
            spot_price: Some(raw.spot_price),
            labels,
            capacity,
            // kwok/cloudprovider/helpers.go: kube-reserved 100m CPU and 10Mi memory, nothing else.
            overhead: OverheadModel::Fixed(Resources {
                cpu_milli: 100,
                memory_bytes: 10 << 20,
                ..Resources::default()
            }),
            documented: None,
            offerings: Vec::new(),
        }
    }
}

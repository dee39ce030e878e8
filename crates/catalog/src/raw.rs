//! The records `build.rs` generates from the shared data, as static Rust values.
//! Field meanings follow the columns of `data/ec2/ec2_instance_types_karpenter.json`.

use crate::labels as l;

pub(crate) struct RawGpu {
    pub name: &'static str,
    pub manufacturer: &'static str,
    pub count: u32,
    pub memory_mib: u32,
}

pub(crate) struct RawAccelerator {
    pub name: &'static str,
    pub manufacturer: &'static str,
    pub count: u32,
}

pub(crate) struct RawEni {
    pub max_enis: u32,
    pub default_card_max_enis: u32,
    pub ipv4_per_eni: u32,
    pub branch_enis: u32,
    pub trunking_compatible: bool,
    pub network_cards: u32,
    pub bare_metal: bool,
    pub eni_limited_pods: u32,
}

pub(crate) struct RawAws {
    pub name: &'static str,
    pub family: &'static str,
    pub category: &'static str,
    pub generation: &'static str,
    pub size: &'static str,
    pub arm64: bool,
    pub os: &'static str,
    pub vcpu: u32,
    pub memory_mib: u64,
    /// Empty when the data has none.
    pub cpu_manufacturer: &'static str,
    /// Empty for bare-metal types (EC2 reports no hypervisor).
    pub hypervisor: &'static str,
    pub network_bandwidth_mbps: Option<u64>,
    pub local_nvme_gb: Option<u64>,
    pub gpu: Option<RawGpu>,
    pub accelerator: Option<RawAccelerator>,
    pub alloc_cpu_m: u32,
    pub alloc_memory_mib: u64,
    pub alloc_ephemeral_storage_gib: f64,
    pub alloc_pods: u32,
    pub nvidia_gpu: u32,
    pub amd_gpu: u32,
    pub aws_neuron: u32,
    pub aws_neuroncore: u32,
    pub habana_gaudi: u32,
    pub efa: u32,
    /// `vpc.amazonaws.com/pod-eni` as the documentation table lists it (absent where that
    /// table predates the ENI limits; see `docs/reference/catalog.md`).
    pub pod_eni: Option<u64>,
    pub od_price: Option<f64>,
    pub eni: Option<RawEni>,
    /// Karpenter's single-valued labels, sorted by key (computed by `build.rs`).
    pub labels: &'static [(&'static str, &'static str)],
}

pub(crate) struct RawKwok {
    pub name: &'static str,
    pub arm64: bool,
    pub os: &'static str,
    pub vcpu: u32,
    pub cpu_label: &'static str,
    pub memory_mib: u64,
    /// The memory quantity as written in the data (KWOK's `instance-memory` label value).
    pub memory_label: &'static str,
    pub pods: u64,
    pub ephemeral_storage_bytes: u64,
    pub od_price: f64,
    pub spot_price: f64,
}

include!(concat!(env!("OUT_DIR"), "/catalog_data.rs"));

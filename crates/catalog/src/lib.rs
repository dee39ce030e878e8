//! The EC2 instance-type catalog Karpenter schedules against, as pure data: labels, offerings
//! with prices, capacity and allocatable resources.
//!
//! Owns the EC2 instance-type data, offerings, prices and Karpenter's allocatable formulas.
//! Must not read data at run time, make scheduling decisions (sim) or keep its own list of
//! label keys (it re-exports `kk-karpenter`'s).
//!
//! # Data
//!
//! The build step (`build.rs`) reads `$KK_SHARED_DIR/data/ec2/` (default `../shared` beside the
//! workspace) and embeds it as generated static Rust records; nothing is read at run time. See
//! `data/ec2/SOURCE.txt` there for provenance (Apache-2.0):
//!
//! - `ec2_instance_types_karpenter.json`: 1,363 EC2 types joined from aws/karpenter-provider-aws
//!   at commit 1d927085 (just after v1.14.1): `website/content/en/docs/reference/instance-types.md`
//!   (labels and allocatable, AL2023, us-east-1/us-east-2/us-west-2), `zz_generated.pricing_aws.go`
//!   (static us-east-1 on-demand Linux prices; 1,345 types have one) and
//!   `zz_generated.vpclimits.go` (ENI limits; 1,355 types). No spot prices.
//! - `kwok_synthetic_instance_types.json`: the 144 synthetic types of Karpenter's KWOK provider,
//!   with 4 zones and spot prices (0.7 × on-demand). Served by [`kwok_catalog`].
//!
//! # Model
//!
//! [`catalog()`] is loaded once (a `LazyLock`) and ordered by name. Each [`InstanceType`] carries
//! Karpenter's well-known labels, its capacity with default kubelet settings, the allocatable
//! resources the documentation lists (for comparison) and [`Offering`]s: zones (default
//! us-east-1a/b/c) × capacity types (on-demand, spot). Spot prices are modelled as 0.4 ×
//! on-demand unless the caller gives a fraction or a price file ([`OfferingConfig`]).
//! Labels are [`Labels`] (`Cow<'static, str>` keys and values borrowing the embedded strings)
//! and offering zones `Arc<str>`, so that loading allocates little: a fresh build of all types
//! takes about 3 ms (`cargo bench -p kk-catalog --bench load`).
//!
//! Not in the data, so not in the labels: `karpenter.k8s.aws/nitro-sandbox` (Nitro Enclaves) and
//! the multi-valued `instance-tenancy`; zone, region and capacity type belong to offerings.
//! See `docs/reference/catalog.md` for the data's surprises (Graviton memory, fractional GPUs, pods of
//! multi-card types).
//!
//! [`allocatable()`] implements Karpenter's AWS overhead formulas (aws/karpenter-provider-aws
//! `pkg/providers/instancetype/types.go`) with EC2NodeClass kubelet overrides
//! ([`KubeletOverrides`]); see the [`mod@allocatable`] module for the formulas. With default
//! settings it reproduces the documented allocatable CPU, memory and pods of all 1,355 types
//! that have ENI data, exactly (`tests/it/allocatable.rs`).
//!
//! ```
//! use kk_catalog::{KubeletOverrides, catalog};
//!
//! let g6 = catalog().get("g6.xlarge").unwrap();
//! assert_eq!(g6.label("karpenter.k8s.aws/instance-gpu-name"), Some("l4"));
//! let alloc = g6.allocatable(&KubeletOverrides::default());
//! assert_eq!(alloc.cpu_milli, 3920);
//! assert_eq!(alloc.get("nvidia.com/gpu"), 1);
//! let spot = g6.cheapest(Some(kk_catalog::CapacityType::Spot)).unwrap();
//! assert!((spot.price - 0.8048 * 0.4).abs() < 1e-9);
//! ```

pub mod allocatable;
pub mod labels;
pub mod offerings;
mod raw;
pub mod resources;
mod types;

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

pub use allocatable::{
    KubeletOverrides, Overhead, OverheadModel, OverrideError, Threshold, allocatable, capacity,
    overhead,
};
pub use offerings::{
    DEFAULT_AWS_ZONES, DEFAULT_SPOT_FRACTION, OfferingConfig, PriceError, PriceTable,
};
pub use resources::Resources;
pub use types::{
    Accelerator, Arch, CapacityType, DocumentedAllocatable, EniLimits, Gpu, InstanceType, Labels,
    Offering, Reservation, UnknownValue,
};

/// Karpenter's AWS provider prices a reserved offering at on-demand ÷ 10⁷: the instances are
/// paid for already, and the tiny price keeps the types' relative order for consolidation.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// Where the EC2 data came from (the `source` field of the shared JSON).
pub const DATA_SOURCE: &str = raw::AWS_SOURCE;
/// When Karpenter's static on-demand price table was generated.
pub const PRICING_GENERATED_AT: &str = raw::AWS_PRICING_GENERATED_AT;
/// Which prices these are (`us-east-1 (on-demand, Linux)`).
pub const PRICING_REGION: &str = raw::AWS_PRICING_REGION;
/// The settings the documented allocatable values assume.
pub const DOCUMENTED_ALLOCATABLE_ASSUMPTIONS: &str = raw::AWS_ALLOCATABLE_ASSUMPTIONS;

/// Which data a catalog holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// The 1,363 EC2 types.
    Aws,
    /// Karpenter's 144 synthetic KWOK types.
    Kwok,
}

/// A set of instance types, ordered by name, with offerings built from one [`OfferingConfig`].
#[derive(Debug, Clone)]
pub struct Catalog {
    provider: Provider,
    /// Shared until changed (a reservation taken): `plan` and every fuzz input clone the
    /// catalog they read against, 1,363 types with their offerings (~8 ms a copy).
    types: Arc<Vec<InstanceType>>,
    zones: Vec<String>,
    capacity_types: Vec<CapacityType>,
    config: OfferingConfig,
}

static AWS_DEFAULT: LazyLock<Catalog> = LazyLock::new(|| {
    Catalog::aws(&OfferingConfig::default()).expect("the default offering config is valid")
});
static KWOK_DEFAULT: LazyLock<Catalog> = LazyLock::new(|| {
    Catalog::kwok(&OfferingConfig::default()).expect("the default offering config is valid")
});

/// The EC2 catalog with default offerings (us-east-1a/b/c, on-demand + spot at 0.4 ×
/// on-demand), built on first use.
pub fn catalog() -> &'static Catalog {
    &AWS_DEFAULT
}

/// The KWOK catalog with its own offerings (test-zone-a..d, its spot prices).
pub fn kwok_catalog() -> &'static Catalog {
    &KWOK_DEFAULT
}

impl Catalog {
    /// Builds the EC2 catalog afresh with these offerings.
    pub fn aws(config: &OfferingConfig) -> Result<Catalog, PriceError> {
        let types = raw::AWS.iter().map(InstanceType::from_aws).collect();
        Catalog::assemble(Provider::Aws, types, config)
    }

    /// Builds the KWOK catalog afresh with these offerings.
    pub fn kwok(config: &OfferingConfig) -> Result<Catalog, PriceError> {
        let types = raw::KWOK.iter().map(InstanceType::from_kwok).collect();
        Catalog::assemble(Provider::Kwok, types, config)
    }

    /// The same types with offerings rebuilt from `config`.
    pub fn with_offerings(&self, config: &OfferingConfig) -> Result<Catalog, PriceError> {
        Catalog::assemble(self.provider, self.types.to_vec(), config)
    }

    /// A catalog of caller-built types (e.g. for scheduler tests), sorted by name; later
    /// duplicates of a name are dropped. Offerings come from `config` (default zones: AWS's).
    pub fn from_types(
        types: Vec<InstanceType>,
        config: &OfferingConfig,
    ) -> Result<Catalog, PriceError> {
        Catalog::assemble(Provider::Aws, types, config)
    }

    fn assemble(
        provider: Provider,
        mut types: Vec<InstanceType>,
        config: &OfferingConfig,
    ) -> Result<Catalog, PriceError> {
        types.sort_by(|a, b| a.name.cmp(&b.name));
        types.dedup_by(|b, a| a.name == b.name);
        let default_zones: &[&str] = match provider {
            Provider::Aws => &DEFAULT_AWS_ZONES,
            Provider::Kwok => raw::KWOK_ZONES,
        };
        let has_type = |name: &str| {
            types
                .binary_search_by(|t| t.name.as_str().cmp(name))
                .is_ok()
        };
        let (zones, capacity_types) = offerings::resolve(config, default_zones, has_type)?;
        let shared: Vec<Arc<str>> = zones.iter().map(|z| Arc::from(z.as_str())).collect();
        for it in &mut types {
            it.offerings = offerings::offerings_for(it, config, &shared, &capacity_types);
        }
        Ok(Catalog {
            provider,
            types: Arc::new(types),
            zones,
            capacity_types,
            config: config.clone(),
        })
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// All types, ordered by name.
    pub fn types(&self) -> &[InstanceType] {
        &self.types
    }

    pub fn iter(&self) -> std::slice::Iter<'_, InstanceType> {
        self.types.iter()
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The type called `name` (`m6i.large`).
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.types
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.types[i])
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut InstanceType> {
        self.types
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &mut Arc::make_mut(&mut self.types)[i])
    }

    /// The types `filter` accepts, by name.
    pub fn filter<'a>(&'a self, filter: &'a Filter) -> impl Iterator<Item = &'a InstanceType> {
        self.types.iter().filter(move |t| filter.matches(t))
    }

    /// The zones offerings were built for, in order.
    pub fn zones(&self) -> &[String] {
        &self.zones
    }

    pub fn capacity_types(&self) -> &[CapacityType] {
        &self.capacity_types
    }

    pub fn offering_config(&self) -> &OfferingConfig {
        &self.config
    }

    /// Marks one offering (un)available, e.g. after an insufficient-capacity error. Returns
    /// false when the type has no such offering.
    pub fn set_available(
        &mut self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        available: bool,
    ) -> bool {
        let Some(it) = self.get_mut(instance_type) else {
            return false;
        };
        match it
            .offerings
            .iter_mut()
            .find(|o| &*o.zone == zone && o.capacity_type == capacity_type)
        {
            Some(o) => {
                o.available = available;
                true
            }
            None => false,
        }
    }

    /// Adds the `reserved` offering of one capacity reservation to its type. `price` `None`
    /// prices it as Karpenter's AWS provider does: the type's on-demand price ÷ 10⁷ (0 when the
    /// type has none), so reserved capacity sorts before anything else yet keeps the types'
    /// order. Returns false when the catalog has no such type.
    pub fn add_reservation(
        &mut self,
        instance_type: &str,
        zone: &str,
        reservation: Reservation,
        price: Option<f64>,
        available: bool,
    ) -> bool {
        let Some(it) = self.get_mut(instance_type) else {
            return false;
        };
        let price =
            price.unwrap_or_else(|| it.on_demand_price.unwrap_or(0.0) / RESERVED_PRICE_DIVISOR);
        it.offerings.push(Offering {
            zone: Arc::from(zone),
            capacity_type: CapacityType::Reserved,
            price,
            available,
            reservation: Some(reservation),
        });
        true
    }

    /// One instance of reservation `id` is taken (a node launched into it): every offering of
    /// it has one fewer left. Returns false when no offering has that reservation.
    pub fn take_reserved_instance(&mut self, id: &str) -> bool {
        let mut found = false;
        for it in Arc::make_mut(&mut self.types) {
            for r in it
                .offerings
                .iter_mut()
                .filter_map(|o| o.reservation.as_mut())
            {
                if &*r.id == id {
                    r.capacity = r.capacity.saturating_sub(1);
                    found = true;
                }
            }
        }
        found
    }

    /// GPU names (`instance-gpu-name` values) present, sorted.
    pub fn gpu_names(&self) -> BTreeSet<&str> {
        self.types
            .iter()
            .filter_map(|t| t.gpu.as_ref().map(|g| g.name.as_str()))
            .collect()
    }

    /// Families present, sorted.
    pub fn families(&self) -> BTreeSet<&str> {
        self.types.iter().map(|t| t.family.as_str()).collect()
    }
}

/// A simple conjunction of conditions on a type (all `None` = everything).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Exact type name.
    pub name: Option<String>,
    /// Exact family (`g6`).
    pub family: Option<String>,
    pub arch: Option<Arch>,
    /// GPU name, case-insensitive (`l4`, `H100`).
    pub gpu_name: Option<String>,
    /// Some(true): only types with a GPU model; Some(false): only types without.
    pub has_gpu: Option<bool>,
    pub min_vcpu: Option<u32>,
    pub min_memory_mib: Option<u64>,
    /// Only types with an available offering of this capacity type.
    pub capacity_type: Option<CapacityType>,
}

impl Filter {
    pub fn matches(&self, t: &InstanceType) -> bool {
        self.name.as_ref().is_none_or(|n| *n == t.name)
            && self.family.as_ref().is_none_or(|f| *f == t.family)
            && self.arch.is_none_or(|a| a == t.arch)
            && self.gpu_name.as_ref().is_none_or(|g| {
                t.gpu
                    .as_ref()
                    .is_some_and(|gpu| gpu.name.eq_ignore_ascii_case(g))
            })
            && self.has_gpu.is_none_or(|h| h == t.gpu.is_some())
            && self.min_vcpu.is_none_or(|n| t.vcpu >= n)
            && self.min_memory_mib.is_none_or(|m| t.memory_mib >= m)
            && self.capacity_type.is_none_or(|c| {
                t.offerings
                    .iter()
                    .any(|o| o.available && o.capacity_type == c)
            })
    }
}

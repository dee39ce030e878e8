//! Resource lists in whole base units: CPU in millicores, memory and storage in bytes,
//! everything else (pods, devices) as counts.

use std::collections::BTreeMap;
use std::fmt;

use kk_model::quantity::Quantity;

/// `cpu` (held in millicores).
pub const CPU: &str = "cpu";
/// `memory` (bytes).
pub const MEMORY: &str = "memory";
/// `ephemeral-storage` (bytes).
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods` (count).
pub const PODS: &str = "pods";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const EFA: &str = "vpc.amazonaws.com/efa";
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";

/// The resources that Karpenter's AWS provider derives from EC2 `GpuInfo` (GPU devices).
pub const GPU_RESOURCES: [&str; 3] = [NVIDIA_GPU, AMD_GPU, HABANA_GAUDI];

/// A resource list. The four core resources are fields; anything else (GPUs, Neuron devices,
/// EFA, pod ENIs, or a request for `example.com/foo`) lives in `extended`, keyed by its
/// Kubernetes resource name. Zero-valued extended entries are never stored, so two lists
/// with the same amounts compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub pods: i64,
    pub extended: BTreeMap<String, i64>,
}

impl Resources {
    /// The amount of `name` (a Kubernetes resource name), 0 when absent.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_milli,
            MEMORY => self.memory_bytes,
            EPHEMERAL_STORAGE => self.ephemeral_storage_bytes,
            PODS => self.pods,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }

    /// Sets `name` to `value` (CPU in millicores, memory/storage in bytes).
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            CPU => self.cpu_milli = value,
            MEMORY => self.memory_bytes = value,
            EPHEMERAL_STORAGE => self.ephemeral_storage_bytes = value,
            PODS => self.pods = value,
            other => {
                if value == 0 {
                    self.extended.remove(other);
                } else {
                    self.extended.insert(other.to_owned(), value);
                }
            }
        }
    }

    /// Builder form of [`Resources::set`].
    pub fn with(mut self, name: &str, value: i64) -> Self {
        self.set(name, value);
        self
    }

    /// Every resource with its amount: the four core ones always, then the extended ones
    /// by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.cpu_milli),
            (MEMORY, self.memory_bytes),
            (EPHEMERAL_STORAGE, self.ephemeral_storage_bytes),
            (PODS, self.pods),
        ]
        .into_iter()
        .chain(self.extended.iter().map(|(k, v)| (k.as_str(), *v)))
    }

    /// GPU devices of every vendor (`nvidia.com/gpu` + `amd.com/gpu` + `habana.ai/gaudi`).
    pub fn gpus(&self) -> i64 {
        GPU_RESOURCES.iter().map(|r| self.get(r)).sum()
    }

    /// True when every amount here is at most the same resource in `capacity`
    /// (a request "fits" an allocatable). Resources absent from `capacity` count as 0.
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.iter().all(|(name, v)| v <= capacity.get(name))
    }

    /// Adds `other` to `self`, per resource (saturating).
    pub fn add(&mut self, other: &Resources) {
        for (name, v) in other.iter() {
            self.set(name, self.get(name).saturating_add(v));
        }
    }

    /// Subtracts `other` from `self`, per resource (saturating; results may be negative,
    /// as Karpenter's `resources.Subtract`).
    pub fn sub(&mut self, other: &Resources) {
        for (name, v) in other.iter() {
            self.set(name, self.get(name).saturating_sub(v));
        }
    }

    /// `self - other`, without changing either.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// `self + other`, without changing either.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }
}

/// Converts a Kubernetes quantity of resource `name` to this crate's units: millicores for
/// `cpu` (rounded up below a millicore), whole units rounded up for everything else (bytes
/// for memory and storage), as `resource.Quantity.Value()` does.
pub fn quantity_units(name: &str, quantity: &Quantity) -> i64 {
    let units = if name == CPU {
        quantity.milli
    } else {
        quantity.ceil_units()
    };
    i64::try_from(units).unwrap_or(if units < 0 { i64::MIN } else { i64::MAX })
}

/// Formats an amount of `name` as a Kubernetes quantity (`1930m`, `3055Mi`, `17Gi`, `29`).
pub fn format_quantity(name: &str, value: i64) -> String {
    if name == CPU {
        return if value % 1000 == 0 {
            (value / 1000).to_string()
        } else {
            format!("{value}m")
        };
    }
    if name == MEMORY || name == EPHEMERAL_STORAGE || name.starts_with("hugepages-") {
        for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            let unit = 1i64 << shift;
            if value != 0 && value % unit == 0 {
                return format!("{}{suffix}", value / unit);
            }
        }
    }
    value.to_string()
}

impl fmt::Display for Resources {
    /// `cpu=1930m memory=3055Mi ephemeral-storage=17Gi pods=29 nvidia.com/gpu=1`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={}", format_quantity(name, v))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_and_arithmetic() {
        let cap = Resources {
            cpu_milli: 1930,
            memory_bytes: 3055 << 20,
            ephemeral_storage_bytes: 17 << 30,
            pods: 29,
            extended: BTreeMap::new(),
        }
        .with(NVIDIA_GPU, 1);
        let req = Resources::default().with(CPU, 500).with(NVIDIA_GPU, 1);
        assert!(req.fits_in(&cap));
        assert!(!req.clone().with(NVIDIA_GPU, 2).fits_in(&cap));
        assert!(
            !Resources::default()
                .with("example.com/foo", 1)
                .fits_in(&cap)
        );
        let left = cap.minus(&req);
        assert_eq!(left.cpu_milli, 1430);
        assert_eq!(left.get(NVIDIA_GPU), 0);
        assert!(
            !left.extended.contains_key(NVIDIA_GPU),
            "zero entries are dropped"
        );
        assert_eq!(left.plus(&req), cap);
        assert_eq!(
            cap.to_string(),
            "cpu=1930m memory=3055Mi ephemeral-storage=17Gi pods=29 nvidia.com/gpu=1"
        );
    }

    #[test]
    fn quantity_conversion() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(quantity_units(CPU, &q("100m")), 100);
        assert_eq!(quantity_units(CPU, &q("1.5")), 1500);
        assert_eq!(quantity_units(MEMORY, &q("1Gi")), 1 << 30);
        assert_eq!(quantity_units(MEMORY, &q("0.5")), 1);
        assert_eq!(format_quantity(CPU, 2000), "2");
        assert_eq!(format_quantity(MEMORY, 100 << 20), "100Mi");
        assert_eq!(format_quantity(MEMORY, 1000), "1000");
    }
}

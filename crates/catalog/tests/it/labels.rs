//! Karpenter's well-known label values for known types (value formats as in
//! aws/karpenter-provider-aws `pkg/providers/instancetype/types.go` computeRequirements and the
//! generated `instance-types.md`).

use std::collections::BTreeMap;

use kk_catalog::labels as l;
use kk_catalog::{Arch, Labels, catalog, kwok_catalog};

fn labels(name: &str) -> &'static Labels {
    &catalog()
        .get(name)
        .unwrap_or_else(|| panic!("{name} in the catalog"))
        .labels
}

#[test]
fn m6i_large_has_exactly_the_documented_labels() {
    // The label table of `m6i.large` in Karpenter's instance-types.md, verbatim.
    let expected: BTreeMap<&str, &str> = [
        ("karpenter.k8s.aws/instance-capability-flex", "false"),
        ("karpenter.k8s.aws/instance-category", "m"),
        ("karpenter.k8s.aws/instance-cpu", "2"),
        ("karpenter.k8s.aws/instance-cpu-manufacturer", "intel"),
        (
            "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
            "3500",
        ),
        ("karpenter.k8s.aws/instance-ebs-bandwidth", "10000"),
        (
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            "true",
        ),
        ("karpenter.k8s.aws/instance-family", "m6i"),
        ("karpenter.k8s.aws/instance-generation", "6"),
        ("karpenter.k8s.aws/instance-hypervisor", "nitro"),
        ("karpenter.k8s.aws/instance-memory", "8192"),
        ("karpenter.k8s.aws/instance-network-bandwidth", "781"),
        ("karpenter.k8s.aws/instance-size", "large"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "m6i.large"),
    ]
    .into_iter()
    .collect();
    let ours: BTreeMap<&str, &str> = labels("m6i.large")
        .iter()
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    assert_eq!(ours, expected);
}

#[test]
fn g6_xlarge_gpu_labels() {
    let g6 = labels("g6.xlarge");
    assert_eq!(g6[l::INSTANCE_GPU_NAME], "l4");
    assert_eq!(g6[l::INSTANCE_GPU_COUNT], "1");
    assert_eq!(g6[l::INSTANCE_GPU_MANUFACTURER], "nvidia");
    assert_eq!(g6[l::INSTANCE_GPU_MEMORY], "22888");
    assert_eq!(g6[l::INSTANCE_LOCAL_NVME], "250");
    assert_eq!(g6[l::INSTANCE_CATEGORY], "g");
    assert_eq!(g6[l::INSTANCE_GENERATION], "6");
    let it = catalog().get("g6.xlarge").unwrap();
    assert_eq!(it.gpu.as_ref().unwrap().count, 1);
    assert_eq!(it.capacity.get("nvidia.com/gpu"), 1);
}

#[test]
fn p5_48xlarge() {
    let p5 = labels("p5.48xlarge");
    assert_eq!(p5[l::INSTANCE_GPU_NAME], "h100");
    assert_eq!(p5[l::INSTANCE_GPU_COUNT], "8");
    assert_eq!(p5[l::INSTANCE_GPU_MANUFACTURER], "nvidia");
    assert_eq!(p5[l::INSTANCE_GPU_MEMORY], "81920");
    assert_eq!(p5[l::INSTANCE_CPU], "192");
    assert_eq!(p5[l::INSTANCE_MEMORY], "2097152");
    assert_eq!(p5[l::INSTANCE_NETWORK_BANDWIDTH], "3200000");
    assert_eq!(p5[l::INSTANCE_LOCAL_NVME], "30400");
    assert_eq!(p5[l::INSTANCE_SIZE], "48xlarge");
    let it = catalog().get("p5.48xlarge").unwrap();
    let eni = it.eni.unwrap();
    assert_eq!(
        (eni.max_enis, eni.default_card_max_enis, eni.network_cards),
        (64, 2, 32)
    );
}

#[test]
fn graviton_is_arm64() {
    let m7g = catalog().get("m7g.large").unwrap();
    assert_eq!(m7g.arch, Arch::Arm64);
    assert_eq!(m7g.labels[l::ARCH], "arm64");
    assert_eq!(m7g.labels[l::INSTANCE_CPU_MANUFACTURER], "aws");
    // Every AWS-manufactured CPU is Graviton, hence arm64, and vice versa.
    for it in catalog().iter() {
        assert_eq!(
            it.arch == Arch::Arm64,
            it.cpu_manufacturer.as_deref() == Some("aws"),
            "{}",
            it.name
        );
    }
}

#[test]
fn bare_metal_has_an_empty_hypervisor_label() {
    let metal = catalog().get("m5.metal").unwrap();
    assert!(metal.bare_metal);
    assert_eq!(metal.hypervisor, None);
    assert_eq!(metal.labels[l::INSTANCE_HYPERVISOR], "");
    for it in catalog().iter() {
        assert_eq!(it.bare_metal, it.hypervisor.is_none(), "{}", it.name);
    }
}

#[test]
fn accelerators_and_fractional_gpus() {
    let inf2 = labels("inf2.xlarge");
    assert_eq!(inf2[l::INSTANCE_ACCELERATOR_NAME], "inferentia2");
    assert_eq!(inf2[l::INSTANCE_ACCELERATOR_MANUFACTURER], "aws");
    assert_eq!(inf2[l::INSTANCE_ACCELERATOR_COUNT], "1");
    assert!(!inf2.contains_key(l::INSTANCE_GPU_NAME));
    let it = catalog().get("inf2.xlarge").unwrap();
    assert_eq!(it.capacity.get("aws.amazon.com/neuron"), 1);
    assert_eq!(it.capacity.get("aws.amazon.com/neuroncore"), 2);

    // g6f: a fraction of an L4 — gpu-count "0" and no nvidia.com/gpu to request.
    let g6f = catalog().get("g6f.large").unwrap();
    assert_eq!(g6f.labels[l::INSTANCE_GPU_NAME], "l4");
    assert_eq!(g6f.labels[l::INSTANCE_GPU_COUNT], "0");
    assert_eq!(g6f.capacity.gpus(), 0);
}

#[test]
fn category_and_generation_follow_karpenters_name_pattern() {
    // instanceTypeScheme `(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.`: letters, optional -NNtb,
    // digits; family and size split at the dot.
    for it in catalog().iter() {
        let (family, size) = it.name.split_once('.').unwrap();
        assert_eq!((family, size), (it.family.as_str(), it.size.as_str()));
        let letters: String = family
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        let rest = &family[letters.len()..];
        let rest = match rest.strip_prefix('-') {
            Some(r) => r.split_once("tb").map_or(rest, |(_, after)| after),
            None => rest,
        };
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        assert_eq!(it.labels[l::INSTANCE_CATEGORY], letters, "{}", it.name);
        assert_eq!(it.labels[l::INSTANCE_GENERATION], digits, "{}", it.name);
    }
}

#[test]
fn every_type_has_the_core_labels() {
    for it in catalog().iter() {
        for key in [
            l::INSTANCE_TYPE,
            l::ARCH,
            l::OS,
            l::INSTANCE_CATEGORY,
            l::INSTANCE_FAMILY,
            l::INSTANCE_GENERATION,
            l::INSTANCE_SIZE,
            l::INSTANCE_CPU,
            l::INSTANCE_MEMORY,
            l::INSTANCE_HYPERVISOR,
            l::INSTANCE_CAPABILITY_FLEX,
            l::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            l::INSTANCE_CPU_MANUFACTURER,
            l::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        ] {
            assert!(it.labels.contains_key(key), "{} lacks {key}", it.name);
        }
        assert_eq!(it.labels[l::INSTANCE_TYPE], it.name);
    }
}

#[test]
fn kwok_labels() {
    let it = kwok_catalog().get("m-8x-arm64-linux").unwrap();
    assert_eq!(it.labels[l::KWOK_INSTANCE_FAMILY], "m");
    assert_eq!(it.labels[l::KWOK_INSTANCE_SIZE], "8");
    assert_eq!(it.labels[l::KWOK_INSTANCE_CPU], "8");
    assert_eq!(it.labels[l::KWOK_INSTANCE_MEMORY], "64Gi");
    assert_eq!(it.labels[l::ARCH], "arm64");
    assert_eq!(it.labels[l::OS], "linux");
}

//! Karpenter's AWS allocatable formulas against the allocatable values Karpenter's own
//! documentation lists (the shared table's `alloc_*` columns), for every type.

use std::collections::BTreeMap;

use kk_catalog::allocatable::{kube_reserved_cpu_milli, memory_capacity_mib};
use kk_catalog::resources::{NVIDIA_GPU, POD_ENI};
use kk_catalog::{
    InstanceType, KubeletOverrides, Resources, Threshold, catalog, kwok_catalog, overhead,
};
use kk_model::karpenter::KubeletConfiguration;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

fn mismatches(it: &InstanceType, alloc: &Resources) -> Vec<String> {
    let doc = it.documented.expect("EC2 types carry documented values");
    let mut out = Vec::new();
    let mut check = |what: &str, ours: i64, table: i64| {
        if ours != table {
            out.push(format!(
                "{}: {what}: computed {ours}, table {table}",
                it.name
            ));
        }
    };
    check("cpu (m)", alloc.cpu_milli, doc.cpu_milli);
    check("memory (bytes)", alloc.memory_bytes, doc.memory_mib * MI);
    check("pods", alloc.pods, doc.pods);
    check(
        "ephemeral-storage (bytes)",
        alloc.ephemeral_storage_bytes,
        (doc.ephemeral_storage_gib * GI as f64) as i64,
    );
    out
}

#[test]
fn every_type_with_eni_data_matches_the_documented_allocatable_exactly() {
    let defaults = KubeletOverrides::default();
    let mut matched = 0;
    let mut failures = Vec::new();
    for it in catalog().types().iter().filter(|t| t.eni.is_some()) {
        let bad = mismatches(it, &it.allocatable(&defaults));
        if bad.is_empty() {
            matched += 1;
        }
        failures.extend(bad);
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("allocatable cpu/memory/pods/ephemeral-storage matched exactly for {matched} types");
    assert_eq!(matched, 1355, "SOURCE.txt: 1,355 types have ENI limits");
}

/// The 8 types without ENI limits (hpc*, trn2.48xlarge): pods come from the table, but CPU
/// and memory (whose kube-reserved depends on those pods) are still computed.
#[test]
fn types_without_eni_data_match_with_the_documented_pod_count() {
    let no_eni: Vec<&InstanceType> = catalog().iter().filter(|t| t.eni.is_none()).collect();
    let names: Vec<&str> = no_eni.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 8, "{names:?}");
    for it in no_eni {
        let bad = mismatches(it, &it.allocatable(&KubeletOverrides::default()));
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(
            it.capacity.get(POD_ENI),
            0,
            "{}: no ENI limits, no pod-eni",
            it.name
        );
    }
}

#[test]
fn eni_formula_agrees_with_the_tables_own_column() {
    for it in catalog().iter().filter(|t| t.eni.is_some()) {
        let doc = it.documented.unwrap();
        assert_eq!(it.eni_limited_pods(0), doc.eni_limited_pods, "{}", it.name);
    }
}

/// The graviton rule: arm64 types lose 64 MiB (CMA) before the 7.5 % VM overhead. Without
/// it every arm64 row would be off; this pins the rule on one type each way.
#[test]
fn graviton_cma_reservation() {
    let m7g = catalog().get("m7g.large").unwrap();
    let m6i = catalog().get("m6i.large").unwrap();
    assert_eq!(m7g.memory_mib, m6i.memory_mib);
    // 8192 − 64 = 8128; ⌈8128 × 0.075⌉ = 610 → 7518. amd64: 8192 − ⌈614.4⌉ = 7577.
    assert_eq!(memory_capacity_mib(m7g, 0.075), 7518);
    assert_eq!(memory_capacity_mib(m6i, 0.075), 7577);
    // 7518 − (11 × 29 + 255) − 100 = 6844 (the table), 7577 − 574 − 100 = 6903.
    assert_eq!(m7g.documented.unwrap().memory_mib, 6844);
    assert_eq!(m6i.documented.unwrap().memory_mib, 6903);
}

#[test]
fn pod_eni_matches_the_documentation_where_it_lists_one() {
    let mut undocumented = Vec::new();
    for it in catalog().iter() {
        match it.documented.unwrap().pod_eni {
            Some(n) => assert_eq!(it.capacity.get(POD_ENI), n, "{}", it.name),
            None if it.capacity.get(POD_ENI) > 0 => undocumented.push(it.name.as_str()),
            None => {}
        }
    }
    // The documentation page predates these types' entries in the ENI-limit table.
    assert_eq!(undocumented.len(), 56, "{undocumented:?}");
}

#[test]
fn max_pods_and_pods_per_core() {
    let it = catalog().get("m6i.large").unwrap();
    let base = it.allocatable(&KubeletOverrides::default());
    assert_eq!(base.pods, 29);

    let max110 = KubeletOverrides {
        max_pods: Some(110),
        ..Default::default()
    };
    let a = it.allocatable(&max110);
    assert_eq!(a.pods, 110);
    // AL2023/Custom: kube-reserved memory keeps following the ENI-limited count (29).
    assert_eq!(a.memory_bytes, base.memory_bytes);
    assert_eq!(
        overhead(it, &max110).kube_reserved.memory_bytes,
        (11 * 29 + 255) * MI
    );

    let per_core = KubeletOverrides {
        max_pods: Some(110),
        pods_per_core: Some(4),
        ..Default::default()
    };
    assert_eq!(it.allocatable(&per_core).pods, 8, "min(4 × 2 vCPU, 110)");

    let reserved = KubeletOverrides {
        reserved_enis: 1,
        ..Default::default()
    };
    assert_eq!(it.allocatable(&reserved).pods, 2 * 9 + 2);
    let all_reserved = KubeletOverrides {
        reserved_enis: 3,
        ..Default::default()
    };
    assert_eq!(it.allocatable(&all_reserved).pods, 0);
}

#[test]
fn reserved_overrides_replace_defaults_per_resource() {
    let it = catalog().get("m6i.xlarge").unwrap();
    let base = it.allocatable(&KubeletOverrides::default());
    assert_eq!(kube_reserved_cpu_milli(4000), 80);

    let kubelet: KubeletConfiguration = KubeletConfiguration {
        kube_reserved: BTreeMap::from([("cpu".into(), "200m".into())]),
        system_reserved: BTreeMap::from([
            ("memory".into(), "1Gi".into()),
            ("pid".into(), "1000".into()),
        ]),
        eviction_hard: BTreeMap::from([("memory.available".into(), "5%".into())]),
        max_pods: Some(110),
        ..Default::default()
    };
    let ov = KubeletOverrides::from_kubelet(&kubelet).unwrap();
    assert_eq!(ov.kube_reserved["cpu"], 200);
    assert_eq!(ov.eviction_hard_memory, Some(Threshold::Percent(5.0)));
    let a = it.allocatable(&ov);
    // cpu: the 80m default replaced by 200m.
    assert_eq!(a.cpu_milli, base.cpu_milli + 80 - 200);
    // memory: kube-reserved memory default kept; 1Gi system-reserved; 5 % eviction instead of 100Mi.
    let cap = it.capacity_with(&ov).memory_bytes;
    let five_percent = (cap as f64 / 100.0 * 5.0).ceil() as i64;
    assert_eq!(
        a.memory_bytes,
        base.memory_bytes - GI + 100 * MI - five_percent
    );
    // A reserved pid is not a resource the node offers: nothing goes negative.
    assert_eq!(a.get("pid"), 0);
    assert_eq!(a.pods, 110);
}

#[test]
fn ephemeral_storage_settings() {
    let it = catalog().get("g6.xlarge").unwrap();
    let root = KubeletOverrides {
        ephemeral_storage_bytes: Some(100 * GI),
        ..Default::default()
    };
    // 100Gi − 1Gi kube-reserved − 10Gi (10 %) eviction.
    assert_eq!(it.allocatable(&root).ephemeral_storage_bytes, 89 * GI);
    let raid = KubeletOverrides {
        instance_store_raid0: true,
        ..Default::default()
    };
    let cap = 250 * 1_000_000_000_i64;
    assert_eq!(it.capacity_with(&raid).ephemeral_storage_bytes, cap);
    let nodefs = KubeletOverrides {
        eviction_hard_nodefs: Some(Threshold::Bytes(GI)),
        ..Default::default()
    };
    assert_eq!(it.allocatable(&nodefs).ephemeral_storage_bytes, 18 * GI);
}

#[test]
fn devices_pass_through_unchanged() {
    let p5 = catalog().get("p5.48xlarge").unwrap();
    let a = p5.allocatable(&KubeletOverrides::default());
    assert_eq!(a.get(NVIDIA_GPU), 8);
    assert_eq!(a.get("vpc.amazonaws.com/efa"), 32);
    assert_eq!(a.get(POD_ENI), 120);
    assert_eq!(a.gpus(), 8);
    // 2 ENIs on the default card × 49 + 2: a p5.48xlarge runs at most 100 pods.
    assert_eq!(a.pods, 100);
}

#[test]
fn bad_kubelet_values_are_rejected_with_the_field() {
    let bad = |kubelet: KubeletConfiguration| {
        KubeletOverrides::from_kubelet(&kubelet)
            .unwrap_err()
            .to_string()
    };
    let e = bad(KubeletConfiguration {
        kube_reserved: BTreeMap::from([("memory".into(), "lots".into())]),
        ..Default::default()
    });
    assert!(e.starts_with("spec.kubelet.kubeReserved.memory: "), "{e}");
    let e = bad(KubeletConfiguration {
        eviction_hard: BTreeMap::from([("memory.available".into(), "120%".into())]),
        ..Default::default()
    });
    assert!(
        e.starts_with("spec.kubelet.evictionHard.memory.available: "),
        "{e}"
    );
    let e = bad(KubeletConfiguration {
        max_pods: Some(-1),
        ..Default::default()
    });
    assert_eq!(e, "spec.kubelet.maxPods: must not be negative");
}

#[test]
fn kwok_overhead_is_fixed() {
    let it = kwok_catalog().get("c-4x-amd64-linux").unwrap();
    let a = it.allocatable(&KubeletOverrides {
        max_pods: Some(7),
        ..Default::default()
    });
    assert_eq!(a.cpu_milli, 4000 - 100);
    assert_eq!(a.memory_bytes, it.capacity.memory_bytes - 10 * MI);
    assert_eq!(a.pods, it.capacity.pods, "KWOK ignores kubelet settings");
}

//! Karpenter's scheduling benchmark shapes (kubernetes-sigs/karpenter v1.14
//! `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`), re-built here:
//!
//! - 400 instance types as `fake.InstanceTypes(400)` makes them: type i has i+1 vCPU, 2(i+1) GiB,
//!   10(i+1) pods, kube-reserved 100m CPU + 10Mi; offerings spot in test-zone-1/2 and on-demand in
//!   test-zone-1/2/3, all priced 0.1 × vCPU + 0.1 × memory-bytes / 1e9;
//! - one NodePool with limits cpu 10,000,000 and memory 10,000,000Gi;
//! - pods split evenly across generic, zone spread, hostname spread (maxSkew 1, DoNotSchedule,
//!   a random `my-label` selector), zone self-affinity and hostname anti-affinity, with CPU from
//!   {100m, 250m, 500m, 1, 1.5} and memory from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}.
//!
//! Run: `cargo bench -p kk-sim --bench schedule` (release). Karpenter's published figure for
//! 20,000 pods is 35.7 s (PR #1938).

use std::collections::BTreeMap;
use std::time::Instant;

use kk_catalog::{
    Arch, CapacityType, Catalog, InstanceType, OfferingConfig, OverheadModel, PriceTable, Resources,
};
use kk_sim::model::{LabelSelector, Pod, PodAffinityTerm, PodSpec, Policy, Pool, SpreadConstraint};
use kk_sim::{Input, Options, Requirements, simulate};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

fn fake_catalog(total: usize) -> Catalog {
    let mut prices = PriceTable::default();
    let mut types = Vec::new();
    for i in 0..total {
        let cpu = (i + 1) as i64;
        let mem_gib = 2 * cpu;
        let name = format!("fake-it-{i}");
        let price = 0.1 * cpu as f64 + 0.1 * (mem_gib << 30) as f64 / 1e9;
        for (zone, ct) in [
            ("test-zone-1", CapacityType::Spot),
            ("test-zone-2", CapacityType::Spot),
            ("test-zone-1", CapacityType::OnDemand),
            ("test-zone-2", CapacityType::OnDemand),
            ("test-zone-3", CapacityType::OnDemand),
        ] {
            prices.insert(&name, zone, ct, price);
        }
        let labels: BTreeMap<std::borrow::Cow<'static, str>, std::borrow::Cow<'static, str>> = [
            ("node.kubernetes.io/instance-type", name.clone()),
            ("kubernetes.io/arch", "amd64".into()),
            ("kubernetes.io/os", "linux".into()),
            ("integer", cpu.to_string()),
            (
                "size",
                if cpu > 4 && mem_gib > 8 {
                    "large"
                } else {
                    "small"
                }
                .into(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (std::borrow::Cow::Borrowed(k), std::borrow::Cow::Owned(v)))
        .collect();
        types.push(InstanceType {
            name,
            family: "fake".into(),
            size: cpu.to_string(),
            category: "fake".into(),
            generation: None,
            arch: Arch::Amd64,
            os: "linux".into(),
            vcpu: cpu as u32,
            memory_mib: (mem_gib as u64) << 10,
            cpu_manufacturer: None,
            gpu: None,
            accelerator: None,
            hypervisor: None,
            bare_metal: false,
            local_nvme_gb: None,
            network_bandwidth_mbps: None,
            eni: None,
            on_demand_price: None,
            spot_price: None,
            labels,
            capacity: Resources {
                cpu_milli: cpu * 1000,
                memory_bytes: mem_gib << 30,
                ephemeral_storage_bytes: 0,
                pods: 10 * cpu,
                extended: BTreeMap::new(),
            },
            overhead: OverheadModel::Fixed(Resources {
                cpu_milli: 100,
                memory_bytes: 10 << 20,
                ..Resources::default()
            }),
            documented: None,
            offerings: Vec::new(),
        });
    }
    let config = OfferingConfig {
        zones: vec![
            "test-zone-1".into(),
            "test-zone-2".into(),
            "test-zone-3".into(),
        ],
        prices,
        ..OfferingConfig::default()
    };
    Catalog::from_types(types, &config).expect("fake catalog")
}

fn base_pod(rng: &mut Rng, name: String, labels: BTreeMap<String, String>) -> Pod {
    let cpu = *rng.pick(&[100i64, 250, 500, 1000, 1500]);
    let mem = *rng.pick(&[100i64, 256, 512, 1024, 2048, 4096]);
    let owner = format!("pod/{name}");
    Pod::new(
        "default".into(),
        name,
        PodSpec {
            owner,
            labels,
            requests: [("cpu".to_owned(), cpu), ("memory".to_owned(), mem << 20)].into(),
            tolerations: Vec::new(),
            node_selector: BTreeMap::new(),
            required_terms: None,
            preferred_terms: Vec::new(),
            affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            anti_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
            spread: Vec::new(),
            created: None,
            host_ports: Vec::new(),
            invalid: None,
        },
    )
}

fn one_label(rng: &mut Rng, key: &str) -> BTreeMap<String, String> {
    let v = *rng.pick(&["a", "b", "c", "d", "e", "f", "g"]);
    [(key.to_owned(), v.to_owned())].into()
}

fn selector(labels: BTreeMap<String, String>) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: labels,
        match_expressions: Vec::new(),
    })
}

fn diverse_pods(rng: &mut Rng, count: usize) -> Vec<Pod> {
    let per = count / 5;
    let mut pods = Vec::new();
    let mut n = 0;
    let mut name = || {
        n += 1;
        format!("pod-{n}")
    };
    for _ in 0..per {
        let l = one_label(rng, "my-label");
        pods.push(base_pod(rng, name(), l));
    }
    for key in ["topology.kubernetes.io/zone", "kubernetes.io/hostname"] {
        for _ in 0..per {
            let l = one_label(rng, "my-label");
            let mut p = base_pod(rng, name(), l);
            p.spread.push(SpreadConstraint {
                max_skew: 1,
                topology_key: key.into(),
                required: true,
                selector: selector(one_label(rng, "my-label")),
                min_domains: None,
                node_affinity_policy: Policy::Honor,
                node_taints_policy: Policy::Ignore,
                match_label_keys: Vec::new(),
            });
            pods.push(p);
        }
    }
    for _ in 0..per {
        let l = one_label(rng, "my-affininity");
        let mut p = base_pod(rng, name(), l.clone());
        p.affinity.push(PodAffinityTerm {
            selector: selector(l),
            topology_key: "topology.kubernetes.io/zone".into(),
            namespaces: Vec::new(),
        });
        pods.push(p);
    }
    for _ in 0..per {
        let l: BTreeMap<String, String> = [("app".to_owned(), "nginx".to_owned())].into();
        let mut p = base_pod(rng, name(), l.clone());
        p.anti_affinity.push(PodAffinityTerm {
            selector: selector(l),
            topology_key: "kubernetes.io/hostname".into(),
            namespaces: Vec::new(),
        });
        pods.push(p);
    }
    while pods.len() < count {
        let l = one_label(rng, "my-label");
        pods.push(base_pod(rng, name(), l));
    }
    pods
}

fn input(catalog: &Catalog, pods: Vec<Pod>) -> Input {
    Input {
        pools: vec![Pool {
            name: "default".into(),
            weight: 0,
            node_class: "default".into(),
            requirements: Requirements::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: [
                ("cpu".to_owned(), 10_000_000_000i64),
                ("memory".to_owned(), 10_000_000i64 << 30),
            ]
            .into(),
            kubelet: Default::default(),
            replicas: None,
            capacity_overlay: BTreeMap::new(),
            budget: None,
            budget_account: None,
        }],
        pods,
        daemonsets: Vec::new(),
        nodes: Vec::new(),
        bound: Vec::new(),
        catalog: catalog.clone(),
        options: Options::default(),
        warnings: Vec::new(),
    }
}

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let catalog = fake_catalog(400);
    println!(
        "400 instance types; pods split across generic, zone spread, hostname spread, zone affinity, hostname anti-affinity"
    );
    println!(
        "{:>7}  {:>9}  {:>7}  {:>7}  {:>12}",
        "pods", "time", "nodes", "pending", "pods/s"
    );
    // KK_SIM_BENCH_SIZES=5000,20000 picks sizes (profiling).
    let sizes: Vec<usize> = std::env::var("KK_SIM_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1_000, 5_000, 20_000, 100_000]);
    for count in sizes {
        let mut rng = Rng(42);
        let pods = diverse_pods(&mut rng, count);
        let input = input(&catalog, pods);
        let runs = if count <= 1_000 { 5 } else { 1 };
        let mut best = f64::MAX;
        let mut nodes = 0;
        let mut pending = 0;
        for _ in 0..runs {
            let start = Instant::now();
            let outcome = simulate(&input);
            let secs = start.elapsed().as_secs_f64();
            best = best.min(secs);
            nodes = outcome.claims.len();
            pending = outcome.errors.len();
        }
        println!(
            "{count:>7}  {:>8.3}s  {nodes:>7}  {pending:>7}  {:>12.0}",
            best,
            count as f64 / best
        );
    }
}

//! Properties of any plan: no NodeClaim over its types' allocatable, every placed pod tolerates
//! and matches where it runs, NodePool limits hold (pessimistically), same input → same bytes.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use kk_catalog::{Catalog, KubeletOverrides};
use kk_sim::model::{
    Effect, LabelSelector, Pod, PodAffinityTerm, PodSpec, Policy, Pool, SelectorReq,
    SpreadConstraint, Taint, Toleration, TolerationOp, untolerated,
};
use kk_sim::{Input, Operator, Options, Requirement, Requirements, simulate, solve};
use proptest::prelude::*;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| kk_catalog::catalog().clone());

const FAMILIES: [&str; 5] = ["m6i", "c6i", "r6i", "g6", "g5"];

#[derive(Debug, Clone)]
struct PoolSpec {
    families: Vec<usize>,
    taint: bool,
    cpu_limit: Option<i64>,
    gpu_limit: Option<i64>,
    spot: bool,
    weight: i64,
}

#[derive(Debug, Clone)]
struct WorkSpec {
    replicas: usize,
    cpu: i64,
    mem_mib: i64,
    gpu: i64,
    tolerate: bool,
    zone: Option<usize>,
    capacity_type: Option<bool>,
    anti: bool,
    spread: bool,
}

fn pool_spec() -> impl Strategy<Value = PoolSpec> {
    (
        proptest::sample::subsequence((0..FAMILIES.len()).collect::<Vec<_>>(), 1..=3),
        any::<bool>(),
        proptest::option::of(4i64..200),
        proptest::option::of(1i64..8),
        any::<bool>(),
        0i64..3,
    )
        .prop_map(
            |(families, taint, cpu_limit, gpu_limit, spot, weight)| PoolSpec {
                families,
                taint,
                cpu_limit,
                gpu_limit,
                spot,
                weight,
            },
        )
}

fn work_spec() -> impl Strategy<Value = WorkSpec> {
    (
        1usize..12,
        prop_oneof![Just(100i64), Just(500), Just(1000), Just(3000), Just(20000)],
        prop_oneof![Just(128i64), Just(1024), Just(8192), Just(65536)],
        prop_oneof![4 => Just(0i64), 1 => Just(1), 1 => Just(2)],
        any::<bool>(),
        proptest::option::of(0usize..3),
        proptest::option::of(any::<bool>()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(replicas, cpu, mem_mib, gpu, tolerate, zone, capacity_type, anti, spread)| WorkSpec {
                replicas,
                cpu,
                mem_mib,
                gpu,
                tolerate,
                zone,
                capacity_type,
                anti,
                spread,
            },
        )
}

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

fn build(pools: &[PoolSpec], work: &[WorkSpec]) -> Input {
    let pools = pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut requirements = Requirements::new();
            requirements.add(
                "karpenter.k8s.aws/instance-family",
                Requirement::in_values(p.families.iter().map(|f| FAMILIES[*f])),
            );
            requirements.add(
                "karpenter.k8s.aws/instance-size",
                Requirement::in_values(["large", "xlarge", "2xlarge", "4xlarge"]),
            );
            let ct: &[&str] = if p.spot {
                &["spot", "on-demand"]
            } else {
                &["on-demand"]
            };
            requirements.add(
                "karpenter.sh/capacity-type",
                Requirement::in_values(ct.iter().copied()),
            );
            let mut limits = BTreeMap::new();
            if let Some(c) = p.cpu_limit {
                limits.insert("cpu".to_owned(), c * 1000);
            }
            if let Some(g) = p.gpu_limit {
                limits.insert("nvidia.com/gpu".to_owned(), g);
            }
            Pool {
                name: format!("pool-{i}"),
                weight: p.weight,
                node_class: "default".into(),
                requirements,
                labels: BTreeMap::new(),
                taints: if p.taint {
                    vec![Taint {
                        key: "dedicated".into(),
                        value: "x".into(),
                        effect: Effect::NoSchedule,
                    }]
                } else {
                    Vec::new()
                },
                startup_taints: Vec::new(),
                limits,
                kubelet: KubeletOverrides::default(),
                replicas: None,
                capacity_overlay: BTreeMap::new(),
                budget: None,
                budget_account: None,
            }
        })
        .collect();
    let mut pods = Vec::new();
    for (w, spec) in work.iter().enumerate() {
        for r in 0..spec.replicas {
            let labels: BTreeMap<String, String> = [("app".to_owned(), format!("w{w}"))].into();
            let mut requests: BTreeMap<String, i64> = [
                ("cpu".to_owned(), spec.cpu),
                ("memory".to_owned(), spec.mem_mib << 20),
            ]
            .into();
            if spec.gpu > 0 {
                requests.insert("nvidia.com/gpu".into(), spec.gpu);
            }
            let mut node_selector = BTreeMap::new();
            if let Some(z) = spec.zone {
                node_selector.insert(
                    "topology.kubernetes.io/zone".to_owned(),
                    ZONES[z].to_owned(),
                );
            }
            if let Some(spot) = spec.capacity_type {
                node_selector.insert(
                    "karpenter.sh/capacity-type".to_owned(),
                    if spot { "spot" } else { "on-demand" }.to_owned(),
                );
            }
            let selector = Some(LabelSelector {
                match_labels: labels.clone(),
                match_expressions: Vec::new(),
            });
            let pod_spec = PodSpec {
                owner: format!("deploy/w{w}"),
                labels: labels.clone(),
                requests,
                tolerations: if spec.tolerate {
                    vec![Toleration {
                        key: "dedicated".into(),
                        operator: TolerationOp::Exists,
                        value: String::new(),
                        effect: None,
                    }]
                } else {
                    Vec::new()
                },
                node_selector,
                required_terms: (w % 3 == 0).then(|| {
                    vec![vec![SelectorReq {
                        key: "kubernetes.io/arch".into(),
                        operator: Operator::In,
                        values: vec!["amd64".into()],
                    }]]
                }),
                preferred_terms: Vec::new(),
                affinity: Vec::new(),
                preferred_affinity: Vec::new(),
                anti_affinity: if spec.anti {
                    vec![PodAffinityTerm {
                        selector: selector.clone(),
                        topology_key: "kubernetes.io/hostname".into(),
                        namespaces: Vec::new(),
                    }]
                } else {
                    Vec::new()
                },
                preferred_anti_affinity: Vec::new(),
                spread: if spec.spread {
                    vec![SpreadConstraint {
                        max_skew: 1,
                        topology_key: "topology.kubernetes.io/zone".into(),
                        required: true,
                        selector,
                        min_domains: None,
                        node_affinity_policy: Policy::Honor,
                        node_taints_policy: Policy::Ignore,
                        match_label_keys: Vec::new(),
                    }]
                } else {
                    Vec::new()
                },
                created: None,
                host_ports: Vec::new(),
                invalid: None,
            };
            pods.push(Pod::new("default".into(), format!("w{w}-{r}"), pod_spec));
        }
    }
    Input {
        pools,
        pods,
        daemonsets: Vec::new(),
        nodes: Vec::new(),
        bound: Vec::new(),
        catalog: CATALOG.clone(),
        options: Options::default(),
        warnings: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn plans_respect_allocatable_taints_requirements_and_limits(
        pools in proptest::collection::vec(pool_spec(), 1..3),
        work in proptest::collection::vec(work_spec(), 1..5),
    ) {
        let input = build(&pools, &work);
        let outcome = simulate(&input);
        let types = input.catalog.types();
        let mut used: BTreeMap<usize, BTreeMap<String, i64>> = BTreeMap::new();
        for claim in &outcome.claims {
            let pool = &input.pools[claim.pool_index];
            prop_assert!(!claim.types.is_empty());
            prop_assert!(claim.types.len() <= 600);
            let mut total: BTreeMap<String, i64> = BTreeMap::new();
            for &p in &claim.pods {
                let pod = &input.pods[p];
                for (k, v) in &pod.requests {
                    *total.entry(k.clone()).or_default() += v;
                }
                *total.entry("pods".into()).or_default() += 1;
                // Taints: NoSchedule/NoExecute must be tolerated.
                let hard: Vec<Taint> = pool.taints.iter().filter(|t| t.effect != Effect::PreferNoSchedule).cloned().collect();
                prop_assert!(untolerated(&hard, &pod.tolerations).is_none(), "{} on tainted {}", pod.key(), pool.name);
                // Requirements: the claim's requirements satisfy the pod's nodeSelector and
                // required terms (which only use well-known keys here).
                let mut strict = Requirements::from_labels(&pod.node_selector);
                if let Some(t) = pod.required_terms.as_ref().and_then(|t| t.first()) {
                    strict.add_all(&kk_sim::model::term_requirements(t));
                }
                prop_assert!(claim.requirements.intersects(&strict).is_ok(), "{} vs {}", pod.key(), claim.requirements);
                for (k, r) in strict.iter() {
                    let c = claim.requirements.get(k);
                    prop_assert!(c.has_intersection(r));
                }
            }
            for &ci in &claim.types {
                let alloc = types[ci].allocatable(&pool.kubelet);
                for (k, v) in &total {
                    prop_assert!(*v <= alloc.get(k), "{} {k}={v} over {}", types[ci].name, alloc.get(k));
                }
                // Every option offers the pods' zone and capacity type.
                let zr = claim.requirements.get("topology.kubernetes.io/zone");
                let cr = claim.requirements.get("karpenter.sh/capacity-type");
                prop_assert!(types[ci].offerings.iter().any(|o| o.available && zr.has(&o.zone) && cr.has(o.capacity_type.as_str())));
            }
            // Pessimistic limit accounting: the largest option counts.
            let u = used.entry(claim.pool_index).or_default();
            for k in pool.limits.keys() {
                let max = claim.types.iter().map(|&ci| types[ci].capacity_with(&pool.kubelet).get(k)).max().unwrap_or(0);
                *u.entry(k.clone()).or_default() += max;
            }
        }
        for (pi, u) in &used {
            for (k, v) in u {
                let limit = input.pools[*pi].limits[k];
                prop_assert!(*v <= limit, "pool {} {k}: {v} > limit {limit}", input.pools[*pi].name);
            }
        }
        // Every pod is either placed once or Pending with a reason.
        let placed: usize = outcome.claims.iter().map(|c| c.pods.len()).sum();
        prop_assert_eq!(placed + outcome.errors.len(), input.pods.len());
        prop_assert!(outcome.errors.values().all(|r| !r.is_empty()));
    }

    #[test]
    fn same_input_same_bytes(
        pools in proptest::collection::vec(pool_spec(), 1..3),
        work in proptest::collection::vec(work_spec(), 1..4),
    ) {
        let input = build(&pools, &work);
        let a = solve(&input);
        let b = solve(&input);
        prop_assert_eq!(a.to_json(), b.to_json());
        prop_assert_eq!(a.render_table(), b.render_table());
    }
}

#[test]
fn label_selector_operators() {
    let sel = LabelSelector {
        match_labels: [("app".to_owned(), "a".to_owned())].into(),
        match_expressions: vec![
            ("tier".into(), Operator::In, vec!["web".into()]),
            ("canary".into(), Operator::DoesNotExist, vec![]),
        ],
    };
    let mut labels: BTreeMap<String, String> = [
        ("app".to_owned(), "a".to_owned()),
        ("tier".to_owned(), "web".to_owned()),
    ]
    .into();
    assert!(sel.matches(&labels));
    labels.insert("canary".into(), "1".into());
    assert!(!sel.matches(&labels));
}

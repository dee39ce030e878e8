//! Lint and plan agree on "can this pod ever land on this pool": for generated NodePools (labels,
//! requirements, taints) and pods (nodeSelector, required node affinity, tolerations), lint's
//! scheduling view (`kk_lint::sched`, what its placement and toleration rules read) says "never"
//! exactly when the simulator (`kk-sim`, checked against Karpenter's scheduler) leaves the pod
//! Pending. Both read Karpenter's semantics from `kk-karpenter`; this catches a rule that drifts.

use std::collections::BTreeMap;

use kk_lint::sched::{self, PoolLabels, Reach};
use kk_model::karpenter::NodePool;
use kk_sim::{LoadOptions, SourceFile, load, solve};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Custom label keys (outside every managed domain, so lint can always tell) and their values.
const KEYS: [&str; 3] = ["team", "tier", "example.com/disk"];
const VALUES: [&str; 3] = ["a", "b", "c"];

/// Taints a pool may carry: hard ones, a soft one, and a numeric one for Gt/Lt tolerations.
fn taints() -> [Value; 4] {
    [
        json!({"key": "gpu", "value": "true", "effect": "NoSchedule"}),
        json!({"key": "dedicated", "effect": "NoExecute"}),
        json!({"key": "soft", "effect": "PreferNoSchedule"}),
        json!({"key": "level", "value": "5", "effect": "NoSchedule"}),
    ]
}

/// Tolerations a pod may carry, every operator included.
fn tolerations() -> [Value; 8] {
    [
        json!({"operator": "Exists"}),
        json!({"key": "gpu", "operator": "Exists"}),
        json!({"key": "gpu", "value": "true", "effect": "NoSchedule"}),
        json!({"key": "gpu", "value": "false"}),
        json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "level", "operator": "Gt", "value": "3"}),
        json!({"key": "level", "operator": "Lt", "value": "5"}),
    ]
}

/// What a pool says about one key: nothing, a template label, or a requirement. NotIn is left
/// out on the pool side: lint cannot tell whether such a node carries the label at all.
#[derive(Debug, Clone)]
enum PoolKey {
    Unset,
    Label(usize),
    Req(&'static str, Vec<usize>),
}

fn pool_key() -> impl Strategy<Value = PoolKey> {
    prop_oneof![
        Just(PoolKey::Unset),
        (0..VALUES.len()).prop_map(PoolKey::Label),
        proptest::sample::subsequence((0..VALUES.len()).collect::<Vec<_>>(), 1..=2)
            .prop_map(|v| PoolKey::Req("In", v)),
        Just(PoolKey::Req("Exists", vec![])),
        Just(PoolKey::Req("DoesNotExist", vec![])),
    ]
}

fn expression(k: usize) -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("In"),
            Just("NotIn"),
            Just("Exists"),
            Just("DoesNotExist")
        ],
        proptest::sample::subsequence((0..VALUES.len()).collect::<Vec<_>>(), 1..=2),
    )
        .prop_map(move |(op, values)| {
            let values: Vec<&str> = match op {
                "In" | "NotIn" => values.iter().map(|v| VALUES[*v]).collect(),
                _ => vec![],
            };
            json!({"key": KEYS[k], "operator": op, "values": values})
        })
}

/// One node selector term: one or two expressions, each on its own key.
fn term() -> impl Strategy<Value = Vec<Value>> {
    proptest::sample::subsequence((0..KEYS.len()).collect::<Vec<_>>(), 1..=2)
        .prop_flat_map(|keys| keys.into_iter().map(expression).collect::<Vec<_>>())
}

#[derive(Debug, Clone)]
struct Case {
    pool: Value,
    pod_spec: Value,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(pool_key(), KEYS.len()),
        proptest::sample::subsequence((0..4).collect::<Vec<_>>(), 0..=2),
        proptest::collection::btree_map(0..KEYS.len(), 0..VALUES.len(), 0..=2),
        proptest::option::of(proptest::collection::vec(term(), 1..=2)),
        proptest::sample::subsequence((0..8).collect::<Vec<_>>(), 0..=3),
    )
        .prop_map(|(keys, taint_ix, selector, mut terms, tol_ix)| {
            // With a PreferNoSchedule taint, one required term only: Karpenter relaxes a pod by
            // dropping required node affinity terms *before* it tolerates PreferNoSchedule
            // taints (kubernetes-sigs/karpenter v1.14 pkg/controllers/provisioning/scheduling/
            // preferences.go `Relax`), so a first term that fits only because of that
            // toleration is gone by then and the pod stays Pending where lint sees a fit.
            if taint_ix.contains(&2)
                && let Some(terms) = terms.as_mut()
            {
                terms.truncate(1);
            }
            let mut labels = serde_json::Map::new();
            let mut requirements = Vec::new();
            for (k, how) in keys.iter().enumerate() {
                match how {
                    PoolKey::Unset => {}
                    PoolKey::Label(v) => {
                        labels.insert(KEYS[k].into(), json!(VALUES[*v]));
                    }
                    PoolKey::Req(op, values) => {
                        let values: Vec<&str> = values.iter().map(|v| VALUES[*v]).collect();
                        requirements.push(json!({"key": KEYS[k], "operator": op, "values": values}));
                    }
                }
            }
            let all_taints = taints();
            let pool = json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "pool"},
                "spec": {"template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": requirements,
                        "taints": taint_ix.iter().map(|i| all_taints[*i].clone()).collect::<Vec<_>>(),
                    },
                }},
            });
            let all_tols = tolerations();
            let mut pod_spec = json!({
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                "tolerations": tol_ix.iter().map(|i| all_tols[*i].clone()).collect::<Vec<_>>(),
            });
            // A pod that contradicts itself on one key (nodeSelector a=x and, in a term,
            // a DoesNotExist) is left out: Karpenter intersects the two into DoesNotExist and
            // launches a node no such pod can use (kubernetes-sigs/karpenter v1.14
            // pkg/scheduling/requirements.go `Add`), where lint rightly says "never".
            let in_terms = |k: &str| {
                terms.iter().flatten().flatten().any(|e| e["key"] == k)
            };
            let selector: BTreeMap<usize, usize> =
                selector.into_iter().filter(|(k, _)| !in_terms(KEYS[*k])).collect();
            if !selector.is_empty() {
                let selector: BTreeMap<&str, &str> =
                    selector.iter().map(|(k, v)| (KEYS[*k], VALUES[*v])).collect();
                pod_spec["nodeSelector"] = json!(selector);
            }
            if let Some(terms) = terms {
                let terms: Vec<Value> =
                    terms.into_iter().map(|e| json!({"matchExpressions": e})).collect();
                pod_spec["affinity"] = json!({"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}});
            }
            Case { pool, pod_spec }
        })
}

/// Lint's answer: the pool's hard taints are all tolerated and the selection can reach a node.
fn lint_can_land(case: &Case) -> bool {
    let pool: NodePool = serde_json::from_value(case.pool.clone()).unwrap();
    let labels = PoolLabels::of(&pool, &BTreeMap::new());
    let untolerated = sched::untolerated_taints(&pool, &sched::tolerations(&case.pod_spec));
    untolerated.is_empty()
        && !matches!(
            sched::placement_reach(&case.pod_spec, &labels),
            Reach::Never(_)
        )
}

/// The plan's answer: the simulator places the pod on a new NodeClaim of the pool.
fn plan_can_land(case: &Case) -> bool {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": case.pod_spec});
    let input = load(
        &[SourceFile::new("pool.yaml", case.pool.to_string())],
        &[SourceFile::new("pod.yaml", pod.to_string())],
        &[],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}", e[0]));
    solve(&input).pending.is_empty()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn lint_and_plan_agree_on_whether_a_pod_can_land(case in case()) {
        let lint = lint_can_land(&case);
        let plan = plan_can_land(&case);
        prop_assert_eq!(
            lint,
            plan,
            "lint says {}, plan says {}\npool: {}\npod spec: {}",
            lint,
            plan,
            case.pool,
            case.pod_spec
        );
    }
}

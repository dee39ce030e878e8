//! Spend budgets on the lab with the real Karpenter (issue #51): a pool whose budget
//! ($0.20/h) pays for two m6i.large on demand ($0.096/h each) and a Deployment that wants four
//! — `plan`, run first, predicts two launched and two Pending for the budget; Karpenter then
//! launches exactly two (the budget controller narrowed the pool's cpu limit), the rest stay
//! Pending with a BudgetExhausted Event on the NodePool, and `top` shows the pool at its
//! budget. Raising the budget (the spec, re-applied) lets the other two launch. A second test:
//! under its budget a pool still consolidates by replacement (an m6i.xlarge replaced by an
//! m6i.large).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::harness::{Lab, assert_no_orphan_no_duplicate, claims_of, is_true, live, pod_available};

const MIN: Duration = Duration::from_secs(60);
const POOL: &str = "budget-lab";

/// The lab spec with a budgeted pool of its own node class (its taint is its own).
fn spec_edit(budget: &'static str) -> impl FnOnce(String) -> String {
    move |mut spec: String| {
        spec.push_str(&format!(
            "    - name: {POOL}
      type: cpu
      nodeClass: kubean-aws-budget
      ami: {{id: ami-0c0ffee0c0ffee001}}
      instances:
        types: [m6i.large]
        capacityTypes: [on-demand]
        arch: [amd64]
      taints: [{{key: {POOL}, value: \"true\", effect: NoSchedule}}]
      budget: {{perHour: \"{budget}\"}}
      disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}}
      kubelet:
        maxPods: 110
"
        ));
        spec
    }
}

fn deployment(name: &str, pool: &str, replicas: i32, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": pool},
                    "tolerations": [{"key": pool, "operator": "Exists"}],
                    "containers": [{
                        "name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu}},
                    }],
                },
            },
        },
    })
}

fn pods_of(lab: &Lab, app: &str) -> (usize, usize) {
    let pods: Vec<_> = lab
        .pods("default")
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == app)
        })
        .collect();
    let running = pods.iter().filter(|p| pod_available(p)).count();
    (running, pods.len() - running)
}

fn initialized(lab: &Lab, pool: &str) -> usize {
    claims_of(lab, pool)
        .iter()
        .filter(|nc| is_true(nc, "Initialized"))
        .count()
}

fn limit(lab: &Lab, pool: &str) -> Option<String> {
    let pools = lab.dynamic("karpenter.sh", "v1", "NodePool");
    let np = lab.rt.block_on(pools.get(pool)).ok()?;
    np.data["spec"]["limits"]["cpu"].as_str().map(str::to_owned)
}

#[test]
fn a_budget_admits_two_nodes_and_pending_pods_say_so_until_it_is_raised() {
    let Some(mut lab) = Lab::require("spend budgets") else {
        return;
    };
    let (spec, bundle) = lab.render(spec_edit("0.20"));
    assert!(bundle.join("rotator/budget.yaml").exists());

    // plan first: the split the budget predicts.
    let four = lab
        .state()
        .join(format!("four-{}.json", std::process::id()));
    std::fs::write(&four, deployment("spend", POOL, 4, "1500m").to_string()).unwrap();
    let planned = lab.cli_output(&[
        "plan",
        "-f",
        spec.to_str().unwrap(),
        "-w",
        four.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let plan: Value = serde_json::from_slice(&planned.stdout).expect("plan -o json");
    let planned_claims = plan["nodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["nodePool"] == POOL)
        .count();
    let planned_budget_pending = plan["pending"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["reason"]
                .as_str()
                .unwrap_or("")
                .contains("budget: nodepool budget-lab's")
        })
        .count();
    assert_eq!((planned_claims, planned_budget_pending), (2, 2), "{plan}");
    live("   plan: 2 NodeClaims, 2 pods Pending for the budget");

    lab.deploy(&spec, &bundle);
    // The controller writes the limit; until it has, the launch policy holds the pool.
    let written = lab.wait(
        "the budget controller wrote the pool's limit",
        2 * MIN,
        |l| limit(l, POOL),
    );
    assert_eq!(written, "4166m", "$0.20/h at $0.048 per cpu-hour");
    let deployments: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    lab.server_side_apply(
        &deployments,
        "spend",
        &deployment("spend", POOL, 4, "1500m"),
    );
    lab.wait(
        "two NodeClaims Initialized, two pods Running",
        5 * MIN,
        |l| (initialized(l, POOL) == 2 && pods_of(l, "spend") == (2, 2)).then_some(()),
    );
    lab.never("a third NodeClaim of the budgeted pool", MIN, |l| {
        let n = claims_of(l, POOL).len();
        (n > 2).then_some(n)
    });
    assert_eq!(pods_of(&lab, "spend"), (2, 2), "two pods still Pending");

    // Why they wait: an Event on the NodePool naming the budget, the spend and the next node.
    let events: Api<Event> = Api::namespaced(lab.client.clone(), "default");
    let exhausted = lab.wait("a BudgetExhausted Event on the NodePool", MIN, |l| {
        let list =
            l.rt.block_on(events.list(&ListParams::default().fields(&format!(
                "involvedObject.name={POOL},reason=BudgetExhausted"
            ))))
            .ok()?;
        list.items.into_iter().find_map(|e| e.message)
    });
    assert!(
        exhausted.contains("spends $0.1920/h of its budget $0.2000/h")
            && exhausted.contains("m6i.large on-demand, $0.0960/h"),
        "{exhausted}"
    );

    // top: the pool at its budget.
    let top: Value =
        serde_json::from_slice(&lab.cli(&["top", "--once", "-o", "json"]).stdout).unwrap();
    let row = top["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == POOL)
        .cloned()
        .unwrap_or_else(|| panic!("top shows no {POOL}: {top}"));
    assert_eq!(row["budget"]["spendPerHour"], 0.192, "{row}");
    assert_eq!(row["budget"]["perHour"], 0.2, "{row}");
    assert_eq!(row["budget"]["atBudget"], true, "{row}");
    live("   observed: 2 NodeClaims, 2 pods Pending (plan said the same); top at budget");

    // Raise the budget: the spec, rendered and applied again.
    let (raised, _) = lab.render(spec_edit("0.40"));
    lab.cli(&[
        "apply",
        raised.to_str().unwrap(),
        "--mgmt-kubeconfig",
        &lab.var("KUBECONFIG"),
        "--skip-helm",
    ]);
    lab.wait(
        "four NodeClaims Initialized, four pods Running",
        5 * MIN,
        |l| (initialized(l, POOL) == 4 && pods_of(l, "spend") == (4, 0)).then_some(()),
    );
    assert_eq!(limit(&lab, POOL).as_deref(), Some("8333m"));

    assert_no_orphan_no_duplicate(&lab);
    lab.print_phases();
}

/// Under its budget a pool still consolidates by replacement: a 3-cpu pod needs an m6i.xlarge
/// ($0.192/h of the pool's $0.40/h); once it asks for 1 cpu, Karpenter replaces the xlarge with
/// an m6i.large, within the limit the budget controller wrote (8333m: the replacement's 2 cpu
/// fit beside the xlarge's 4).
#[test]
fn a_pool_under_its_budget_still_consolidates_by_replacement() {
    let Some(mut lab) = Lab::require("spend budgets: consolidation under a budget") else {
        return;
    };
    let pool = "budget-shrink";
    let (spec, bundle) = lab.render(|mut spec: String| {
        spec.push_str(&format!(
            "    - name: {pool}
      type: cpu
      nodeClass: kubean-aws-shrink
      ami: {{id: ami-0c0ffee0c0ffee001}}
      instances:
        types: [m6i.large, m6i.xlarge]
        capacityTypes: [on-demand]
        arch: [amd64]
      taints: [{{key: {pool}, value: \"true\", effect: NoSchedule}}]
      budget: {{perHour: \"0.40\"}}
      disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}}
      kubelet:
        maxPods: 110
"
        ));
        spec
    });
    lab.deploy(&spec, &bundle);
    lab.wait(
        "the budget controller wrote the pool's limit",
        2 * MIN,
        |l| limit(l, pool),
    );
    let deployments: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    lab.server_side_apply(&deployments, "shrink", &deployment("shrink", pool, 1, "3"));
    lab.wait("an m6i.xlarge for the 3-cpu pod", 5 * MIN, |l| {
        let claims = claims_of(l, pool);
        (claims.len() == 1 && is_true(&claims[0], "Initialized") && pods_of(l, "shrink") == (1, 0))
            .then_some(())
    });
    assert_eq!(limit(&lab, pool).as_deref(), Some("8333m"));
    lab.server_side_apply(&deployments, "shrink", &deployment("shrink", pool, 1, "1"));
    lab.wait(
        "consolidation replaced the xlarge with an m6i.large",
        6 * MIN,
        |l| {
            let claims = claims_of(l, pool);
            let types: Vec<String> = claims
                .iter()
                .filter_map(|nc| {
                    nc.metadata
                        .labels
                        .as_ref()?
                        .get("node.kubernetes.io/instance-type")
                        .cloned()
                })
                .collect();
            (types == ["m6i.large"]
                && is_true(&claims[0], "Initialized")
                && pods_of(l, "shrink") == (1, 0))
                .then_some(())
        },
    );
    assert_no_orphan_no_duplicate(&lab);
    lab.print_phases();
}

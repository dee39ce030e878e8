//! `plan --disrupt` behaviour on small cluster states: each test changes one setting of
//! fixtures/disrupt/cluster.yaml and checks the controller's decision. Upstream facts quoted
//! are from kubernetes-sigs/karpenter v1.14.0 `pkg/controllers/disruption`.

use kk_sim::disrupt::{self, Options, Report, clock};
use kk_sim::{LoadOptions, SourceFile};
use serde_json::{Value, json};

const FIXTURE: &str = include_str!("../../../../fixtures/disrupt/cluster.yaml");

pub(crate) fn docs() -> Vec<Value> {
    kk_model::yaml::load_documents(FIXTURE, kk_model::yaml::LoadLimits::default())
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .collect()
}

pub(crate) fn text(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

pub(crate) fn named<'a>(docs: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    docs.iter_mut()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name}"))
}

/// The options of a whole `plan --disrupt` at `now` (every pass until nothing is left).
pub(crate) fn whole_run(now: i64) -> Options {
    Options {
        now,
        spot_to_spot: false,
        explain: None,
        max_rounds: 1000,
        first_pass_candidates: false,
        watch: None,
        reclaim: None,
        reboot_for_repair: false,
    }
}

fn run_at(docs: &[Value], at: &str, spot_to_spot: bool) -> Report {
    let files = [SourceFile::new("cluster.yaml", text(docs))];
    let state = disrupt::load(&files, &LoadOptions::default(), None).expect("state loads");
    let opts = Options {
        spot_to_spot,
        ..whole_run(state.latest.unwrap() + clock::parse_duration(at).unwrap())
    };
    disrupt::run(&state, &opts).unwrap()
}

fn run(docs: &[Value]) -> Report {
    run_at(docs, "0s", false)
}

fn kept_reasons(r: &Report, node: &str) -> String {
    r.kept
        .iter()
        .find(|k| k.node == node)
        .map(|k| k.reasons.join("; "))
        .unwrap_or_else(|| panic!("{node} not kept: {r:#?}"))
}

fn removed(r: &Report) -> Vec<Vec<String>> {
    r.commands
        .iter()
        .map(|c| c.nodes.iter().map(|n| n.name.clone()).collect())
        .collect()
}

#[test]
fn fixture_now_consolidates_one_node_per_pass_under_the_default_10_percent_budget() {
    // The NodePool CRD default budget is nodes: 10% (rounded up): 1 of the 4 default nodes.
    let r = run(&docs());
    assert_eq!(removed(&r), vec![vec!["cpu-1"], vec!["cpu-2"]], "{r:#?}");
    assert!(
        r.commands
            .iter()
            .all(|c| c.method == "SingleNodeConsolidation"
                && c.decision == "delete"
                && c.pods_moved == 1)
    );
    assert!(kept_reasons(&r, "cpu-3").contains("do-not-disrupt"));
    assert!(kept_reasons(&r, "cpu-4").contains("pdb default/db prevents pod evictions"));
    assert!(kept_reasons(&r, "cp-1").contains("isn't managed by karpenter"));
    // consolidateAfter 2h counts from status.lastPodEventTime 23:30.
    assert!(
        kept_reasons(&r, "gpu-a").contains("consolidatable at 2026-12-01T01:30:00Z"),
        "{r:#?}"
    );
    assert!(
        (r.totals.savings_per_hour - 0.768).abs() < 1e-9,
        "{:?}",
        r.totals
    );
}

#[test]
fn idle_gpu_fleet_goes_one_node_per_pass_after_consolidate_after() {
    let r = run_at(&docs(), "2h", false);
    let gpu: Vec<_> = r
        .commands
        .iter()
        .filter(|c| c.nodes[0].node_pool == "gpu")
        .collect();
    assert_eq!(gpu.len(), 3, "{r:#?}");
    assert!(
        gpu.iter()
            .all(|c| c.method == "Emptiness" && c.nodes.len() == 1)
    );
    assert_eq!(
        gpu.iter().map(|c| c.round).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "Emptiness runs first, one node per pass under nodes: \"1\""
    );
}

#[test]
fn budget_of_100_percent_lets_multi_node_consolidation_take_both_nodes_at_once() {
    let mut d = docs();
    named(&mut d, "NodePool", "default")["spec"]["disruption"]["budgets"] =
        json!([{"nodes": "100%"}]);
    let r = run(&d);
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    assert_eq!(r.commands[0].method, "MultiNodeConsolidation");
    let mut nodes = removed(&r).remove(0);
    nodes.sort();
    assert_eq!(nodes, vec!["cpu-1", "cpu-2"]);
}

#[test]
fn budget_reason_and_schedule_limit_only_their_reason_and_window() {
    // nodes: 0 for Underutilized, active 00:00-01:00 UTC daily: nothing at 00:00, both later.
    let mut d = docs();
    named(&mut d, "NodePool", "default")["spec"]["disruption"]["budgets"] = json!([
        {"nodes": "100%"},
        {"nodes": "0", "reasons": ["Underutilized"], "schedule": "0 0 * * *", "duration": "1h"}
    ]);
    let r = run(&d);
    assert!(r.commands.is_empty(), "{r:#?}");
    assert!(
        kept_reasons(&r, "cpu-1").contains("budget of nodepool default exhausted"),
        "{r:#?}"
    );
    let r = run_at(&d, "1h", false);
    assert_eq!(r.totals.nodes_removed, 2, "{r:#?}");
}

#[test]
fn when_empty_never_consolidates_busy_nodes() {
    let mut d = docs();
    named(&mut d, "NodePool", "default")["spec"]["disruption"]["consolidationPolicy"] =
        json!("WhenEmpty");
    let r = run(&d);
    assert!(r.commands.is_empty(), "{r:#?}");
    assert!(
        kept_reasons(&r, "cpu-1")
            .contains("has consolidation policy WhenEmpty, but node is not empty")
    );
}

#[test]
fn consolidate_after_never_disables_consolidation() {
    let mut d = docs();
    named(&mut d, "NodePool", "default")["spec"]["disruption"]["consolidateAfter"] = json!("Never");
    let r = run(&d);
    assert!(r.commands.is_empty());
    assert!(kept_reasons(&r, "cpu-1").contains("has consolidation disabled"));
}

#[test]
fn do_not_disrupt_on_the_node_blocks_it() {
    let mut d = docs();
    named(&mut d, "Node", "cpu-1")["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "true"});
    let r = run(&d);
    assert_eq!(removed(&r), vec![vec!["cpu-2"]]);
    assert!(
        kept_reasons(&r, "cpu-1")
            .contains("blocked through the \"karpenter.sh/do-not-disrupt\" annotation")
    );
}

#[test]
fn do_not_disrupt_as_a_duration_runs_out() {
    // Karpenter v1.14 also accepts a duration: protected while the pod is younger than it.
    let mut d = docs();
    named(&mut d, "Pod", "batch-0")["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "48h"});
    let r = run(&d); // the pod started 24h before now
    assert!(kept_reasons(&r, "cpu-3").contains("do-not-disrupt"));
    let r = run_at(&d, "25h", false);
    assert!(!r.kept.iter().any(|k| k.node == "cpu-3"), "{r:#?}");
}

#[test]
fn pods_that_cannot_reschedule_block_consolidation() {
    // web pods ask for 7 CPUs: nowhere else has room, and a new node is not cheaper.
    let mut d = docs();
    for p in ["web-cpu-1", "web-cpu-2"] {
        named(&mut d, "Pod", p)["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("7");
    }
    // Only m5 sizes: m5.2xlarge is already the cheapest that fits 7 CPUs.
    named(&mut d, "NodePool", "default")["spec"]["template"]["spec"]["requirements"][0] =
        json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]});
    let r = run(&d);
    assert!(r.commands.is_empty(), "{r:#?}");
    let why = kept_reasons(&r, "cpu-1");
    assert!(why.contains("can't replace with a cheaper node"), "{why}");
}

#[test]
fn an_underused_big_node_is_replaced_by_a_cheaper_one() {
    // Only cpu-1 exists in the default pool; its pod fits a much smaller type.
    let mut d: Vec<Value> = docs()
        .into_iter()
        .filter(|v| {
            let n = v["metadata"]["name"].as_str().unwrap_or("");
            !matches!(
                n,
                "cpu-2" | "web-cpu-2" | "cpu-3" | "batch-0" | "cpu-4" | "db-0" | "cp-1" | "probe"
            )
        })
        .collect();
    named(&mut d, "Pod", "web-cpu-1")["metadata"]["creationTimestamp"] =
        json!("2026-12-01T00:00:00Z");
    let r = run(&d);
    let c = r
        .commands
        .iter()
        .find(|c| c.nodes[0].name == "cpu-1")
        .expect("cpu-1 replaced");
    assert_eq!(c.decision, "replace", "{r:#?}");
    assert_eq!(c.method, "SingleNodeConsolidation");
    assert_eq!(c.replacements.len(), 1);
    assert!(c.price_per_hour_after < c.price_per_hour_before);
    assert_eq!(c.replacements[0].pods, vec!["default/web-cpu-1"]);
    assert_eq!(c.replacements[0].capacity_type, "on-demand");
}

#[test]
fn spot_to_spot_is_off_by_default() {
    let mut d = docs();
    named(&mut d, "NodePool", "default")["spec"]["template"]["spec"]["requirements"][2]["values"] =
        json!(["spot"]);
    for n in ["cpu-1", "cpu-2", "cpu-3", "cpu-4"] {
        named(&mut d, "Node", n)["metadata"]["labels"]["karpenter.sh/capacity-type"] =
            json!("spot");
    }
    // Only cpu-1 may go, and its pod has no room elsewhere: it needs a new (spot) node.
    named(&mut d, "Pod", "web-cpu-2")["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "true"});
    for n in ["cpu-2", "cpu-3", "cpu-4", "cp-1"] {
        named(&mut d, "Node", n)["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]);
    }
    let r = run(&d);
    assert!(r.commands.is_empty(), "{r:#?}");
    assert!(kept_reasons(&r, "cpu-1").contains("SpotToSpotConsolidation is disabled"));
    let r = run_at(&d, "0s", true);
    let c = r.commands.first().expect("spot-to-spot replaces cpu-1");
    assert_eq!(c.decision, "replace", "{r:#?}");
    assert_eq!(c.replacements[0].capacity_type, "spot");
    // A single-node spot-to-spot replacement keeps the 15 cheapest options
    // (MinInstanceTypesForSpotToSpotConsolidation, consolidation.go).
    assert_eq!(c.replacements[0].instance_type_options.len(), 15);
    assert!(c.price_per_hour_after < c.price_per_hour_before);
}

#[test]
fn balanced_policy_rejects_a_move_that_saves_little_for_much_disruption() {
    // One busy pod with a high priority makes the move costly; the savings fraction is small.
    let mut d = docs();
    let pool = named(&mut d, "NodePool", "default");
    pool["spec"]["disruption"]["consolidationPolicy"] = json!("Balanced");
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "100%"}]);
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "1"}]);
    // Three high-priority pods on cpu-1 (eviction cost 1 + priority/2^25, clamped at 10):
    // removing it saves 1/3 of the pool's $/h for ~84% of its disruption cost: score < 1/2.
    let mut extra = Vec::new();
    for i in 0..3 {
        let mut p = named(&mut d, "Pod", "web-cpu-1").clone();
        p["metadata"]["name"] = json!(format!("vip-{i}"));
        p["spec"]["priority"] = json!(1_000_000_000);
        extra.push(p);
    }
    d.extend(extra);
    // cpu-2 stays (its pod may not be disrupted), so the pool's totals stay as they are.
    named(&mut d, "Pod", "web-cpu-2")["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "true"});
    let r = run(&d);
    assert!(r.commands.is_empty(), "{r:#?}");
    assert!(kept_reasons(&r, "cpu-1").contains("Balanced"), "{r:#?}");
    // The same state under WhenEmptyOrUnderutilized removes cpu-1.
    named(&mut d, "NodePool", "default")["spec"]["disruption"]["consolidationPolicy"] =
        json!("WhenEmptyOrUnderutilized");
    assert_eq!(removed(&run(&d)), vec![vec!["cpu-1"]]);
}

#[test]
fn drifted_node_is_replaced_even_when_a_pdb_blocks_under_termination_grace() {
    let mut d = docs();
    let claim = named(&mut d, "NodeClaim", "claim-gpu-a");
    claim["status"]["conditions"].as_array_mut().unwrap().push(
        json!({"type": "Drifted", "status": "True", "lastTransitionTime": "2026-11-30T12:00:00Z"}),
    );
    let r = run(&d);
    let c = r.commands.first().expect("drift first");
    assert_eq!(c.method, "Drift", "{r:#?}");
    assert_eq!(c.nodes[0].name, "gpu-a");
    // Empty apart from its DaemonSet pod: no replacement needed.
    assert_eq!(c.decision, "delete");
}

#[test]
fn expiration_is_forceful() {
    // expireAfter 720h from 2026-11-30: at +721h every managed node has expired, do-not-disrupt
    // and the PDB notwithstanding.
    let r = run_at(&docs(), "721h", false);
    let c = &r.commands[0];
    assert_eq!((c.round, c.method.as_str()), (0, "Expiration"));
    assert_eq!(c.nodes.len(), 7, "{r:#?}");
    assert!(r.pending.is_empty(), "{r:#?}");
}

#[test]
fn same_state_same_bytes() {
    let a = run_at(&docs(), "2h", false).to_json();
    let b = run_at(&docs(), "2h", false).to_json();
    assert_eq!(a, b);
    assert!(a.contains("\"method\": \"Emptiness\""));
}

#[test]
fn bad_input_is_one_located_error() {
    let mut d = docs();
    named(&mut d, "NodePool", "gpu")["spec"]["disruption"]["consolidateAfter"] = json!("2 hours");
    let files = [SourceFile::new("cluster.yaml", text(&d))];
    let errors = disrupt::load(&files, &LoadOptions::default(), None).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = errors[0].to_string();
    assert!(e.starts_with("cluster.yaml:"), "{e}");
    assert!(e.contains("spec.disruption.consolidateAfter"), "{e}");
    let mut d = docs();
    named(&mut d, "NodePool", "gpu")["spec"]["disruption"]["budgets"] =
        json!([{"nodes": "1", "schedule": "0 25 * * *", "duration": "1h"}]);
    let files = [SourceFile::new("cluster.yaml", text(&d))];
    let e = disrupt::load(&files, &LoadOptions::default(), None).unwrap_err()[0].to_string();
    assert!(
        e.contains("budgets[0].schedule") && e.contains("hour"),
        "{e}"
    );
}

/// A JSON dump is read by the JSON parser without positions; an error in it is still placed
/// at its line (the file is read again with them).
#[test]
fn an_error_in_a_json_dump_names_its_line() {
    let mut d = docs();
    named(&mut d, "NodePool", "gpu")["spec"]["disruption"]["consolidateAfter"] = json!("2 hours");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": d});
    let dump = serde_json::to_string_pretty(&list).unwrap();
    let line = 1 + dump
        .lines()
        .position(|l| l.contains("\"2 hours\""))
        .expect("the bad value is written");
    let files = [SourceFile::new("cluster.json", dump)];
    let errors = disrupt::load(&files, &LoadOptions::default(), None).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = errors[0].to_string();
    assert!(
        e.starts_with(&format!("cluster.json:{line}:")),
        "line {line}: {e}"
    );
    assert!(e.contains("consolidateAfter"), "{e}");
    // The same dump without the error reads, and decides as the YAML text does.
    let good = json!({"apiVersion": "v1", "kind": "List", "items": docs()});
    let files = [SourceFile::new("cluster.json", good.to_string())];
    let from_json = disrupt::load(&files, &LoadOptions::default(), None).expect("reads");
    let files = [SourceFile::new("cluster.yaml", text(&docs()))];
    let from_yaml = disrupt::load(&files, &LoadOptions::default(), None).expect("reads");
    assert_eq!(from_json.nodes, from_yaml.nodes);
    assert_eq!(from_json.input.bound.len(), from_yaml.input.bound.len());
}

#[test]
fn a_moved_pod_lands_on_the_node_the_scheduler_chose_when_an_uninitialized_node_sorts_first() {
    // The scheduler tries initialized nodes first, then the rest, each by name; a node still
    // joining whose name sorts first must not shift which node a moved pod is said to land on.
    let mut d = docs();
    d.push(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "a-joining",
            "labels": {
                "kubernetes.io/hostname": "a-joining",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": "us-east-1a",
                "karpenter.sh/nodepool": "default",
                "karpenter.sh/registered": "true",
                "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m5.2xlarge"
            },
            "creationTimestamp": "2026-11-30T00:00:00Z"
        },
        "spec": {"providerID": "aws:///us-east-1a/i-a-joining"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "58"},
            "allocatable": {"cpu": "7910m", "memory": "32Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }));
    let r = run(&d);
    let first = r.commands.first().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(removed(&r)[0], vec!["cpu-1"], "{r:#?}");
    assert!(
        first
            .moved_to_existing
            .iter()
            .all(|m| m.node != "a-joining"),
        "{first:#?}"
    );
}

/// A sick GPU node (`AcceleratedHardwareReady=False`, a fatal XID) is reported with the time
/// Karpenter's node repair replaces it and the pods it evicts; with a second sick node in the
/// same pool of three, the 20 % breaker blocks both.
#[test]
fn node_repair_is_reported_due_after_its_toleration_unless_the_breaker_holds() {
    let sick = |docs: &mut Vec<Value>, node: &str, reason: &str, since: &str| {
        let n = named(docs, "Node", node);
        let conditions = n["status"]["conditions"].as_array_mut().unwrap();
        conditions.push(json!({
            "type": "AcceleratedHardwareReady", "status": "False", "reason": reason,
            "lastTransitionTime": since,
        }));
    };
    let mut d = docs();
    let start = clock::format_time(
        disrupt::load(
            &[SourceFile::new("cluster.yaml", text(&d))],
            &LoadOptions::default(),
            None,
        )
        .unwrap()
        .latest
        .unwrap(),
    );
    sick(&mut d, "gpu-a", "NvidiaXID79Error", &start);
    let early = run_at(&d, "5m", false);
    let repair = early
        .repairs
        .iter()
        .find(|r| r.node == "gpu-a")
        .expect("gpu-a reported");
    assert_eq!(
        (
            repair.action.as_str(),
            repair.due_now,
            repair.blocked.as_deref()
        ),
        ("replace", false, None)
    );
    // gpu-a runs only its DaemonSet pod, which a drain leaves.
    assert!(repair.evicts.is_empty(), "{repair:?}");
    let due = run_at(&d, "11m", false);
    assert!(
        due.repairs.iter().any(|r| r.node == "gpu-a" && r.due_now),
        "{:?}",
        due.repairs
    );
    assert!(
        due.render_table().contains("Node repair"),
        "{}",
        due.render_table()
    );

    sick(&mut d, "gpu-b", "NvidiaXID48Error", &start);
    let blocked = run_at(&d, "11m", false);
    assert_eq!(blocked.repairs.len(), 2);
    for r in &blocked.repairs {
        assert!(!r.due_now, "{r:?}");
        assert!(
            r.blocked
                .as_deref()
                .is_some_and(|b| b.contains("2 of 3 nodes unhealthy")),
            "{r:?}"
        );
    }
}

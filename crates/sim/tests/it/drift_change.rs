//! `plan --disrupt` with a change not applied yet (fixtures/disrupt/drift/): which nodes the new
//! EC2NodeClass or NodePool drifts, for which of Karpenter's reasons, and how the disruption
//! engine then replaces them (empty first, then by drift time, under the Drifted budget).

use kk_sim::disrupt::{self, Report, clock};
use kk_sim::{LoadOptions, SourceFile};
use serde_json::Value;

use crate::disrupt::whole_run;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/disrupt/drift/");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}{name}")).unwrap()
}

/// The fixture's state with `edit` applied to its documents, and the change files.
fn simulate(edit: impl FnOnce(&mut Vec<Value>), change: &[&str]) -> Report {
    let mut docs: Vec<Value> =
        kk_model::yaml::load_documents(&read("cluster.yaml"), Default::default())
            .unwrap()
            .into_iter()
            .map(|d| d.value)
            .collect();
    edit(&mut docs);
    let text = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    let mut state = disrupt::load(
        &[SourceFile::new("cluster.yaml", text)],
        &LoadOptions::default(),
        None,
    )
    .expect("state loads");
    let files: Vec<SourceFile> = change
        .iter()
        .map(|f| SourceFile::new(*f, read(f)))
        .collect();
    let proposed = disrupt::load(
        &files,
        &LoadOptions::default(),
        Some(state.input.catalog.clone()),
    )
    .expect("change loads");
    let now = state.latest.unwrap();
    let drift = disrupt::drift::apply(&mut state, &proposed, now);
    let mut report = disrupt::run(&state, &whole_run(now)).unwrap();
    report.drift = Some(drift);
    report
}

fn reasons(r: &Report) -> Vec<(String, String)> {
    r.drift
        .as_ref()
        .unwrap()
        .nodes
        .iter()
        .map(|n| (n.node.clone(), n.reason.clone()))
        .collect()
}

fn all(reason: &str) -> Vec<(String, String)> {
    (1..=5)
        .map(|i| (format!("web-{i}"), reason.to_owned()))
        .collect()
}

/// Nodes in the order the Drift commands take them, one per command.
fn drift_order(r: &Report) -> Vec<String> {
    r.commands
        .iter()
        .filter(|c| c.method == "Drift")
        .map(|c| {
            assert_eq!(c.nodes.len(), 1, "one drifted node per command");
            c.nodes[0].name.clone()
        })
        .collect()
}

#[test]
fn a_new_ami_id_drifts_every_node_empty_first_one_at_a_time() {
    let r = simulate(|_| {}, &["nodeclass-ami.yaml"]);
    assert_eq!(reasons(&r), all("AMIDrift"));
    let d = r.drift.as_ref().unwrap();
    assert_eq!(d.pools[0].at_once, 1);
    assert_eq!(d.pools[0].drifted, 5);
    assert_eq!(d.order.len(), 2);
    assert!(d.order[0].empty);
    assert_eq!(d.order[0].nodes, ["web-5"]);
    assert_eq!(
        d.order[1].nodes.len(),
        4,
        "one tie: the order among them is open"
    );
    let order = drift_order(&r);
    assert_eq!(order.len(), 5, "{r:#?}");
    assert_eq!(order[0], "web-5", "the empty node goes first");
    // Four pods on m6i.large nodes: the replacements pack them on fewer new nodes.
    assert_eq!(r.totals.nodes_removed, 5);
    assert_eq!(r.totals.replacements, 2);
    assert!(
        d.changes[0].contains("ami-0c0ffee0c0ffee004"),
        "{:?}",
        d.changes
    );
}

#[test]
fn a_class_written_without_defaults_or_with_unhashed_fields_drifts_nothing() {
    let r = simulate(|_| {}, &["nodeclass-same.yaml"]);
    assert!(reasons(&r).is_empty(), "{r:#?}");
    assert!(r.commands.is_empty());
    assert_eq!(r.drift.as_ref().unwrap().unchanged.len(), 5);
}

#[test]
fn budgets_and_weight_are_not_hashed_but_apply_at_once() {
    let r = simulate(|_| {}, &["nodepool-budget.yaml"]);
    assert!(reasons(&r).is_empty(), "{r:#?}");
    let r = simulate(|_| {}, &["nodepool-budget.yaml", "nodeclass-ami.yaml"]);
    assert_eq!(r.drift.as_ref().unwrap().pools[0].at_once, 2);
}

#[test]
fn user_data_taints_and_requirements_drift_for_their_own_reasons() {
    assert_eq!(
        reasons(&simulate(|_| {}, &["nodeclass-userdata.yaml"])),
        all("NodeClassDrift")
    );
    let r = simulate(|_| {}, &["nodepool-taint.yaml"]);
    assert_eq!(reasons(&r), all("NodePoolDrifted"));
    assert!(
        r.drift.as_ref().unwrap().nodes[0]
            .detail
            .contains("spec.template.spec.taints")
    );
    let r = simulate(|_| {}, &["nodepool-requirements.yaml"]);
    assert_eq!(reasons(&r), all("RequirementsDrifted"));
    // Replacements come from the new NodePool: m7i only.
    let types: Vec<&str> = r
        .commands
        .iter()
        .flat_map(|c| &c.replacements)
        .map(|x| x.instance_type.as_str())
        .collect();
    assert!(
        !types.is_empty() && types.iter().all(|t| t.starts_with("m7i")),
        "{types:?}"
    );
}

#[test]
fn a_node_drifted_before_keeps_its_time_and_goes_first_among_busy_ones() {
    let r = simulate(
        |docs| {
            let claim = docs
                .iter_mut()
                .find(|d| d["kind"] == "NodeClaim" && d["metadata"]["name"] == "claim-web-3")
                .unwrap();
            claim["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"type": "Drifted", "status": "True",
                    "reason": "AMIDrift", "lastTransitionTime": "2026-11-30T12:00:00Z"}));
        },
        &["nodeclass-ami.yaml"],
    );
    let d = r.drift.as_ref().unwrap();
    let web3 = d.nodes.iter().find(|n| n.node == "web-3").unwrap();
    assert!(web3.already_drifted);
    let groups: Vec<&Vec<String>> = d.order.iter().map(|g| &g.nodes).collect();
    assert_eq!(groups[0], &["web-5"]);
    assert_eq!(groups[1], &["web-3"]);
    assert_eq!(groups[2].len(), 3);
    assert_eq!(&drift_order(&r)[..2], ["web-5", "web-3"]);
}

#[test]
fn a_pdb_allowing_no_eviction_holds_every_busy_node() {
    let r = simulate(
        |docs| {
            let pdb = docs
                .iter_mut()
                .find(|d| d["kind"] == "PodDisruptionBudget")
                .unwrap();
            pdb["spec"]["minAvailable"] = 4.into();
        },
        &["nodeclass-ami.yaml"],
    );
    assert_eq!(reasons(&r), all("AMIDrift"));
    assert_eq!(drift_order(&r), ["web-5"], "only the empty node can go");
    let kept = r.kept.iter().find(|k| k.node == "web-1").unwrap();
    assert!(
        kept.reasons
            .iter()
            .any(|x| x.contains("pdb web/web prevents pod evictions")),
        "{kept:?}"
    );
}

#[test]
fn selectors_plan_cannot_resolve_offline_are_said_not_checked() {
    let class = read("nodeclass-ami.yaml").replace(
        r#"[{"id": "ami-0c0ffee0c0ffee004"}]"#,
        r#"[{"tags": {"release": "next"}}]"#,
    );
    assert!(class.contains("release"));
    let mut state = disrupt::load(
        &[SourceFile::new("cluster.yaml", read("cluster.yaml"))],
        &LoadOptions::default(),
        None,
    )
    .unwrap();
    let proposed = disrupt::load(
        &[SourceFile::new("class.yaml", class)],
        &LoadOptions::default(),
        Some(state.input.catalog.clone()),
    )
    .unwrap();
    let now = clock::parse_time("2026-12-01T00:00:00Z").unwrap();
    let d = disrupt::drift::apply(&mut state, &proposed, now);
    assert!(d.nodes.is_empty());
    assert!(
        state
            .warnings
            .iter()
            .any(|w| w.contains("AMI drift is not predicted offline")),
        "{:?}",
        state.warnings
    );
}

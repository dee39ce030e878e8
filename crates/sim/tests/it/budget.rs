//! Spend budgets in `plan` (issue #51): a budget admits what it can pay for, and the pods past
//! it wait with a reason that names the budget.

use std::path::PathBuf;

use kk_sim::{LoadOptions, SourceFile, load, solve};

fn fixture(name: &str) -> SourceFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sim")
        .join(name);
    SourceFile::new(
        format!("fixtures/sim/{name}"),
        std::fs::read_to_string(&path).unwrap(),
    )
}

#[test]
fn a_budget_of_twenty_cents_launches_two_nodes_and_the_rest_wait_for_it() {
    let input = load(
        &[fixture("budget-pools.yaml")],
        &[fixture("budget-four.yaml")],
        &[],
        &LoadOptions::default(),
    )
    .unwrap();
    let plan = solve(&input);
    let table = plan.render_table();
    assert_eq!(plan.node_claims.len(), 2, "{table}");
    assert!(
        plan.node_claims
            .iter()
            .all(|c| c.instance_type == "m6i.large")
    );
    assert_eq!(plan.pending.len(), 2, "{table}");
    for p in &plan.pending {
        assert_eq!(
            p.reason,
            "budget: nodepool budget-lab's $0.2000/h buys cpu=4166m at its dearest offering (m6i.large on-demand, $0.0960/h for cpu=2), $0.0000/h of it spent on its nodes (nodepool budget-lab limit cpu=4166m exceeded)",
        );
    }
    assert_eq!(plan.budgets.len(), 1);
    let b = &plan.budgets[0];
    assert_eq!(b.limit.as_deref(), Some("4166m"));
    assert_eq!(b.planned_per_hour, 0.192);
    assert_eq!(b.pending, 2);
    assert!(
        table.contains("budget of nodepool budget-lab: $0.0000/h now, $0.1920/h planned, of $0.2000/h (cpu: limit 4166m); 2 pods wait for it"),
        "{table}"
    );
}

#[test]
fn a_bad_budget_annotation_is_one_located_error() {
    let pools = fixture("budget-pools.yaml");
    let bad = SourceFile::new(
        pools.name.clone(),
        pools.text.replace("\"0.20\"", "\"twenty cents\""),
    );
    let errors = load(&[bad], &[], &[], &LoadOptions::default()).unwrap_err();
    assert_eq!(errors.len(), 1);
    let text = errors[0].to_string();
    assert!(
        text.contains("metadata.annotations[kubean-karpenter.io/budget-per-hour]")
            && text.contains("\"twenty cents\" is not US dollars per hour"),
        "{text}"
    );
}

/// `plan --disrupt` on the idle GPU fleet with a budget that its four g5.xlarge ($1.006/h
/// each) nearly spend: consolidation of the emptied nodes frees room under it.
#[test]
fn consolidation_frees_room_under_a_budget() {
    use kk_sim::disrupt::{self, clock};
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/disrupt/gpu-idle.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "metadata: {name: gpu}",
        "metadata: {name: gpu, annotations: {kubean-karpenter.io/budget-per-hour: \"4.10\", kubean-karpenter.io/budget-resource: nvidia.com/gpu}}",
        1,
    );
    let files = [SourceFile::new("gpu-idle.yaml", text)];
    let state = disrupt::load(&files, &LoadOptions::default(), None).unwrap();
    let opts =
        crate::disrupt::whole_run(state.latest.unwrap() + clock::parse_duration("3h").unwrap());
    let report = disrupt::run(&state, &opts).unwrap();
    assert_eq!(report.budgets.len(), 1);
    let b = &report.budgets[0];
    assert_eq!((b.spend_before, b.per_hour), (4.024, 4.1));
    assert_eq!(b.room_before, 0);
    assert!(b.room_after >= 1, "{b:?}");
    let table = report.render_table();
    assert!(
        table.contains("budget of nodepool gpu: $4.0240/h of $4.1000/h now (room for 0 more g6.xlarge on-demand), $0.0000/h after (room for 5): these commands free room under the budget"),
        "{table}"
    );
}

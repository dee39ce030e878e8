//! `spec.scheduler`: default topology spread constraints, checked as kube-scheduler's v1
//! configuration and Karpenter's `SCHEDULER_CONFIG` both check them, since render gives the
//! same list to both and either refusing it stops that scheduler at start-up.

use super::*;

pub(super) fn scheduler(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let Some(scheduler) = &spec.scheduler else {
        return;
    };
    let at = at.key("scheduler");
    if let Some(version) = crate::versions::SemVer::parse(&spec.karpenter.version)
        && (version.major, version.minor) < (1, 15)
    {
        p.push((
            at.clone(),
            format!(
                "Karpenter {} has no scheduler configuration (SCHEDULER_CONFIG came in 1.15): it \
                 would launch nodes without the default spread kube-scheduler then applies; \
                 upgrade karpenter.version or drop scheduler",
                spec.karpenter.version
            ),
        ));
    }
    let written: Vec<kk_karpenter::default_spread::Written<'_>> = scheduler
        .default_constraints
        .iter()
        .map(|c| kk_karpenter::default_spread::Written {
            max_skew: i64::from(c.max_skew),
            topology_key: &c.topology_key,
            when_unsatisfiable: &c.when_unsatisfiable,
            min_domains: c.min_domains.map(i64::from),
            node_affinity_policy: c.node_affinity_policy.as_deref(),
            node_taints_policy: c.node_taints_policy.as_deref(),
            has_selector: false,
            has_match_label_keys: false,
        })
        .collect();
    for problem in kk_karpenter::default_spread::problems(&written) {
        let at = at.key("defaultConstraints").index(problem.index);
        let at = match problem.field {
            "" => at,
            field => at.key(field),
        };
        p.push((at, problem.message));
    }
}

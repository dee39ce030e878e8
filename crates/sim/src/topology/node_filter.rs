//! Which nodes a topology spread counts (Karpenter's `topologynodefilter.go`): the pod's node
//! selector and required node affinity (`nodeAffinityPolicy`) and its tolerations of the
//! nodes' taints (`nodeTaintsPolicy`).

use crate::model::{
    Pod, Policy, SpreadConstraint, Taint, Toleration, term_requirements, untolerated,
};
use crate::req::Requirements;

/// Which nodes count for a spread constraint (`TopologyNodeFilter`). The default value (no
/// policies) matches every node, as upstream's zero value does for (anti-)affinity.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeFilter {
    requirements: Vec<Requirements>,
    pub(super) taint_policy: Option<Policy>,
    affinity_policy: Option<Policy>,
    tolerations: Vec<Toleration>,
}

impl NodeFilter {
    pub(super) fn for_spread(pod: &Pod, s: &SpreadConstraint) -> NodeFilter {
        let selector = Requirements::from_labels(&pod.node_selector);
        let requirements = match &pod.required_terms {
            None => vec![selector],
            Some(terms) => terms
                .iter()
                .map(|t| {
                    let mut r = selector.clone();
                    r.add_all(&term_requirements(t));
                    r
                })
                .collect(),
        };
        NodeFilter {
            requirements,
            taint_policy: Some(s.node_taints_policy),
            affinity_policy: Some(s.node_affinity_policy),
            tolerations: pod.tolerations.clone(),
        }
    }

    pub fn matches(&self, taints: &[Taint], reqs: &Requirements) -> bool {
        let affinity = self.affinity_policy != Some(Policy::Honor)
            || self.requirements.is_empty()
            || self
                .requirements
                .iter()
                .any(|r| reqs.compatible(r, false).is_ok());
        let taints_ok = self.taint_policy != Some(Policy::Honor)
            || untolerated(taints, &self.tolerations).is_none();
        affinity && taints_ok
    }
}

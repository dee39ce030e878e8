//! Default topology spread constraints (Karpenter 1.15's `SCHEDULER_CONFIG`
//! `podTopologySpread.defaultConstraints`, the list kube-scheduler applies with `defaultingType:
//! List`): the checks both schedulers make before they start, written once for the spec, the
//! plan and lint. Karpenter parses strictly and exits on any of these; kube-scheduler refuses
//! its configuration. The selector is never written: both deduce it per pod.

/// One default constraint as written, for checking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written<'a> {
    pub max_skew: i64,
    pub topology_key: &'a str,
    pub when_unsatisfiable: &'a str,
    pub min_domains: Option<i64>,
    pub node_affinity_policy: Option<&'a str>,
    pub node_taints_policy: Option<&'a str>,
    /// A `labelSelector` is written.
    pub has_selector: bool,
    /// A non-empty `matchLabelKeys` is written.
    pub has_match_label_keys: bool,
}

/// What is wrong with one constraint of a list: its index, the field (`maxSkew`; empty for the
/// constraint as a whole) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub index: usize,
    pub field: &'static str,
    pub message: String,
}

/// A label key: an optional DNS-subdomain prefix, `/`, and a name of at most 63 characters of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

/// Every problem of `list`, in order.
pub fn problems(list: &[Written<'_>]) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut push = |index, field, message: String| {
        out.push(Problem {
            index,
            field,
            message,
        })
    };
    for (i, c) in list.iter().enumerate() {
        if c.has_selector {
            push(
                i,
                "labelSelector",
                "not allowed in a default constraint: the selector is deduced from the pod's \
                 Services and its ReplicaSet or StatefulSet"
                    .into(),
            );
        }
        if c.has_match_label_keys {
            push(
                i,
                "matchLabelKeys",
                "not allowed in a default constraint (Karpenter refuses it)".into(),
            );
        }
        if c.max_skew < 1 {
            push(i, "maxSkew", "must be at least 1".into());
        }
        if !is_label_key(c.topology_key) {
            push(
                i,
                "topologyKey",
                format!("{:?} is not a label key", c.topology_key),
            );
        }
        let when = c.when_unsatisfiable;
        if !matches!(when, "DoNotSchedule" | "ScheduleAnyway") {
            push(
                i,
                "whenUnsatisfiable",
                format!("{when:?} is not DoNotSchedule or ScheduleAnyway"),
            );
        }
        if let Some(min) = c.min_domains {
            if min < 1 {
                push(i, "minDomains", "must be at least 1".into());
            } else if when != "DoNotSchedule" {
                push(
                    i,
                    "minDomains",
                    "only with whenUnsatisfiable: DoNotSchedule".into(),
                );
            }
        }
        for (field, value) in [
            ("nodeAffinityPolicy", c.node_affinity_policy),
            ("nodeTaintsPolicy", c.node_taints_policy),
        ] {
            if let Some(v) = value
                && !matches!(v, "Honor" | "Ignore")
            {
                push(i, field, format!("{v:?} is not Honor or Ignore"));
            }
        }
        if list[..i]
            .iter()
            .any(|o| o.topology_key == c.topology_key && o.when_unsatisfiable == when)
        {
            push(
                i,
                "",
                format!(
                    "a second constraint on {} with whenUnsatisfiable {when}: both schedulers \
                     refuse a repeated pair",
                    c.topology_key
                ),
            );
        }
    }
    out
}

/// The constraints in a canonical order (topology key, then whenUnsatisfiable), for comparing
/// what two components apply: the order in which they are written changes nothing.
pub fn canonical<'a>(list: &[Written<'a>]) -> Vec<Written<'a>> {
    let mut out = list.to_vec();
    out.sort_by(|a, b| {
        (a.topology_key, a.when_unsatisfiable).cmp(&(b.topology_key, b.when_unsatisfiable))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(when: &'static str) -> Written<'static> {
        Written {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone",
            when_unsatisfiable: when,
            min_domains: None,
            node_affinity_policy: None,
            node_taints_policy: None,
            has_selector: false,
            has_match_label_keys: false,
        }
    }

    #[test]
    fn each_rule_fires_on_its_field_and_a_valid_list_passes() {
        assert!(problems(&[zone("DoNotSchedule"), zone("ScheduleAnyway")]).is_empty());
        let bad = Written {
            max_skew: 0,
            topology_key: "not a key",
            when_unsatisfiable: "Sometimes",
            min_domains: Some(2),
            node_affinity_policy: Some("Always"),
            node_taints_policy: None,
            has_selector: true,
            has_match_label_keys: true,
        };
        let fields: Vec<&str> = problems(&[bad]).iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "labelSelector",
                "matchLabelKeys",
                "maxSkew",
                "topologyKey",
                "whenUnsatisfiable",
                "minDomains",
                "nodeAffinityPolicy"
            ]
        );
        let repeated = problems(&[zone("DoNotSchedule"), zone("DoNotSchedule")]);
        assert_eq!((repeated[0].index, repeated[0].field), (1, ""));
    }

    #[test]
    fn the_canonical_order_ignores_the_written_order() {
        let hostname = Written {
            topology_key: "kubernetes.io/hostname",
            ..zone("DoNotSchedule")
        };
        assert_eq!(
            canonical(&[zone("DoNotSchedule"), hostname]),
            canonical(&[hostname, zone("DoNotSchedule")])
        );
    }
}

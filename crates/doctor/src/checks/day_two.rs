//! Day two: AMIs pinned and current, and kubelet skew headroom before the next upgrade.
//!
//! An EC2NodeClass whose AMI selector floats (`@latest`, a `recommended` parameter, a name or
//! tag pattern) drifts every node of its pools on AWS's schedule instead of the operator's.
//! `status.amis` is what Karpenter resolved: a NodeClaim whose `status.imageID` is not among
//! them is drifted (Karpenter replaces it), and one marked `deprecated` runs an image AWS or
//! its owner is retiring. A pool whose kubelets are already three minors behind the API server
//! breaks the skew policy at the next control-plane minor.

use std::collections::BTreeMap;

use kube_core::DynamicObject;
use serde_json::Value;

use super::{check, condition, minor, pool_of};
use crate::snapshot::Snapshot;
use crate::{Check, Status};

/// Why one `amiSelectorTerms[]` entry does not pin an image, if it does not.
fn floating(term: &Value) -> Option<String> {
    if let Some(alias) = term["alias"].as_str() {
        return alias
            .ends_with("@latest")
            .then(|| format!("alias {alias} follows every AWS release"));
    }
    if let Some(parameter) = term["ssmParameter"].as_str() {
        return parameter
            .contains("/recommended/")
            .then(|| format!("ssmParameter {parameter} follows every AWS release"));
    }
    if term["id"].is_string() {
        return None;
    }
    Some(format!(
        "selector {} matches whatever image carries that name or tags next",
        serde_json::to_string(term).unwrap_or_default()
    ))
}

pub(super) fn ami_pinned(s: &Snapshot) -> Check {
    let mut c = check(
        "ami-pinned",
        "node classes pin their AMI; no Karpenter node runs a drifted or deprecated one",
    );
    let (Ok(classes), Ok(claims)) = (&s.nodeclasses, &s.nodeclaims) else {
        return c.skip("EC2NodeClasses or NodeClaims could not be listed");
    };
    let mut resolved: BTreeMap<String, &Vec<Value>> = BTreeMap::new();
    for class in classes {
        let name = class.metadata.name.clone().unwrap_or_default();
        for term in class.data["spec"]["amiSelectorTerms"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(why) = floating(term) {
                c.worse(
                    Status::Warn,
                    format!("EC2NodeClass {name}: {why}"),
                    "pin the AMI (`kubean-karpenter ami pin SPEC --pool P --release v<date>` or --id) and bump it deliberately",
                );
            }
        }
        if let Some(amis) = class.data["status"]["amis"].as_array() {
            resolved.insert(name, amis);
        }
    }
    for claim in claims {
        judge_claim(&mut c, claim, &resolved);
    }
    if c.status == Status::Ok {
        c = c.saw(format!(
            "{} EC2NodeClasses pinned, {} NodeClaims on a current AMI",
            classes.len(),
            claims.len()
        ));
    }
    c
}

fn judge_claim(c: &mut Check, claim: &DynamicObject, resolved: &BTreeMap<String, &Vec<Value>>) {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let Some(image) = claim.data["status"]["imageID"].as_str() else {
        return;
    };
    let class = claim.data["spec"]["nodeClassRef"]["name"]
        .as_str()
        .unwrap_or_default();
    let Some(amis) = resolved.get(class) else {
        return;
    };
    match amis.iter().find(|a| a["id"] == image) {
        Some(ami) if ami["deprecated"] == true => c.worse(
            Status::Warn,
            format!("NodeClaim {name} runs {image}, deprecated (EC2NodeClass {class} status.amis)"),
            "pin a current image (`kubean-karpenter ami list`, `ami pin`); the pool then rolls as drift",
        ),
        Some(_) => {}
        None => {
            let drifted = condition(claim, "Drifted")
                .filter(|d| d["status"] == "True")
                .map_or(String::from("; not marked Drifted yet"), |d| {
                    format!("; Drifted since {}", d["lastTransitionTime"].as_str().unwrap_or("?"))
                });
            c.worse(
                Status::Warn,
                format!(
                    "NodeClaim {name} runs {image}, no longer among EC2NodeClass {class}'s AMIs: \
                     drift in progress{drifted}"
                ),
                "nothing to do if the pin moved on purpose: Karpenter replaces it under the pool's Drifted budget; a PDB or do-not-disrupt pod can block it (`plan --disrupt`)",
            );
        }
    }
}

pub(super) fn kubelet_skew_headroom(s: &Snapshot) -> Check {
    let mut c = check(
        "kubelet-skew-headroom",
        "no Karpenter pool's kubelets are three minors behind (the next control-plane upgrade would break the skew)",
    );
    let Ok(server) = &s.server_version else {
        return c.skip("the API server's version could not be read");
    };
    let Some((_, server_minor)) = minor(server) else {
        return c.skip(format!("unparsable API server version {server}"));
    };
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    // Per pool, its oldest kubelet.
    let mut oldest: BTreeMap<&str, (u64, String)> = BTreeMap::new();
    for n in nodes {
        let Some(pool) = pool_of(n.metadata.labels.as_ref()) else {
            continue;
        };
        let kubelet = n
            .status
            .as_ref()
            .and_then(|st| st.node_info.as_ref())
            .map(|i| i.kubelet_version.clone())
            .unwrap_or_default();
        let Some((_, m)) = minor(&kubelet) else {
            continue;
        };
        let entry = oldest.entry(pool).or_insert((m, kubelet.clone()));
        if m < entry.0 {
            *entry = (m, kubelet);
        }
    }
    for (pool, (m, kubelet)) in &oldest {
        if server_minor >= m + 3 {
            c.worse(
                Status::Warn,
                format!(
                    "pool {pool}: kubelet {kubelet} is {} minors behind the API server {server}: no headroom for the next control-plane minor",
                    server_minor - m
                ),
                "move the pool's AMI to the control plane's minor (`kubean-karpenter upgrade plan`, `ami pin`) before the next Kubean upgrade",
            );
        }
    }
    if c.status == Status::Ok {
        c = c.saw(format!(
            "{} Karpenter pools within two minors of {server}",
            oldest.len()
        ));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floating_selectors_are_named_and_pins_are_not() {
        assert!(floating(&json!({"alias": "al2023@latest"})).is_some());
        assert!(floating(&json!({"alias": "al2023@v20260827"})).is_none());
        assert!(floating(&json!({"id": "ami-0123456789abcdef0"})).is_none());
        assert!(floating(&json!({"ssmParameter": "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/recommended/image_id"})).is_some());
        assert!(floating(&json!({"tags": {"role": "kubeadm"}})).is_some());
    }

    fn claim(image: &str, class: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": format!("c-{image}")},
            "spec": {"nodeClassRef": {"name": class}},
            "status": {"imageID": image,
                       "conditions": [{"type": "Drifted", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn claims_on_deprecated_or_unresolved_images_warn() {
        let amis = vec![
            json!({"id": "ami-new"}),
            json!({"id": "ami-old", "deprecated": true}),
        ];
        let resolved: BTreeMap<String, &Vec<Value>> = [("gpu".to_owned(), &amis)].into();
        let mut c = check("ami-pinned", "t");
        judge_claim(&mut c, &claim("ami-new", "gpu"), &resolved);
        assert_eq!(c.status, Status::Ok);
        judge_claim(&mut c, &claim("ami-old", "gpu"), &resolved);
        assert_eq!(c.status, Status::Warn);
        assert!(c.evidence[0].contains("deprecated"), "{:?}", c.evidence);
        judge_claim(&mut c, &claim("ami-gone", "gpu"), &resolved);
        assert!(
            c.evidence[1].contains("drift in progress; Drifted since 2026-12-01T10:00:00Z"),
            "{:?}",
            c.evidence
        );
    }
}

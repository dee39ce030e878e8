//! `spec.karpenter`: names that become file names, object names, CEL strings and ARNs.
//!
//! The namespace names a bundle file (`namespaces/<namespace>.yaml`) and lands in the rotator's
//! admission-policy CEL and in service-account user names.

use super::*;

pub(super) fn karpenter(p: &mut Problems, at: &FieldPath, k: &Karpenter) {
    if !DNS_LABEL.is_match(&k.namespace) {
        p.push((
            at.key("namespace"),
            format!(
                "{:?} is not a DNS label (lowercase letters, digits, '-', at most 63): it names a \
                 namespace, a bundle file and the rotator's service account",
                k.namespace
            ),
        ));
    }
    let secret = &k.credentials.secret_name;
    if !(DNS_SUBDOMAIN.is_match(secret) && secret.len() <= 253) {
        p.push((
            at.key("credentials").key("secretName"),
            format!("{secret:?} is not a Secret name (a DNS subdomain)"),
        ));
    }
    for name in k.feature_gates.keys() {
        if crate::feature_gates::find(name).is_none() {
            let known: Vec<&str> = crate::feature_gates::GATES.iter().map(|g| g.name).collect();
            p.push((
                at.key("featureGates").key(name),
                format!(
                    "{name:?} is not a feature gate of Karpenter's chart 1.15.2 (its values.yaml's keys: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    // The interruption queue's name is checked with the rest of the queue (interruption.rs).
}

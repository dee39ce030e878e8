//! Joining: the join token's store and validity, the CA hash, the cluster-info JWS, bootstrap RBAC.

use super::check;
use super::secs;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::snapshot::Snapshot;
use std::time::Duration;

/// The token the nodes join with: the store's, or the static one.
fn join_token_id(s: &Snapshot, f: &Facts) -> Option<String> {
    match &s.store {
        Some(Ok(Some(cfg))) => Some(cfg.token_id.clone()),
        Some(_) => None,
        None => f.static_token_id.clone(),
    }
}

/// The least lifetime a stored token has while the rendered rotator keeps up: it replaces a
/// token with ttl × (1 − rotate-at) left and looks every tick; a minute more of slack.
fn rotation_due_left() -> Option<Duration> {
    use kk_render::rotator::{ROTATE_AT, TICK, TTL};
    let ttl = kk_spec::time::parse_duration(TTL).ok()?;
    let tick = kk_spec::time::parse_duration(TICK).ok()?;
    let rotate_at: f64 = ROTATE_AT.parse().ok()?;
    ttl.mul_f64(1.0 - rotate_at)
        .checked_sub(tick + Duration::from_secs(60))
}

pub(super) fn join_store(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "join-store",
        "the join store holds a join configuration whose token has not expired, and will be replaced before it does",
    );
    let Some(read) = &s.store else {
        return c
            .skip("join mode static: the token is in the userData (join-token-valid checks it)");
    };
    let store = f
        .store
        .as_ref()
        .map(|(k, n)| format!("{k} {n}"))
        .unwrap_or_default();
    match read {
        Err(e) => c.worse(
            Status::Fail,
            e.to_string(),
            "give doctor's identity read access to the store (doctor --permissions) and check the region",
        ),
        Ok(None) => c.worse(
            Status::Fail,
            format!("{store}: not found"),
            "the rotator publishes it: apply rotator/ and check its log, or run kubean-karpenter token create --publish",
        ),
        Ok(Some(cfg)) => {
            let left = cfg.expiration.duration_since(s.now);
            if left.is_negative() || left.is_zero() {
                c.worse(
                    Status::Fail,
                    format!(
                        "{store}: KK_EXPIRATION={} is in the past",
                        kk_spec::time::rfc3339(cfg.expiration)
                    ),
                    "nodes booting now cannot join: check that the rotator runs (its /metrics and log), or kubean-karpenter token create --publish",
                );
            } else if let Some(due) = rotation_due_left()
                && left.as_secs() < i64::try_from(due.as_secs()).unwrap_or(i64::MAX)
            {
                c.worse(
                    Status::Fail,
                    format!(
                        "{store}: token {} expires at {} ({} left), but the rotator replaces a token with {} left (ttl {}, rotate at {}, tick {}): the rotation is overdue, and nodes that boot after the expiry will not join",
                        &cfg.token_id,
                        kk_spec::time::rfc3339(cfg.expiration),
                        secs(Duration::from_secs(left.as_secs().max(0) as u64)),
                        secs(due),
                        kk_render::rotator::TTL,
                        kk_render::rotator::ROTATE_AT,
                        kk_render::rotator::TICK,
                    ),
                    "check that the rotator runs and leads (its /metrics: kubean_karpenter_token_remaining_seconds, its log), or kubean-karpenter token create --publish",
                );
            } else {
                c = c.saw(format!(
                    "{store}: token {} valid until {} ({} left)",
                    &cfg.token_id,
                    kk_spec::time::rfc3339(cfg.expiration),
                    secs(Duration::from_secs(left.as_secs().max(0) as u64))
                ));
            }
        }
    }
    c
}

pub(super) fn join_token_valid(s: &Snapshot, _facts: &Facts) -> Check {
    let c = check(
        "join-token-valid",
        "the join token exists in the cluster, authenticates and has not expired",
    );
    let Some((id, read)) = &s.join_token else {
        return c.skip("no join token to check (see join-store)");
    };
    match read {
        Err(e) => c.skip(format!(
            "could not authenticate as bootstrap token {id}: {e}"
        )),
        Ok(None) => {
            let mut c = c;
            c.worse(
                Status::Fail,
                format!("bootstrap token {id} does not authenticate (401): deleted, expired, never created, or without usage-bootstrap-authentication"),
                "kubean-karpenter token create --publish (the rotator does it on its next pass)",
            );
            c
        }
        Ok(Some(groups)) => c.saw(format!(
            "bootstrap token {id} authenticates as system:bootstrap:{id}, groups {groups:?}"
        )),
    }
}
pub(super) fn join_ca_hash(s: &Snapshot) -> Check {
    let mut c = check(
        "join-ca-hash",
        "the store's CA hash is the cluster CA's (kubeadm refuses discovery otherwise)",
    );
    let Some(Ok(Some(cfg))) = &s.store else {
        return c.skip("no join configuration in a store (see join-store)");
    };
    let cluster = match &s.cluster_ca_hash {
        Ok(h) => h,
        Err(e) => return c.skip(format!("the cluster CA could not be read: {e}")),
    };
    if &cfg.ca_cert_hash == cluster {
        c = c.saw(format!(
            "KK_CA_CERT_HASH = kube-system/kube-root-ca.crt's hash = {cluster}"
        ));
    } else {
        c.worse(
            Status::Fail,
            format!(
                "KK_CA_CERT_HASH={} but kube-system/kube-root-ca.crt hashes to {cluster}",
                cfg.ca_cert_hash
            ),
            "republish with the cluster's CA: kubean-karpenter token create --publish (it computes the hash from the kubeconfig's CA), and fix spec.caBundle if it names another CA",
        );
    }
    c
}

pub(super) fn cluster_info_jws(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "cluster-info-jws",
        "kube-public/cluster-info carries a JWS signature for the join token",
    );
    let Some(id) = join_token_id(s, f) else {
        return c.skip("no join token to check (see join-store)");
    };
    match &s.cluster_info {
        Err(e) => c.skip(e.to_string()),
        Ok(None) => {
            c.worse(
                Status::Fail,
                "no ConfigMap kube-public/cluster-info".into(),
                "kubeadm init phase bootstrap-token recreates it",
            );
            c
        }
        Ok(Some(cm)) => {
            let key = format!("jws-kubeconfig-{id}");
            let has = cm.data.as_ref().is_some_and(|d| d.contains_key(&key));
            if has {
                c.saw(format!("cluster-info has {key}"))
            } else {
                let present: Vec<&String> = cm
                    .data
                    .as_ref()
                    .map(|d| d.keys().filter(|k| k.starts_with("jws-")).collect())
                    .unwrap_or_default();
                c.worse(
                    Status::Fail,
                    format!("cluster-info has no {key} (it has {present:?})"),
                    "the token needs usage-bootstrap-signing and kube-controller-manager must run the bootstrapsigner controller (--controllers=*,bootstrapsigner,tokencleaner)",
                );
                c
            }
        }
    }
}

fn grants(
    s: &crate::snapshot::Rbac,
    role: &str,
    namespace: Option<&str>,
    groups: &[String],
    user: Option<&str>,
) -> Option<String> {
    s.bindings
        .iter()
        .find(|b| {
            b.role == role
                && b.namespace.as_deref() == namespace
                && b.subjects.iter().any(|sub| {
                    (sub.kind == "Group" && groups.contains(&sub.name))
                        || (sub.kind == "User" && Some(sub.name.as_str()) == user)
                })
        })
        .map(|b| b.name.clone())
}

pub(super) fn bootstrap_rbac(s: &Snapshot, _facts: &Facts) -> Check {
    let mut c = check(
        "bootstrap-rbac",
        "the RBAC a kubeadm join needs (kubeadm init's roles, bound to the token's groups)",
    );
    let Ok(rbac) = &s.rbac else {
        return c.skip("RBAC objects could not be listed");
    };
    let mut groups = vec!["system:bootstrappers".to_owned()];
    if let Some((_, Ok(Some(token_groups)))) = &s.join_token {
        groups.extend(
            token_groups
                .iter()
                .filter(|g| g.starts_with("system:bootstrappers:"))
                .cloned(),
        );
    }
    // What `kubeadm join` does as the bootstrap token (kubernetes/kubernetes
    // cmd/kubeadm/app/phases/bootstraptoken/{clusterinfo,node}, v1.36): read cluster-info
    // anonymously, read kubeadm-config and kubelet-config, get its own Node, create a CSR.
    let needs: [(&str, &str, Option<&str>, bool); 5] = [
        ("ClusterRole", "system:node-bootstrapper", None, false),
        ("ClusterRole", "kubeadm:get-nodes", None, false),
        (
            "Role",
            "kubeadm:nodes-kubeadm-config",
            Some("kube-system"),
            false,
        ),
        ("Role", "kubeadm:kubelet-config", Some("kube-system"), false),
        (
            "Role",
            "kubeadm:bootstrap-signer-clusterinfo",
            Some("kube-public"),
            true,
        ),
    ];
    for (kind, role, ns, anonymous) in needs {
        let key = match ns {
            Some(ns) => format!("{kind}/{ns}/{role}"),
            None => format!("{kind}/{role}"),
        };
        if !rbac.roles.contains(&key) {
            c.worse(
                Status::Fail,
                format!("{key} is missing"),
                "kubeadm init creates it: re-run `kubeadm init phase bootstrap-token` (and `upload-config all`) on a control-plane node",
            );
            continue;
        }
        let user = anonymous.then_some("system:anonymous");
        let subjects: &[String] = if anonymous { &[] } else { &groups };
        match grants(rbac, role, ns, subjects, user) {
            Some(b) => c.evidence.push(format!("{key} bound by {b}")),
            None => c.worse(
                Status::Fail,
                format!(
                    "{key} is bound to none of {}",
                    if anonymous {
                        "system:anonymous".to_owned()
                    } else {
                        format!("{groups:?}")
                    }
                ),
                "apply rotator/join-rbac.yaml (binds our token group), or re-run kubeadm init phase bootstrap-token",
            ),
        }
    }
    c
}

#[cfg(test)]
mod rotation_tests {
    #[test]
    fn the_rendered_rotator_keeps_a_token_with_58_minutes_left_at_least() {
        // ttl 2h, rotate at 0.5: replaced with 60 min left; one 1-minute tick and a minute of
        // slack below that is overdue.
        assert_eq!(
            super::rotation_due_left(),
            Some(std::time::Duration::from_secs(58 * 60))
        );
    }
}

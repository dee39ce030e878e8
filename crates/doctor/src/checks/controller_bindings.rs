//! Who holds our controllers' rights. The rotator's Role and the CSR approver's roles are
//! narrowed by admission policies that match the controllers' own accounts (and, while `apply`
//! moves them, the ones of the same name in Karpenter's namespace); any other subject bound to
//! those roles acts with the rights and none of the narrowing: the rotator's Role can then mint
//! a service-account token in kube-system.

use kk_spec::names::{
    CONTROLLER_LEASE_NAMESPACE, CSR_APPROVER, CSR_APPROVER_CLUSTER_ROLE, ROTATOR,
    controller_namespace,
};

use super::check;
use crate::snapshot::{Binding, Rbac, Snapshot};
use crate::{Check, Facts, Status};

/// Our roles a binding may point at, and the controller that owns each.
fn owner(binding: &Binding) -> Option<&'static str> {
    let in_lease_namespace = binding.namespace.as_deref() == Some(CONTROLLER_LEASE_NAMESPACE);
    match (binding.role_kind.as_str(), binding.role.as_str()) {
        ("ClusterRole", CSR_APPROVER_CLUSTER_ROLE) => Some(CSR_APPROVER),
        ("ClusterRole", kk_spec::names::BUDGET_CLUSTER_ROLE) => Some(kk_spec::names::BUDGET),
        ("Role", kk_spec::names::BUDGET) if in_lease_namespace => Some(kk_spec::names::BUDGET),
        ("Role", ROTATOR) if in_lease_namespace => Some(ROTATOR),
        ("Role", CSR_APPROVER) if in_lease_namespace => Some(CSR_APPROVER),
        _ => None,
    }
}

fn title() -> Check {
    check(
        "controller-bindings",
        "the rotator's and the CSR approver's roles are bound to their own accounts only",
    )
}

pub(super) fn controller_bindings(s: &Snapshot, f: &Facts) -> Check {
    match &s.rbac {
        Ok(rbac) => judge(rbac, f),
        Err(_) => title().skip("RBAC objects could not be listed"),
    }
}

fn judge(rbac: &Rbac, f: &Facts) -> Check {
    let mut c = title();
    let mut seen = 0;
    for binding in &rbac.bindings {
        let Some(controller) = owner(binding) else {
            continue;
        };
        seen += 1;
        let allowed = [
            controller_namespace(controller),
            f.karpenter_namespace.as_str(),
        ];
        for subject in &binding.subjects {
            let own = subject.kind == "ServiceAccount"
                && subject.name == controller
                && subject
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| allowed.contains(&ns));
            if !own {
                let at = binding
                    .namespace
                    .as_deref()
                    .map(|ns| format!("{ns}/"))
                    .unwrap_or_default();
                c.worse(
                    Status::Fail,
                    format!(
                        "{} {at}{} binds {} {}{} to {controller}'s rights, which no admission policy narrows for it",
                        if binding.namespace.is_some() { "RoleBinding" } else { "ClusterRoleBinding" },
                        binding.name,
                        subject.kind,
                        subject.namespace.as_deref().map(|ns| format!("{ns}/")).unwrap_or_default(),
                        subject.name,
                    ),
                    "remove that subject (or the binding); re-run `kubean-karpenter apply SPEC` to put the rendered bindings back",
                );
            }
        }
    }
    if c.evidence.is_empty() {
        if seen == 0 {
            return c.skip("no binding of the rotator's or the CSR approver's roles (static join mode, or not applied yet)");
        }
        c = c.saw(format!(
            "{seen} binding(s) of the controllers' roles, each to the controller's own account"
        ));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::rbac::v1::Subject;

    fn subject(namespace: &str, name: &str) -> Subject {
        Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(namespace.into()),
            api_group: None,
        }
    }

    fn judged(subjects: Vec<Subject>) -> Check {
        let rbac = Rbac {
            bindings: vec![Binding {
                namespace: Some("kube-system".into()),
                name: ROTATOR.into(),
                role_kind: "Role".into(),
                role: ROTATOR.into(),
                subjects,
            }],
            ..Rbac::default()
        };
        let facts = Facts {
            karpenter_namespace: "karpenter".into(),
            ..Facts::default()
        };
        judge(&rbac, &facts)
    }

    #[test]
    fn the_controllers_own_accounts_pass_and_any_other_subject_fails() {
        let c = judged(vec![subject(ROTATOR, ROTATOR)]);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        // While apply moves it: the account of the same name in Karpenter's namespace.
        let c = judged(vec![
            subject(ROTATOR, ROTATOR),
            subject("karpenter", ROTATOR),
        ]);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let c = judged(vec![subject(ROTATOR, ROTATOR), subject("evil", ROTATOR)]);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence[0].contains("binds ServiceAccount evil/kubean-karpenter-rotator"),
            "{c:?}"
        );
        let c = judged(vec![Subject {
            kind: "Group".into(),
            name: "system:authenticated".into(),
            namespace: None,
            api_group: Some("rbac.authorization.k8s.io".into()),
        }]);
        assert_eq!(c.status, Status::Fail, "{c:?}");
    }
}

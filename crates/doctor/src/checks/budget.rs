//! Spend budgets (docs/guide/budgets.md): every budgeted pool's limit is in place, written by
//! the budget controller, which is alive and has recorded the pool for the launch policy.

use std::time::Duration;

use kk_spec::names::BUDGET;

use super::{check, secs};
use crate::snapshot::Snapshot;
use crate::{Check, Facts, Status};

/// Whether `manager` owns `spec.limits[resource]` in the object's managed fields.
fn owns_limit(np: &kube_core::DynamicObject, resource: &str, manager: &str) -> bool {
    np.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(manager)
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer(&format!(
                    "/f:spec/f:limits/f:{}",
                    resource.replace('/', "~1")
                ))
                .is_some()
            })
    })
}

pub(super) fn budget_enforced(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "budget-enforced",
        "every budgeted pool's limit is written by the budget controller, which is alive",
    );
    if f.budgets.is_empty() {
        return c.skip("no pool has a spend budget");
    }
    let fix_controller = "run the budget controller (rotator/budget.yaml, kubean-karpenter apply): until it records a pool, that pool launches nothing";
    match &s.deployments {
        Ok(deployments) => {
            let available = deployments
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(BUDGET))
                .map(|d| {
                    d.status
                        .as_ref()
                        .and_then(|st| st.available_replicas)
                        .unwrap_or(0)
                });
            match available {
                None => c.worse(
                    Status::Fail,
                    format!("no Deployment {BUDGET}"),
                    fix_controller,
                ),
                Some(0) => c.worse(
                    Status::Fail,
                    format!("Deployment {BUDGET} has no available replica"),
                    fix_controller,
                ),
                Some(_) => {}
            }
        }
        Err(e) => c.worse(Status::Warn, format!("Deployments: {e}"), fix_controller),
    }
    let record = match &s.budget_record {
        Ok(Some(map)) => map.data.clone().unwrap_or_default(),
        Ok(None) => {
            c.worse(
                Status::Fail,
                format!(
                    "no ConfigMap kube-system/{BUDGET}: every budgeted pool's launches are refused"
                ),
                "apply the bundle (rotator/budget.yaml renders it)",
            );
            Default::default()
        }
        Err(e) => {
            c.worse(Status::Warn, format!("its record: {e}"), fix_controller);
            Default::default()
        }
    };
    match record
        .get("heartbeat")
        .map(|t| t.parse::<jiff::Timestamp>())
    {
        Some(Ok(beat)) => {
            let age = Duration::from_secs(s.now.duration_since(beat).as_secs().max(0) as u64);
            if age > f.budget_stale_after {
                let (status, what) = if f.budget_deny {
                    (Status::Fail, "launches of budgeted pools are refused")
                } else {
                    (
                        Status::Warn,
                        "the last written limits hold, but no longer follow spend",
                    )
                };
                c.worse(
                    status,
                    format!(
                        "the budget controller's heartbeat is {} old (staleAfter {}): {what}",
                        secs(age),
                        secs(f.budget_stale_after)
                    ),
                    fix_controller,
                );
            }
        }
        _ => c.worse(
            Status::Fail,
            "the budget controller has recorded no heartbeat".into(),
            fix_controller,
        ),
    }
    let Ok(pools) = &s.nodepools else {
        return c.saw("NodePools could not be listed");
    };
    for (pool, resource) in &f.budgets {
        let Some(np) = pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pool))
        else {
            c.worse(
                Status::Fail,
                format!("NodePool {pool} is missing"),
                "apply the bundle",
            );
            continue;
        };
        let limit = np.data["spec"]["limits"][resource.as_str()]
            .as_str()
            .map(str::to_owned);
        match limit {
            None => c.worse(
                Status::Fail,
                format!("NodePool {pool} has no limits.{resource} yet: its launches wait for the budget controller"),
                fix_controller,
            ),
            Some(limit) => {
                if !owns_limit(np, resource, BUDGET) {
                    c.worse(
                        Status::Warn,
                        format!("NodePool {pool}'s limits.{resource} ({limit}) is not the budget controller's (another field manager wrote it)"),
                        "leave that limit to the budget controller: remove it from what you apply",
                    );
                }
                let uid = np.metadata.uid.as_deref().unwrap_or("");
                if record.get(&format!("enforced.{pool}")).map(String::as_str) != Some(uid) {
                    c.worse(
                        Status::Fail,
                        format!("pool {pool} is not recorded as enforced: its launches are refused"),
                        fix_controller,
                    );
                } else {
                    c.evidence.push(format!("NodePool {pool}: limits.{resource} {limit}, enforced"));
                }
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn facts() -> Facts {
        Facts {
            budgets: vec![("lab".into(), "cpu".into())],
            budget_deny: true,
            budget_stale_after: Duration::from_secs(120),
            ..Facts::default()
        }
    }

    fn healthy(heartbeat: &str, limit: Option<&str>, enforced: &str) -> Snapshot {
        let mut s = crate::snapshot::tests::empty();
        s.now = "2026-12-07T10:00:00Z".parse().unwrap();
        s.deployments = Ok(vec![
            serde_json::from_value::<Deployment>(json!({
                "metadata": {"name": BUDGET, "namespace": BUDGET},
                "status": {"availableReplicas": 1},
            }))
            .unwrap(),
        ]);
        s.budget_record = Ok(Some(
            serde_json::from_value::<ConfigMap>(json!({
                "metadata": {"name": BUDGET, "namespace": "kube-system"},
                "data": {"heartbeat": heartbeat, "enforced.lab": enforced},
            }))
            .unwrap(),
        ));
        let mut spec = json!({});
        if let Some(l) = limit {
            spec = json!({"limits": {"cpu": l}});
        }
        s.nodepools = Ok(vec![
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "lab", "uid": "u-1", "managedFields": [
                    {"manager": BUDGET, "operation": "Apply", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:limits": {"f:cpu": {}}}}}
                ]},
                "spec": spec,
            }))
            .unwrap(),
        ]);
        s
    }

    #[test]
    fn an_enforced_budget_passes_and_a_missing_one_is_named() {
        let ok = budget_enforced(
            &healthy("2026-12-07T09:59:30Z", Some("4166m"), "u-1"),
            &facts(),
        );
        assert_eq!(ok.status, Status::Ok, "{:?}", ok.evidence);
        let unwritten = budget_enforced(&healthy("2026-12-07T09:59:30Z", None, "u-1"), &facts());
        assert_eq!(unwritten.status, Status::Fail);
        assert!(
            unwritten
                .evidence
                .iter()
                .any(|e| e.contains("has no limits.cpu yet"))
        );
        let stale_uid =
            budget_enforced(&healthy("2026-12-07T09:59:30Z", Some("4"), "u-0"), &facts());
        assert_eq!(stale_uid.status, Status::Fail);
    }

    #[test]
    fn a_silent_controller_fails_in_deny_mode_and_warns_in_allow_mode() {
        let silent = healthy("2026-12-07T09:50:00Z", Some("4166m"), "u-1");
        let deny = budget_enforced(&silent, &facts());
        assert_eq!(deny.status, Status::Fail);
        assert!(
            deny.evidence[0].contains("heartbeat is 10m old"),
            "{:?}",
            deny.evidence
        );
        let allow = budget_enforced(
            &silent,
            &Facts {
                budget_deny: false,
                ..facts()
            },
        );
        assert_eq!(allow.status, Status::Warn);
    }

    #[test]
    fn without_budgets_it_is_skipped() {
        let c = budget_enforced(&crate::snapshot::tests::empty(), &Facts::default());
        assert_eq!(c.status, Status::Skipped);
    }
}

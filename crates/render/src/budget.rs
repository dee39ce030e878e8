//! `rotator/budget.yaml`: the budget controller (issue #51), which keeps each budgeted
//! NodePool's limit on one resource where its spend budget puts it.
//!
//! Enforcement is Karpenter's own: a NodePool limit, which Karpenter never launches past. The
//! controller (`kubean-karpenter controller --budget-only`) only moves that one limit, under
//! its own server-side-apply field manager; `apply` never sends the field (render leaves it
//! out of the NodePool), so the two never fight over it.
//!
//! What the controller's identity can do is narrowed twice. RBAC: read NodePools, NodeClaims,
//! EC2NodeClasses, Nodes and NodeOverlays, patch NodePools, create Events, and its one record (a ConfigMap
//! beside its Lease). A ValidatingAdmissionPolicy on NodePool writes: it may only update a
//! budgeted NodePool's budget resource limit — no create (a server-side apply to a missing
//! object creates it), no delete, no template, replicas, disruption, weight, labels or
//! annotations, never another limit, never above the spec's own limit. So nothing it may write
//! launches or deletes capacity; the worst a stolen identity does is narrow a limit (fewer
//! launches) or widen one up to the spec's ceiling.
//!
//! A second policy holds launches of a budgeted pool (NodeClaim CREATE) until the controller
//! has written its limit (its record names the NodePool's uid: a pool deleted and created
//! again waits again), and, with `budgetEnforcement.onControllerDown: deny`, while its
//! heartbeat is older than `staleAfter`.

use kk_spec::ElasticCluster;
use kk_spec::names::{BUDGET, BUDGET_CLUSTER_ROLE, BUDGET_LAUNCH_POLICY};
use serde_json::{Value, json};

use crate::cel;
use crate::controller_workload as workload;
use crate::names;
use crate::{Bundle, RenderError};

/// How often the controller reads the cluster and recomputes the limits.
const TICK: &str = "30s";

/// The budgeted pools and the resource each narrows, as a CEL map literal.
fn managed_cel(spec: &kk_spec::ClusterSpec) -> String {
    let entries: Vec<String> = spec
        .budgeted_pools()
        .map(|(pool, resource)| {
            format!(
                "{}: {}",
                cel::string_literal(&pool.name),
                cel::string_literal(&resource)
            )
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// The spec's own limit on each budgeted pool's resource, where it sets one.
fn ceilings_cel(spec: &kk_spec::ClusterSpec) -> String {
    let entries: Vec<String> = spec
        .budgeted_pools()
        .filter_map(|(pool, resource)| {
            let ceiling = pool.limits.get(&resource)?;
            Some(format!(
                "{}: {}",
                cel::string_literal(&pool.name),
                cel::string_literal(&ceiling.as_text())
            ))
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// What the controller's accounts may write to NodePools.
fn write_policy(spec: &kk_spec::ClusterSpec, labels: &Value) -> Value {
    let accounts = workload::accounts_cel(spec, BUDGET);
    let unchanged = [
        "object.spec.template == oldObject.spec.template",
        "object.spec.?disruption == oldObject.spec.?disruption",
        "object.spec.?weight == oldObject.spec.?weight",
        "object.spec.?replicas == oldObject.spec.?replicas",
        "object.metadata.?labels == oldObject.metadata.?labels",
        "object.metadata.?annotations == oldObject.metadata.?annotations",
        "object.metadata.?finalizers == oldObject.metadata.?finalizers",
        "object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences",
    ]
    .join(" && ");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": BUDGET, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["karpenter.sh"], "apiVersions": ["v1"],
                    "resources": ["nodepools"], "operations": ["CREATE", "UPDATE", "DELETE"],
                }],
            },
            "matchConditions": [{
                "name": "budget-controller",
                "expression": format!("request.userInfo.username in {accounts}"),
            }],
            "variables": [
                { "name": "managed", "expression": managed_cel(spec) },
                { "name": "ceilings", "expression": ceilings_cel(spec) },
                { "name": "key", "expression": "request.operation == 'UPDATE' ? variables.managed[?object.metadata.name].orValue('') : ''" },
                { "name": "new", "expression": "request.operation == 'UPDATE' ? object.spec.?limits.orValue({}) : {}" },
                { "name": "old", "expression": "request.operation == 'UPDATE' ? oldObject.spec.?limits.orValue({}) : {}" },
            ],
            "validations": [
                {
                    "expression": "request.operation == 'UPDATE' && variables.key != ''",
                    "message": format!("{BUDGET} only updates the limits of budgeted NodePools: it creates and deletes none"),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("variables.key == '' || ({unchanged})"),
                    "message": format!("{BUDGET} changes nothing but a budgeted NodePool's limit (no template, disruption, weight, replicas, labels or annotations)"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.key == '' || (variables.old.all(k, k == variables.key || (k in variables.new && variables.new[k] == variables.old[k])) && variables.new.all(k, k == variables.key || k in variables.old))",
                    "message": format!("{BUDGET} writes only the limit on its pool's budget resource"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.key == '' || !(variables.key in variables.new) || !(object.metadata.name in variables.ceilings) || quantity(string(variables.new[variables.key])).compareTo(quantity(variables.ceilings[object.metadata.name])) <= 0",
                    "message": format!("{BUDGET} cannot raise a limit above the spec's own limits"),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// What a launch of a budgeted pool needs: its budget enforced, and (deny mode) a live
/// controller.
fn launch_policy(spec: &kk_spec::ClusterSpec, labels: &Value) -> Value {
    let pools: Vec<String> = spec
        .budgeted_pools()
        .map(|(pool, _)| cel::string_literal(&pool.name))
        .collect();
    let mut validations = vec![json!({
        "expression": "object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'NodePool' && o.uid == variables.record[?('enforced.' + variables.pool)].orValue(''))",
        "messageExpression": format!("'nodepool ' + variables.pool + ': its spend budget is not enforced yet ({BUDGET} has not written its limit); launches wait'"),
        "reason": "Forbidden",
    })];
    if spec.on_controller_down() == kk_spec::OnControllerDown::Deny {
        let stale = spec.budget_stale_after().as_secs();
        validations.push(json!({
            "expression": format!("'heartbeat' in variables.record && timestamp(object.metadata.creationTimestamp) - timestamp(variables.record['heartbeat']) < duration('{stale}s')"),
            "messageExpression": format!("'{BUDGET} silent since ' + variables.record[?'heartbeat'].orValue('never') + ': launches of budgeted nodepool ' + variables.pool + ' refused (budgetEnforcement.onControllerDown: deny)'"),
            "reason": "Forbidden",
        }));
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": BUDGET_LAUNCH_POLICY, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": { "apiVersion": "v1", "kind": "ConfigMap" },
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["karpenter.sh"], "apiVersions": ["v1"],
                    "resources": ["nodeclaims"], "operations": ["CREATE"],
                }],
            },
            "matchConditions": [{
                "name": "budgeted",
                "expression": format!("object.metadata.?labels[?'karpenter.sh/nodepool'].orValue('') in [{}]", pools.join(", ")),
            }],
            "variables": [
                { "name": "pool", "expression": "object.metadata.labels['karpenter.sh/nodepool']" },
                { "name": "record", "expression": "params.?data.orValue({})" },
            ],
            "validations": validations,
        },
    })
}

fn manifests(cluster: &ElasticCluster, image: String) -> Vec<Value> {
    let spec = &cluster.spec;
    let mut args = vec![
        "controller".to_owned(),
        "--budget-only".to_owned(),
        format!("--budget-tick={TICK}"),
    ];
    // No AWS calls: its own network namespace, away from IMDS; prices are the catalog's.
    args.extend(workload::common_args(BUDGET, workload::Network::Pod));
    let env = vec![
        json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }),
    ];
    let labels = workload::labels(BUDGET);
    let mut objects = vec![
        workload::service_account(BUDGET),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": BUDGET_CLUSTER_ROLE, "labels": labels },
            "rules": [
                // `patch` is what server-side apply needs; the write policy narrows it to one
                // limit of a budgeted NodePool.
                { "apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["get", "list", "watch", "patch"] },
                { "apiGroups": ["karpenter.sh"], "resources": ["nodeclaims", "nodeoverlays"], "verbs": ["get", "list", "watch"] },
                // Node classes carry the kubelet settings that size a node's capacity.
                { "apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": [""], "resources": ["events"], "verbs": ["create"] },
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": BUDGET_CLUSTER_ROLE, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": BUDGET_CLUSTER_ROLE },
            "subjects": workload::subjects(BUDGET),
        }),
    ];
    objects.extend(workload::lease_role_binding_and_lease(
        BUDGET,
        json!([
            workload::lease_rule(BUDGET),
            // Its record (heartbeat, the pools it enforces): this one ConfigMap, rendered below
            // (`create` cannot be narrowed by name).
            { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [BUDGET], "verbs": ["get", "update", "patch"] },
        ]),
    ));
    objects.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": BUDGET, "namespace": workload::LEASE_NAMESPACE, "labels": labels },
    }));
    objects.extend([
        write_policy(spec, &labels),
        workload::policy_binding(BUDGET),
        launch_policy(spec, &labels),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": { "name": BUDGET_LAUNCH_POLICY, "labels": labels },
            "spec": {
                "policyName": BUDGET_LAUNCH_POLICY,
                "validationActions": ["Deny"],
                // No record, no launch: a missing ConfigMap refuses too.
                "paramRef": { "name": BUDGET, "namespace": workload::LEASE_NAMESPACE, "parameterNotFoundAction": "Deny" },
            },
        }),
        workload::deployment(
            spec,
            BUDGET,
            "budget",
            image,
            args,
            env,
            workload::Network::Pod,
        ),
    ]);
    objects
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    if !cluster.spec.runs_budget_controller() {
        return Ok(());
    }
    let Some(controller) = &cluster.spec.controller else {
        return Err(RenderError::Invalid(
            "spec.controller: spend budgets are enforced by our budget controller: name its image"
                .into(),
        ));
    };
    bundle.add_yaml(
        &format!("namespaces/{}.yaml", names::controller_namespace(BUDGET)),
        &[workload::namespace(BUDGET, workload::Network::Pod)],
    )?;
    bundle.add_yaml(
        "rotator/budget.yaml",
        &manifests(cluster, workload::controller_image(cluster, controller)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets() -> ElasticCluster {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/specs/budgets.yaml"),
        )
        .unwrap();
        kk_spec::parse_spec(&text, "budgets.yaml").unwrap().spec
    }

    fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
        objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// A policy check (it reads rendered text): the identity's rights as RBAC grants them.
    /// The testbed test `crates/live/tests/it/budget.rs` performs the writes and sees them
    /// refused.
    #[test]
    fn the_controller_may_read_patch_nodepools_and_create_events_only() {
        let objects = manifests(&budgets(), "img@sha256:0".into());
        let role = of_kind(&objects, "ClusterRole")[0];
        for rule in role["rules"].as_array().unwrap() {
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            for verb in rule["verbs"].as_array().unwrap() {
                let verb = verb.as_str().unwrap();
                let allowed = match verb {
                    "get" | "list" | "watch" => true,
                    "patch" => resources == ["nodepools"],
                    "create" => resources == ["events"],
                    _ => false,
                };
                assert!(allowed, "{verb} on {resources:?}");
            }
            assert!(
                !resources
                    .iter()
                    .any(|r| ["secrets", "pods", "nodeclaims/status"].contains(r))
            );
        }
    }

    /// A policy check: the Deployment carries no AWS credential and runs on the pod network
    /// (no instance role through IMDS), so it cannot launch or end an instance.
    #[test]
    fn the_controller_has_no_way_to_aws() {
        let objects = manifests(&budgets(), "img@sha256:0".into());
        let deployment = of_kind(&objects, "Deployment")[0];
        let pod = &deployment["spec"]["template"]["spec"];
        assert_ne!(pod["hostNetwork"], json!(true));
        let text = pod.to_string();
        assert!(!text.contains("AWS_"), "{text}");
        let args: Vec<&str> = pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--budget-only"));
    }

    #[test]
    fn the_policies_name_the_budgeted_pools_and_the_spec_ceiling() {
        let spec = budgets().spec;
        assert_eq!(
            managed_cel(&spec),
            "{'budget-lab': 'cpu', 'inference': 'nvidia.com/gpu'}"
        );
        assert_eq!(ceilings_cel(&spec), "{'inference': '8'}");
        let launch = launch_policy(&spec, &json!({}));
        assert!(
            launch["spec"]["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
                .ends_with("in ['budget-lab', 'inference']")
        );
        // Deny mode (the fixture's): the heartbeat is checked, with staleAfter as a literal.
        assert!(launch.to_string().contains("duration('120s')"));
    }
}

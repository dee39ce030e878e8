//! What `doctor` needs, and nothing more: read-only Kubernetes RBAC and a read-only IAM
//! policy (`kubean-karpenter doctor --permissions` prints both). Every call kk-live's
//! `doctor::gather` makes is a get, list or describe covered here; the test
//! `doctor_runs_with_only_its_read_only_role` runs doctor as a ServiceAccount bound to exactly
//! this ClusterRole and sees a refused write.

use serde_json::{Value, json};

/// The ClusterRole (get/list only), without Secrets: a Secret reader reads every service
/// account's token, the controllers' AWS keys and the authenticator's serving key. doctor
/// checks the join token by authenticating with it instead.
pub fn cluster_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "kubean-karpenter:doctor",
            "labels": {kk_spec::names::MANAGED_BY.0: kk_spec::names::MANAGED_BY.1}
        },
        "rules": [
            {"apiGroups": [""], "resources": ["nodes", "pods", "events", "configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments"], "verbs": ["get", "list"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "clusterrolebindings", "roles", "rolebindings"], "verbs": ["get", "list"]},
            {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims", "nodepools"], "verbs": ["get", "list"]},
            {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": ["get", "list"]},
            {"nonResourceURLs": ["/version"], "verbs": ["get"]}
        ]
    })
}

/// The IAM policy for doctor's AWS identity: describe/get/list only, plus reading (and
/// decrypting, through the service) the join store.
pub fn iam_policy(store_arn: Option<&str>) -> Value {
    let mut statements = vec![
        json!({"Sid": "DescribeEc2", "Effect": "Allow", "Action": ["ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcEndpoints"], "Resource": "*"}),
        json!({"Sid": "ReadControllerRole", "Effect": "Allow", "Action": ["iam:ListRolePolicies", "iam:GetRolePolicy", "iam:ListAttachedRolePolicies", "iam:GetPolicy", "iam:GetPolicyVersion"], "Resource": "*"}),
        // The interruption queue's attributes and backlog, never its messages (no ReceiveMessage).
        json!({"Sid": "ReadInterruptionQueueAndRules", "Effect": "Allow", "Action": ["sqs:GetQueueUrl", "sqs:GetQueueAttributes", "events:DescribeRule", "events:ListTargetsByRule"], "Resource": "*"}),
    ];
    if let Some(arn) = store_arn {
        statements.push(json!({"Sid": "ReadJoinStore", "Effect": "Allow", "Action": ["ssm:GetParameter", "secretsmanager:GetSecretValue"], "Resource": arn}));
    }
    json!({"Version": "2012-10-17", "Statement": statements})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding #7 (policy check of the rendered role; the testbed test
    /// `doctor_runs_with_only_its_read_only_role_and_that_role_cannot_write` performs the read).
    #[test]
    fn the_role_cannot_read_secrets() {
        let role = cluster_role();
        for rule in role["rules"].as_array().unwrap() {
            let resources = rule["resources"].as_array().cloned().unwrap_or_default();
            assert!(
                !resources.iter().any(|r| r == "secrets" || r == "*"),
                "{rule}"
            );
        }
    }

    #[test]
    fn the_role_grants_no_write_verb() {
        let role = cluster_role();
        for rule in role["rules"].as_array().unwrap() {
            for verb in rule["verbs"].as_array().unwrap() {
                assert!(["get", "list"].contains(&verb.as_str().unwrap()), "{rule}");
            }
        }
        let policy = iam_policy(Some("arn:aws:ssm:us-east-1:1:parameter/x"));
        for s in policy["Statement"].as_array().unwrap() {
            for a in s["Action"].as_array().unwrap() {
                let a = a.as_str().unwrap();
                let verb = a.split(':').nth(1).unwrap();
                assert!(
                    verb.starts_with("Describe")
                        || verb.starts_with("Get")
                        || verb.starts_with("List"),
                    "{a}"
                );
            }
        }
    }
}

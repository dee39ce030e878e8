//! [`AwsDesired`] from a spec and its rendered bundle: the IAM documents of `iam/`, the
//! interruption queue and rules of `interruption/`, the rest from the spec.

use kk_render::Bundle;
use kk_spec::ElasticCluster;
use serde_json::Value;

use super::aws::AwsDesired;
use super::interruption::{InterruptionDesired, RuleDesired};

/// A document the AWS side needs that the bundle lacks, or lacks a field of (a bundle read
/// back from files may have been edited).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleDocumentError {
    #[error("the bundle has no {0}")]
    Missing(&'static str),
    #[error("{path}: no {key}")]
    NoField {
        path: &'static str,
        key: &'static str,
    },
}

fn json_file<'a>(bundle: &'a Bundle, path: &'static str) -> Result<&'a Value, BundleDocumentError> {
    bundle.json(path).ok_or(BundleDocumentError::Missing(path))
}

impl AwsDesired {
    /// What the account should hold; `controller_role` and `rotator_role` are the IAM roles
    /// the controller and rotator policies are attached to, when known.
    pub fn from_bundle(
        spec: &ElasticCluster,
        bundle: &Bundle,
        controller_role: Option<String>,
        rotator_role: Option<String>,
    ) -> Result<AwsDesired, BundleDocumentError> {
        let name = &spec.metadata.name;
        let aws = &spec.spec.aws;
        let node_role = json_file(bundle, "iam/node-role.json")?;
        let mut policies = vec![(
            format!("KarpenterControllerPolicy-{name}"),
            json_file(bundle, "iam/controller-policy.json")?.clone(),
            controller_role,
        )];
        if bundle.files.contains_key("iam/rotator-policy.json") {
            policies.push((
                format!("KubeanKarpenterRotatorPolicy-{name}"),
                json_file(bundle, "iam/rotator-policy.json")?.clone(),
                rotator_role,
            ));
        }
        let tag = |d: &kk_spec::Discovery| {
            d.discovery_tag
                .as_ref()
                .map(|t| (t.key.clone(), t.value.clone()))
        };
        Ok(AwsDesired {
            cluster: name.clone(),
            node_role: aws.node_role.clone(),
            trust_policy: json_file(bundle, "iam/node-role-trust-policy.json")?.clone(),
            managed_policy_arns: node_role["managedPolicyArns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            inline_policies: node_role["inlinePolicies"]
                .as_object()
                .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            instance_profile: aws.node_instance_profile.clone(),
            policies,
            subnet_ids: aws.subnets.ids.clone(),
            subnet_tag: tag(&aws.subnets),
            kubean_instance_ips: spec
                .spec
                .kubean
                .nodes
                .iter()
                .map(|n| n.ip.clone())
                .collect(),
            network: crate::node_network::NodeNetwork::from_spec(&spec.spec),
            efa: spec.spec.pools.iter().any(|p| p.efa),
            interruption: interruption(bundle)?,
            prune: false,
        })
    }
}

/// The interruption queue and rules `interruption/` describes; `None` when the bundle has none.
fn interruption(bundle: &Bundle) -> Result<Option<InterruptionDesired>, BundleDocumentError> {
    if !bundle.files.contains_key("interruption/queue.json") {
        return Ok(None);
    }
    let queue = json_file(bundle, "interruption/queue.json")?;
    let text = |v: &Value, key: &'static str, path: &'static str| {
        v[key]
            .as_str()
            .map(str::to_owned)
            .ok_or(BundleDocumentError::NoField { path, key })
    };
    let rules = json_file(bundle, "interruption/rules.json")?;
    Ok(Some(InterruptionDesired {
        queue: text(queue, "queueName", "interruption/queue.json")?,
        queue_arn: text(queue, "arn", "interruption/queue.json")?,
        attributes: queue["attributes"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        policy: json_file(bundle, "interruption/queue-policy.json")?.clone(),
        rules: rules
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                Ok(RuleDesired {
                    name: text(r, "name", "interruption/rules.json")?,
                    event_pattern: r["eventPattern"].clone(),
                    description: format!(
                        "kubean-karpenter: Karpenter interruption handling; {}",
                        r["karpenter"].as_str().unwrap_or_default()
                    ),
                })
            })
            .collect::<Result<_, BundleDocumentError>>()?,
    }))
}

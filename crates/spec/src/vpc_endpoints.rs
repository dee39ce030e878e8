//! The VPC endpoints an isolated VPC (`karpenter.isolatedVPC: true`) needs: with no route to
//! the internet, every AWS API Karpenter, the nodes and the rotator call must be reachable
//! through an endpoint in the cluster's VPC (Karpenter's own isolated-VPC guide lists them;
//! the pricing API has none, which is why `isolatedVPC` makes Karpenter use its built-in
//! prices). Pure: the spec says which; doctor asks the account which exist.

use crate::ElasticCluster;

/// How an endpoint reaches the service: an interface (ENIs with private DNS) or a route-table
/// gateway (S3's, which ECR's image layers come through).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EndpointKind {
    Interface,
    Gateway,
}

impl EndpointKind {
    /// As EC2's `VpcEndpointType` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointKind::Interface => "Interface",
            EndpointKind::Gateway => "Gateway",
        }
    }
}

/// One endpoint the cluster needs, and who needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredEndpoint {
    /// `com.amazonaws.<region>.<service>`.
    pub service_name: String,
    pub kind: EndpointKind,
    pub needed_by: &'static str,
}

/// The endpoints this spec's cluster needs; empty unless `karpenter.isolatedVPC` is set.
pub fn required(cluster: &ElasticCluster) -> Vec<RequiredEndpoint> {
    let spec = &cluster.spec;
    if !spec.karpenter.isolated_vpc {
        return Vec::new();
    }
    let mut services: Vec<(&str, EndpointKind, &'static str)> = vec![
        (
            "ec2",
            EndpointKind::Interface,
            "Karpenter launches, describes and terminates instances",
        ),
        (
            "ecr.api",
            EndpointKind::Interface,
            "nodes pull images from ECR (authorization)",
        ),
        (
            "ecr.dkr",
            EndpointKind::Interface,
            "nodes pull images from ECR (manifests)",
        ),
        (
            "s3",
            EndpointKind::Gateway,
            "ECR's image layers come from S3",
        ),
        (
            "sts",
            EndpointKind::Interface,
            "Karpenter's and the rotator's credentials",
        ),
        (
            "ssm",
            EndpointKind::Interface,
            "Karpenter resolves AMIs from SSM parameters; the join store",
        ),
    ];
    if crate::interruption::queue_name(cluster).is_some() {
        services.push((
            "sqs",
            EndpointKind::Interface,
            "Karpenter reads the interruption queue",
        ));
    }
    services
        .into_iter()
        .map(|(service, kind, needed_by)| RequiredEndpoint {
            service_name: format!("com.amazonaws.{}.{service}", spec.aws.region),
            kind,
            needed_by,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_isolated_vpc_needs_endpoints_and_sqs_only_with_a_queue() {
        let mut c = crate::parse_spec(crate::EXAMPLE, "example").unwrap().spec;
        assert!(super::required(&c).is_empty());
        c.spec.karpenter.isolated_vpc = true;
        let names: Vec<String> = super::required(&c)
            .into_iter()
            .map(|e| e.service_name)
            .collect();
        let region = c.spec.aws.region.clone();
        for s in ["ec2", "ecr.api", "ecr.dkr", "s3", "sts", "ssm", "sqs"] {
            assert!(
                names.contains(&format!("com.amazonaws.{region}.{s}")),
                "{s}: {names:?}"
            );
        }
        c.spec.karpenter.interruption_queue = Some(String::new());
        assert!(
            !super::required(&c)
                .iter()
                .any(|e| e.service_name.ends_with(".sqs"))
        );
    }
}

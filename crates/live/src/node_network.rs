//! The node network as the EC2 API shows it: security groups described by ID or discovery tag,
//! in the spec crate's plain shape (`kk_spec::network`), for apply and doctor.

pub use kk_spec::network::{Ingress, NodeNetwork, SecurityGroup};

use crate::aws_error::AwsCallError;

/// A security group as the EC2 API describes it, in the spec crate's plain shape.
pub fn security_group(g: &aws_sdk_ec2::types::SecurityGroup) -> SecurityGroup {
    SecurityGroup {
        id: g.group_id().unwrap_or_default().to_owned(),
        ingress: g
            .ip_permissions()
            .iter()
            .map(|p| Ingress {
                protocol: p.ip_protocol().unwrap_or_default().to_owned(),
                from_port: p.from_port(),
                to_port: p.to_port(),
                cidrs: p
                    .ip_ranges()
                    .iter()
                    .filter_map(|r| r.cidr_ip().map(str::to_owned))
                    .collect(),
                groups: p
                    .user_id_group_pairs()
                    .iter()
                    .filter_map(|g| g.group_id().map(str::to_owned))
                    .collect(),
            })
            .collect(),
    }
}

/// The security groups carrying the discovery tag `key=value` (one DescribeSecurityGroups).
pub async fn security_groups_tagged(
    ec2: &aws_sdk_ec2::Client,
    key: &str,
    value: &str,
) -> Result<Vec<SecurityGroup>, AwsCallError> {
    let out = ec2
        .describe_security_groups()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:{key}"))
                .values(value)
                .build(),
        )
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("ec2:DescribeSecurityGroups", &e))?;
    Ok(out.security_groups().iter().map(security_group).collect())
}

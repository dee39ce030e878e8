//! `spec.aws`: region, account, VPC, subnet and security-group discovery.

use super::*;

fn discovery(p: &mut Problems, at: &FieldPath, d: &Discovery, id_re: &Regex, what: &str) {
    if d.ids.is_empty() == d.discovery_tag.is_none() {
        p.push((at.clone(), "set exactly one of ids, discoveryTag".into()));
    }
    for (i, id) in d.ids.iter().enumerate() {
        if !id_re.is_match(id) {
            p.push((at.key("ids").index(i), format!("{id:?} is not a {what} ID")));
        }
    }
    if let Some(tag) = &d.discovery_tag
        && (tag.key.is_empty() || tag.value.is_empty())
    {
        p.push((
            at.key("discoveryTag"),
            "key and value must not be empty".into(),
        ));
    }
}

pub(super) fn aws(p: &mut Problems, at: &FieldPath, a: &Aws) {
    if !REGION.is_match(&a.region) {
        p.push((
            at.key("region"),
            format!("{:?} is not an AWS region", a.region),
        ));
    }
    if !ACCOUNT.is_match(&a.account_id) {
        p.push((at.key("accountID"), "must be 12 digits".into()));
    }
    if !["aws", "aws-cn", "aws-us-gov"].contains(&a.partition.as_str()) {
        p.push((
            at.key("partition"),
            "must be aws, aws-cn or aws-us-gov".into(),
        ));
    }
    if !VPC_ID.is_match(&a.vpc_id) {
        p.push((at.key("vpcID"), format!("{:?} is not a VPC ID", a.vpc_id)));
    }
    discovery(p, &at.key("subnets"), &a.subnets, &SUBNET_ID, "subnet");
    discovery(
        p,
        &at.key("securityGroups"),
        &a.security_groups,
        &SG_ID,
        "security group",
    );
    if !SG_ID.is_match(&a.control_plane_security_group_id) {
        p.push((
            at.key("controlPlaneSecurityGroupID"),
            format!(
                "{:?} is not a security group ID",
                a.control_plane_security_group_id
            ),
        ));
    }
    if !IAM_NAME.is_match(&a.node_role) || a.node_role.starts_with("arn:") {
        p.push((
            at.key("nodeRole"),
            "must be an IAM role name (not an ARN)".into(),
        ));
    }
    if !IAM_NAME.is_match(&a.node_instance_profile) || a.node_instance_profile.starts_with("arn:") {
        p.push((
            at.key("nodeInstanceProfile"),
            "must be an instance profile name (not an ARN)".into(),
        ));
    }
}

//! `apply`'s EFA step: when a pool uses EFA, every node security group admits all traffic
//! (protocol `-1`, every port) from itself, inbound and outbound. EFA's OS-bypass traffic
//! between the interfaces Karpenter attaches (each in the node class's security groups) needs
//! both; a default group allows all egress, but a locked-down one may not.
//!
//! Read first, write only the missing direction; planning records the writes.

use aws_sdk_ec2::types::{IpPermission, SecurityGroup, UserIdGroupPair};

use super::aws::{AwsDesired, Run, StepError};
use crate::aws_error::AwsCallError;

const DESCRIPTION: &str = "kubean-karpenter: EFA, all traffic within the node security group";

/// Whether `permissions` allow all traffic to or from `group` itself.
fn admits_itself(permissions: &[IpPermission], group: &str) -> bool {
    permissions.iter().any(|p| {
        p.ip_protocol() == Some("-1")
            && p.user_id_group_pairs()
                .iter()
                .any(|pair| pair.group_id() == Some(group))
    })
}

fn all_from(group: &str) -> IpPermission {
    IpPermission::builder()
        .ip_protocol("-1")
        .user_id_group_pairs(
            UserIdGroupPair::builder()
                .group_id(group)
                .description(DESCRIPTION)
                .build(),
        )
        .build()
}

impl Run<'_> {
    pub(crate) async fn efa_self_rule(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        if !d.efa {
            return Ok(());
        }
        let nodes = self.node_security_groups(d).await?;
        if nodes.is_empty() {
            self.out
                .notes
                .push("no node security group found: the EFA rule was not added".into());
            return Ok(());
        }
        self.out.reads += 1;
        let groups: Vec<SecurityGroup> = self
            .ec2
            .describe_security_groups()
            .set_group_ids(Some(nodes.into_iter().collect()))
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:DescribeSecurityGroups", &e))?
            .security_groups()
            .to_vec();
        for group in &groups {
            let Some(id) = group.group_id() else {
                continue;
            };
            if admits_itself(group.ip_permissions(), id) {
                self.out
                    .unchanged
                    .push(format!("{id}: EFA ingress from itself"));
            } else if self.write(
                "ec2:AuthorizeSecurityGroupIngress",
                format!("{id} all traffic from {id} (EFA)"),
            ) {
                self.ec2
                    .authorize_security_group_ingress()
                    .group_id(id)
                    .ip_permissions(all_from(id))
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("ec2:AuthorizeSecurityGroupIngress", &e))?;
            }
            if admits_itself(group.ip_permissions_egress(), id) {
                self.out
                    .unchanged
                    .push(format!("{id}: EFA egress to itself"));
            } else if self.write(
                "ec2:AuthorizeSecurityGroupEgress",
                format!("{id} all traffic to {id} (EFA)"),
            ) {
                self.ec2
                    .authorize_security_group_egress()
                    .group_id(id)
                    .ip_permissions(all_from(id))
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("ec2:AuthorizeSecurityGroupEgress", &e))?;
            }
        }
        Ok(())
    }
}

//! An isolated VPC (`karpenter.isolatedVPC: true`) has every VPC endpoint the cluster's AWS
//! calls need (`kk_spec::vpc_endpoints`), each of the right type and available.

use super::check;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::snapshot::Snapshot;

/// Endpoint states that no longer carry traffic (EC2 `State`, lower case).
const GONE: [&str; 5] = ["deleted", "deleting", "failed", "rejected", "expired"];

pub(super) fn isolated_vpc_endpoints(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "isolated-vpc-endpoints",
        "an isolated VPC has the endpoints Karpenter, the nodes and the rotator call (ec2, ecr.api, ecr.dkr, s3 gateway, sts, ssm; sqs with an interruption queue)",
    );
    if f.vpc_endpoints.is_empty() {
        return c.skip("the spec's VPC is not isolated (karpenter.isolatedVPC: false): AWS APIs are reached over the internet");
    }
    let found = match &s.vpc_endpoints {
        None => return c.skip("no AWS configuration: the VPC's endpoints were not read"),
        Some(Err(e)) => {
            c.worse(
                Status::Fail,
                e.to_string(),
                "grant ec2:DescribeVpcEndpoints to doctor's AWS identity",
            );
            return c;
        }
        Some(Ok(found)) => found,
    };
    for want in &f.vpc_endpoints {
        // Gone or going endpoints do not count; of the rest, the right type wins.
        let live: Vec<_> = found
            .iter()
            .filter(|e| e.service_name == want.service_name)
            .filter(|e| !GONE.contains(&e.state.as_str()))
            .collect();
        let have = live
            .iter()
            .find(|e| e.kind == want.kind.as_str() && e.state == "available")
            .or_else(|| live.iter().find(|e| e.kind == want.kind.as_str()))
            .or_else(|| live.first())
            .copied();
        let fix = format!(
            "aws ec2 create-vpc-endpoint --vpc-id {} --vpc-endpoint-type {} --service-name {}{}",
            f.vpc_id,
            want.kind.as_str(),
            want.service_name,
            match want.kind {
                kk_spec::vpc_endpoints::EndpointKind::Interface => {
                    " --subnet-ids <the nodes' subnets> --security-group-ids <a group admitting 443 from the nodes> --private-dns-enabled"
                }
                kk_spec::vpc_endpoints::EndpointKind::Gateway =>
                    " --route-table-ids <the nodes' route tables>",
            }
        );
        match have {
            None => c.worse(
                Status::Fail,
                format!(
                    "no endpoint for {} in {} ({})",
                    want.service_name, f.vpc_id, want.needed_by
                ),
                &fix,
            ),
            Some(e) if e.kind != want.kind.as_str() => c.worse(
                Status::Fail,
                format!(
                    "the endpoint for {} is of type {}, not {}",
                    want.service_name,
                    e.kind,
                    want.kind.as_str()
                ),
                &fix,
            ),
            Some(e) if e.state != "available" => c.worse(
                Status::Warn,
                format!(
                    "the endpoint for {} is {}, not available yet",
                    want.service_name, e.state
                ),
                "wait for it to become available (ec2 describe-vpc-endpoints)",
            ),
            Some(_) => {
                c = c.saw(format!(
                    "{}: {} endpoint available",
                    want.service_name,
                    want.kind.as_str()
                ));
            }
        }
    }
    c
}

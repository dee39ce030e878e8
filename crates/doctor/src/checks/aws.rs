//! AWS: the controller's iam:PassRole and the control plane's API port open to the nodes.

use super::check;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::policy::Verdict;
use crate::policy::evaluate;
use crate::snapshot::Snapshot;

pub(super) fn pass_role(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "controller-pass-role",
        "the controller's policy allows iam:PassRole on the node role (evaluated here: moto and IAM offer no simulator we rely on)",
    );
    let (source, policies) = match &s.controller_policies {
        Some(Ok(p)) => (
            format!("role {} (live)", f.controller_role.as_deref().unwrap_or("")),
            p.clone(),
        ),
        Some(Err(e)) => return c.skip(e.to_string()),
        None => match &f.rendered_controller_policy {
            Some(p) => (
                "iam/controller-policy.json (rendered; pass --controller-role to read the live one)"
                    .to_owned(),
                vec![("controller-policy.json".to_owned(), p.clone())],
            ),
            None => return c.skip("no controller policy: pass --controller-role"),
        },
    };
    match evaluate(&policies, "iam:PassRole", &f.node_role_arn) {
        Verdict::Allowed {
            statement,
            conditional,
        } => {
            c = c.saw(format!(
                "{source}: iam:PassRole on {} allowed by {statement}{}",
                f.node_role_arn,
                if conditional { " (under its conditions)" } else { "" }
            ));
        }
        Verdict::Denied { statement } => c.worse(
            Status::Fail,
            format!("{source}: iam:PassRole on {} denied by {statement}", f.node_role_arn),
            "remove the Deny or scope it off the node role",
        ),
        Verdict::NotAllowed => c.worse(
            Status::Fail,
            format!(
                "{source}: no statement of {} policies allows iam:PassRole on {}",
                policies.len(),
                f.node_role_arn
            ),
            "attach iam/controller-policy.json as rendered (statement AllowPassingInstanceRole): without it every launch fails UnauthorizedOperation",
        ),
    }
    c
}

pub(super) fn api_port(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "api-port-from-nodes",
        "the control plane's security group admits the API port from the node security group",
    );
    let (Some(cp), Some(nodes)) = (&s.control_plane_sg, &s.node_sgs) else {
        return c.skip("no AWS configuration: security groups not read");
    };
    let cp = match cp {
        Ok(g) => g,
        Err(e) => {
            c.worse(
                Status::Fail,
                e.to_string(),
                "set aws.controlPlaneSecurityGroupID to the control-plane instances' group",
            );
            return c;
        }
    };
    let node_ids: Vec<String> = match nodes {
        Ok(g) => g.iter().map(|g| g.id.clone()).collect(),
        Err(e) => return c.skip(e.to_string()),
    };
    let port = f.network.api_port;
    let by_group = cp
        .groups_admitted(port)
        .find(|g| node_ids.iter().any(|n| n == g))
        .map(|g| format!("{} admits TCP {port} from {g}", cp.id));
    let by_cidr = cp
        .ingress
        .iter()
        .filter(|r| r.admits_tcp(port))
        .find_map(|r| {
            r.cidrs
                .first()
                .map(|cidr| format!("{} admits TCP {port} from {cidr}", cp.id))
        });
    match (by_group, by_cidr) {
        (Some(e), _) => c = c.saw(e),
        (None, Some(e)) => {
            c = c.saw(format!(
                "{e} (a CIDR rule: make sure it covers the node subnets)"
            ))
        }
        (None, None) => c.worse(
            Status::Fail,
            format!(
                "{} has no ingress rule for TCP {port} from the node security group(s) {node_ids:?}",
                cp.id
            ),
            &format!(
                "aws ec2 authorize-security-group-ingress --group-id {} --protocol tcp --port {port} --source-group <node security group> (iam/discovery.json)",
                cp.id
            ),
        ),
    }
    c
}

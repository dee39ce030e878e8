//! The network facts `apply` and `doctor` both take from a spec — the node security groups (by
//! ID or discovery tag), the control plane's group and the API port — and the one rule for
//! "this ingress rule admits that TCP port".

use crate::ClusterSpec;

/// What the spec says about the path from a node to the API server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeNetwork {
    pub control_plane_security_group: String,
    pub api_port: u16,
    /// The node security groups: by ID, and/or by discovery tag (key, value).
    pub node_security_group_ids: Vec<String>,
    pub node_security_group_tag: Option<(String, String)>,
}

impl NodeNetwork {
    pub fn from_spec(spec: &ClusterSpec) -> Self {
        NodeNetwork {
            control_plane_security_group: spec.aws.control_plane_security_group_id.clone(),
            api_port: spec.api_server.port,
            node_security_group_ids: spec.aws.security_groups.ids.clone(),
            node_security_group_tag: spec
                .aws
                .security_groups
                .discovery_tag
                .as_ref()
                .map(|t| (t.key.clone(), t.value.clone())),
        }
    }
}

/// One ingress permission of a security group.
#[derive(Debug, Clone, Default)]
pub struct Ingress {
    pub protocol: String,
    pub from_port: Option<i32>,
    pub to_port: Option<i32>,
    pub cidrs: Vec<String>,
    pub groups: Vec<String>,
}

impl Ingress {
    /// Whether the rule lets TCP `port` in: all traffic, or TCP with the port in its range
    /// (no range: every port).
    pub fn admits_tcp(&self, port: u16) -> bool {
        let port = i32::from(port);
        self.protocol == "-1"
            || (self.protocol == "tcp"
                && self.from_port.unwrap_or(0) <= port
                && self.to_port.unwrap_or(65535) >= port)
    }
}

#[derive(Debug, Clone, Default)]
pub struct SecurityGroup {
    pub id: String,
    pub ingress: Vec<Ingress>,
}

impl SecurityGroup {
    /// The security groups this group admits TCP `port` from.
    pub fn groups_admitted(&self, port: u16) -> impl Iterator<Item = &str> {
        self.ingress
            .iter()
            .filter(move |r| r.admits_tcp(port))
            .flat_map(|r| r.groups.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(protocol: &str, from: Option<i32>, to: Option<i32>) -> Ingress {
        Ingress {
            protocol: protocol.into(),
            from_port: from,
            to_port: to,
            groups: vec!["sg-node".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_rule_admits_the_port_in_its_range_or_all_traffic() {
        assert!(rule("tcp", Some(6443), Some(6443)).admits_tcp(6443));
        assert!(rule("tcp", Some(1), Some(65535)).admits_tcp(6443));
        assert!(rule("tcp", None, None).admits_tcp(6443));
        assert!(rule("-1", None, None).admits_tcp(6443));
        assert!(!rule("tcp", Some(443), Some(443)).admits_tcp(6443));
        assert!(!rule("udp", Some(6443), Some(6443)).admits_tcp(6443));
        let group = SecurityGroup {
            id: "sg-cp".into(),
            ingress: vec![
                rule("tcp", Some(22), Some(22)),
                rule("tcp", Some(6443), Some(6443)),
            ],
        };
        assert_eq!(group.groups_admitted(6443).collect::<Vec<_>>(), ["sg-node"]);
        assert_eq!(group.groups_admitted(80).count(), 0);
    }
}

//! The texts a Kubean-built cluster keeps about itself, read into the few values adoption
//! needs: kubeadm's ClusterConfiguration and KubeletConfiguration, the cluster-info
//! kubeconfig, the CCM's cloud config, and Kubespray's inventory and variables.

use std::collections::BTreeMap;

use kk_model::yaml::{LoadLimits, load_documents};
use serde_json::Value;

fn yaml(text: &str) -> Option<Value> {
    load_documents(text, LoadLimits::default())
        .ok()?
        .into_iter()
        .next()
        .map(|d| d.value)
}

fn text_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// What adoption reads from kubeadm's `ClusterConfiguration`.
#[derive(Debug, Default, PartialEq)]
pub struct ClusterConfiguration {
    pub control_plane_endpoint: Option<String>,
    pub kubernetes_version: Option<String>,
    pub pod_subnet: Option<String>,
    pub service_subnet: Option<String>,
}

pub fn cluster_configuration(text: &str) -> Option<ClusterConfiguration> {
    let v = yaml(text)?;
    Some(ClusterConfiguration {
        control_plane_endpoint: text_at(&v, &["controlPlaneEndpoint"]).map(str::to_owned),
        kubernetes_version: text_at(&v, &["kubernetesVersion"]).map(str::to_owned),
        pod_subnet: text_at(&v, &["networking", "podSubnet"]).map(str::to_owned),
        service_subnet: text_at(&v, &["networking", "serviceSubnet"]).map(str::to_owned),
    })
}

/// The first `clusterDNS` address of a KubeletConfiguration.
pub fn kubelet_cluster_dns(text: &str) -> Option<String> {
    let v = yaml(text)?;
    v.get("clusterDNS")?
        .as_array()?
        .first()?
        .as_str()
        .map(str::to_owned)
}

/// `host:port` (or `[v6]:port`, or a bare host) → host and port.
pub fn split_endpoint(endpoint: &str) -> (String, Option<u16>) {
    let endpoint = endpoint
        .trim_start_matches("https://")
        .trim_end_matches('/');
    match endpoint.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') => match port.parse() {
            Ok(port) => (host.trim_matches(['[', ']']).to_owned(), Some(port)),
            Err(_) => (endpoint.to_owned(), None),
        },
        _ => (endpoint.to_owned(), None),
    }
}

/// The cluster-info kubeconfig's first cluster: server and base64 CA.
pub fn cluster_info(text: &str) -> Option<(Option<String>, Option<String>)> {
    let v = yaml(text)?;
    let cluster = v.get("clusters")?.as_array()?.first()?.get("cluster")?;
    Some((
        text_at(cluster, &["server"]).map(str::to_owned),
        text_at(cluster, &["certificate-authority-data"]).map(str::to_owned),
    ))
}

/// `KubernetesClusterID` of the CCM's INI cloud config (`[Global]`).
pub fn cloud_config_cluster_id(text: &str) -> Option<String> {
    let mut global = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            global = line.eq_ignore_ascii_case("[global]");
            continue;
        }
        if !global || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("KubernetesClusterID")
        {
            let value = value.trim().trim_matches('"');
            return (!value.is_empty()).then(|| value.to_owned());
        }
    }
    None
}

/// One host of a Kubespray inventory.
#[derive(Debug, Default, PartialEq)]
pub struct InventoryHost {
    pub name: String,
    pub ip: Option<String>,
    pub override_hostname: Option<String>,
    pub node_labels: BTreeMap<String, String>,
    pub node_taints: Vec<String>,
    pub ansible_user: Option<String>,
    pub ansible_port: Option<u16>,
}

/// A Kubespray inventory (`hosts.yml`): hosts, the groups that matter here, `all.vars`.
#[derive(Debug, Default, PartialEq)]
pub struct Inventory {
    pub hosts: Vec<InventoryHost>,
    /// Group name → member host names (only the groups listed with `hosts:`).
    pub groups: BTreeMap<String, Vec<String>>,
    pub ansible_user: Option<String>,
    pub ansible_port: Option<u16>,
}

fn port_of(value: Option<&Value>) -> Option<u16> {
    match value? {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

pub fn inventory(text: &str) -> Option<Inventory> {
    let v = yaml(text)?;
    let all = v.get("all")?;
    let mut inventory = Inventory {
        ansible_user: text_at(all, &["vars", "ansible_user"]).map(str::to_owned),
        ansible_port: port_of(all.get("vars").and_then(|v| v.get("ansible_port"))),
        ..Default::default()
    };
    for (name, vars) in all.get("hosts")?.as_object()? {
        let ip = ["ip", "access_ip", "ansible_host"]
            .iter()
            .find_map(|k| text_at(vars, &[k]));
        let node_labels = vars
            .get("node_labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let node_taints = vars
            .get("node_taints")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        inventory.hosts.push(InventoryHost {
            name: name.clone(),
            ip: ip.map(str::to_owned),
            override_hostname: text_at(vars, &["kube_override_hostname"]).map(str::to_owned),
            node_labels,
            node_taints,
            ansible_user: text_at(vars, &["ansible_user"]).map(str::to_owned),
            ansible_port: port_of(vars.get("ansible_port")),
        });
    }
    if let Some(children) = all.get("children").and_then(Value::as_object) {
        for (group, body) in children {
            if let Some(members) = body.get("hosts").and_then(Value::as_object) {
                inventory
                    .groups
                    .insert(group.clone(), members.keys().cloned().collect());
            }
        }
    }
    Some(inventory)
}

/// Kubespray's `group_vars.yml` as a map (scalars only matter here).
pub fn variables(text: &str) -> Option<serde_json::Map<String, Value>> {
    match yaml(text)? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// A scalar variable as text (`kube_version: 1.35.5` and `"1.35.5"` alike).
pub fn variable(vars: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    match vars.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The `n`-th address of an IPv4 CIDR (Kubespray's `skydns_server` is the third of the
/// service range).
pub fn nth_address(cidr: &str, n: u32) -> Option<String> {
    let (base, bits) = cidr.split_once('/')?;
    let bits: u32 = bits.parse().ok()?;
    let ip: std::net::Ipv4Addr = base.parse().ok()?;
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits.min(32))
    };
    let address = (u32::from(ip) & mask).checked_add(n)?;
    Some(std::net::Ipv4Addr::from(address).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeadm_cluster_configuration() {
        let c = cluster_configuration(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: cluster.local\n\
             controlPlaneEndpoint: api.lab.internal:7443\nkubernetesVersion: v1.36.3\n\
             networking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n",
        )
        .unwrap();
        assert_eq!(
            c.control_plane_endpoint.as_deref(),
            Some("api.lab.internal:7443")
        );
        assert_eq!(c.kubernetes_version.as_deref(), Some("v1.36.3"));
        assert_eq!(c.pod_subnet.as_deref(), Some("10.244.0.0/16"));
        assert_eq!(c.service_subnet.as_deref(), Some("10.96.0.0/12"));
        assert_eq!(
            split_endpoint("api.lab.internal:7443"),
            ("api.lab.internal".into(), Some(7443))
        );
        assert_eq!(
            split_endpoint("https://10.0.0.1:6443/"),
            ("10.0.0.1".into(), Some(6443))
        );
        assert_eq!(split_endpoint("api.example"), ("api.example".into(), None));
    }

    #[test]
    fn ccm_cluster_id_only_from_global() {
        let text = "[Global]\n# KubernetesClusterID = old\nKubernetesClusterID = \"lab\"\n[Other]\nKubernetesClusterID=x\n";
        assert_eq!(cloud_config_cluster_id(text).as_deref(), Some("lab"));
        assert_eq!(
            cloud_config_cluster_id("[Other]\nKubernetesClusterID=x\n"),
            None
        );
    }

    #[test]
    fn kubespray_inventory_and_variables() {
        let inv = inventory(
            "all:\n  vars: {ansible_user: ec2-user, ansible_port: 2222}\n  hosts:\n    cp-1: {ip: 10.0.1.10, kube_override_hostname: ip-10-0-1-10.ec2.internal}\n    \
             infra-1:\n      access_ip: 10.0.1.20\n      node_labels: {node-role.kubernetes.io/infra: ''}\n      node_taints: ['CriticalAddonsOnly=true:NoSchedule']\n  \
             children:\n    kube_control_plane: {hosts: {cp-1: null}}\n    etcd: {hosts: {cp-1: null}}\n    kube_node: {hosts: {infra-1: null}}\n    \
             k8s_cluster: {children: {kube_control_plane: null, kube_node: null}}\n",
        )
        .unwrap();
        assert_eq!(inv.ansible_user.as_deref(), Some("ec2-user"));
        assert_eq!(inv.ansible_port, Some(2222));
        assert_eq!(inv.hosts.len(), 2);
        assert_eq!(inv.hosts[1].ip.as_deref(), Some("10.0.1.20"));
        assert_eq!(
            inv.hosts[1].node_taints,
            ["CriticalAddonsOnly=true:NoSchedule"]
        );
        assert_eq!(inv.groups["kube_control_plane"], ["cp-1"]);
        assert!(!inv.groups.contains_key("k8s_cluster"));
        let vars = variables("kube_version: 1.35\nenable_nodelocaldns: false\n").unwrap();
        assert_eq!(variable(&vars, "kube_version").as_deref(), Some("1.35"));
        assert_eq!(
            variable(&vars, "enable_nodelocaldns").as_deref(),
            Some("false")
        );
        assert_eq!(
            nth_address("10.233.0.0/18", 3).as_deref(),
            Some("10.233.0.3")
        );
        assert_eq!(
            nth_address("10.96.0.0/12", 10).as_deref(),
            Some("10.96.0.10")
        );
    }
}

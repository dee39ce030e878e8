//! `kubean/`: the Kubespray inventory and variables as Kubean ConfigMaps, the Cluster and
//! the ClusterOperation that builds the control plane, etcd and infra workers.

use kk_model::kubean as model;
use kk_spec::{ElasticCluster, NodeRole, images, versions};
use serde_json::{Map, Value, json};

use crate::names::{self, INFRA_ROLE_LABEL, MANAGED_BY};
use crate::pools::to_value;
use crate::{Bundle, RenderError};

fn yaml_text(value: &Value) -> Result<String, RenderError> {
    serde_saphyr::to_string(value).map_err(|e| RenderError::Serialize {
        path: "kubean".into(),
        message: e.to_string(),
    })
}

/// The Kubespray inventory (`hosts.yml`).
pub fn hosts_yml(cluster: &ElasticCluster) -> Value {
    let k = &cluster.spec.kubean;
    let mut hosts = Map::new();
    let mut groups: [(&str, Map<String, Value>); 3] = [
        ("kube_control_plane", Map::new()),
        ("etcd", Map::new()),
        ("kube_node", Map::new()),
    ];
    for node in &k.nodes {
        let mut vars = Map::new();
        vars.insert("ip".into(), json!(node.ip));
        vars.insert("access_ip".into(), json!(node.ip));
        vars.insert("ansible_host".into(), json!(node.ip));
        if let Some(dns) = &node.private_dns_name {
            // Kubespray never sets --provider-id; the AWS CCM finds an instance by its
            // private DNS name, so the node must register under that name.
            vars.insert("kube_override_hostname".into(), json!(dns));
        }
        if node.roles.contains(&NodeRole::Infra) {
            vars.insert("node_labels".into(), json!({ INFRA_ROLE_LABEL: "" }));
            if !k.infra_taints.is_empty() {
                vars.insert("node_taints".into(), json!(k.infra_taints));
            }
        }
        hosts.insert(node.name.clone(), Value::Object(vars));
        for role in &node.roles {
            let group = match role {
                NodeRole::ControlPlane => 0,
                NodeRole::Etcd => 1,
                NodeRole::Infra => 2,
            };
            groups[group].1.insert(node.name.clone(), Value::Null);
        }
    }
    let mut children = Map::new();
    for (name, members) in groups {
        children.insert(name.into(), json!({ "hosts": members }));
    }
    children.insert(
        "k8s_cluster".into(),
        json!({ "children": { "kube_control_plane": null, "kube_node": null } }),
    );
    children.insert("calico_rr".into(), json!({ "hosts": {} }));
    json!({
        "all": {
            "vars": {
                "ansible_user": k.ssh.user,
                "ansible_port": k.ssh.port,
                "ansible_connection": "ssh",
            },
            "hosts": hosts,
            "children": children,
        }
    })
}

/// Kubespray variables (`group_vars.yml`).
pub fn group_vars(cluster: &ElasticCluster) -> Value {
    let spec = &cluster.spec;
    let version = spec.kubernetes_version.trim_start_matches('v');
    let mut lb = Map::new();
    if let Some(address) = &spec.api_server.load_balancer_address {
        lb.insert("address".into(), json!(address));
    }
    lb.insert("port".into(), json!(spec.api_server.port));
    let mut vars = json!({
        "kube_version": version,
        // One port end to end: the apiservers listen on it (kubeadm bindPort), the load balancer
        // forwards it unchanged, nodes join it, the security group opens it. Kubespray's
        // loadbalancer_apiserver.port is only the address clients use; without this the
        // apiservers stay on 6443 (kubespray roles/kubespray_defaults/defaults/main/main.yml).
        "kube_apiserver_port": spec.api_server.port,
        "container_manager": "containerd",
        "kube_network_plugin": spec.kubean.network_plugin,
        // No AWS value exists for external_cloud_provider: the kubelet runs with
        // --cloud-provider=external and cloud/ installs the AWS cloud controller manager.
        "cloud_provider": "external",
        "external_cloud_provider": "manual",
        "apiserver_loadbalancer_domain_name": spec.api_server.dns_name,
        "loadbalancer_apiserver": lb,
        "loadbalancer_apiserver_localhost": false,
        "supplementary_addresses_in_ssl_keys": [spec.api_server.dns_name],
        // true deletes the cluster-info ConfigMap: token + CA-hash discovery, which every
        // Karpenter node uses to join, would break.
        "remove_anonymous_access": false,
    });
    if let Some(map) = vars.as_object_mut() {
        for (key, value) in crate::authenticator::kubespray_vars(cluster) {
            map.insert(key.into(), value);
        }
        for (key, value) in offline_vars(cluster) {
            map.insert(key.into(), value);
        }
        // kube-scheduler's default topology spread; Karpenter gets the same list.
        if let Some(scheduler) = &spec.scheduler {
            map.insert(
                "kube_scheduler_profiles".into(),
                scheduler.kube_scheduler_profiles(),
            );
        }
    }
    vars
}

/// Kubespray's offline variables (docs/operations/offline-environment.md) when the spec names a
/// mirror: every image repository Kubespray knows points at it, its nodes' containerd gets the
/// same mirrors as ours (`containerd_registries_mirrors`), and files come from `files_repo`.
fn offline_vars(cluster: &ElasticCluster) -> Vec<(&'static str, Value)> {
    let Some(registry) = &cluster.spec.registry else {
        return Vec::new();
    };
    let mirror = &registry.mirror;
    let mut vars = vec![("registry_host", json!(mirror))];
    for key in [
        "kube_image_repo",
        "gcr_image_repo",
        "github_image_repo",
        "docker_image_repo",
        "quay_image_repo",
    ] {
        vars.push((key, json!(mirror)));
    }
    let mirrors: Vec<Value> = images::MIRRORED_REGISTRIES
        .iter()
        .map(|(prefix, _)| {
            json!({
                "prefix": prefix,
                "mirrors": [{ "host": format!("https://{mirror}"), "capabilities": ["pull", "resolve"], "skip_verify": false }],
            })
        })
        .collect();
    vars.push(("containerd_registries_mirrors", json!(mirrors)));
    if let Some(files) = &registry.files_repo {
        vars.push(("files_repo", json!(files)));
    }
    vars
}

fn config_map(cluster: &ElasticCluster, name: &str, key: &str, text: String) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": cluster.spec.kubean.namespace,
            "labels": { MANAGED_BY.0: MANAGED_BY.1 },
        },
        "data": { key: text },
    })
}

/// A ClusterOperation running one Kubespray/Kubean playbook on the cluster, with the spec's
/// pinned spray-job image (the Kubean release whose support matrix `kk_spec` checks).
pub(crate) fn cluster_operation(
    cluster: &ElasticCluster,
    name: &str,
    action: &str,
    extra_args: Option<String>,
    pre_hook: &[&str],
    post_hook: &[&str],
) -> model::ClusterOperation {
    let hook = |action: &&str| model::HookAction {
        action_type: "playbook".into(),
        action: (*action).into(),
        ..Default::default()
    };
    model::ClusterOperation {
        api_version: model::API_VERSION.into(),
        kind: "ClusterOperation".into(),
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into()),
            ..Default::default()
        },
        spec: model::ClusterOperationSpec {
            cluster: names::kubean_cluster(cluster).to_owned(),
            image: images::reference_of(&cluster.spec, versions::KUBEAN)
                .unwrap_or_else(|| cluster.spec.kubean.spray_job_image.clone()),
            action_type: "playbook".into(),
            action: action.into(),
            extra_args,
            pre_hook: pre_hook.iter().map(hook).collect(),
            post_hook: post_hook.iter().map(hook).collect(),
            ..Default::default()
        },
        status: None,
        extra: Default::default(),
    }
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    // Adopted: Kubean already built the cluster and keeps its own objects; writing ours would
    // overwrite its inventory and run cluster.yml again.
    if cluster.spec.kubean.existing_cluster.is_some() {
        return Ok(());
    }
    let name = &cluster.metadata.name;
    let namespace = &cluster.spec.kubean.namespace;
    let hosts = config_map(
        cluster,
        &names::hosts_configmap(cluster),
        "hosts.yml",
        yaml_text(&hosts_yml(cluster))?,
    );
    let vars = config_map(
        cluster,
        &names::vars_configmap(cluster),
        "group_vars.yml",
        yaml_text(&group_vars(cluster))?,
    );
    let reference = |name: String| model::ObjectRef {
        namespace: namespace.clone(),
        name,
        extra: Default::default(),
    };
    let kubean_cluster = model::Cluster {
        api_version: model::API_VERSION.into(),
        kind: "Cluster".into(),
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [
                    ("clusterName".to_owned(), name.clone()),
                    (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: model::ClusterSpec {
            hosts_conf_ref: reference(names::hosts_configmap(cluster)),
            vars_conf_ref: reference(names::vars_configmap(cluster)),
            ssh_auth_ref: Some(reference(
                cluster.spec.kubean.ssh.private_key_secret.clone(),
            )),
            ..Default::default()
        },
        status: None,
        extra: Default::default(),
    };
    let operation = cluster_operation(
        cluster,
        &format!("{name}-install"),
        "cluster.yml",
        None,
        &["ping.yml", "disable-firewalld.yml"],
        &["kubeconfig.yml", "cluster-info.yml"],
    );
    bundle.add_yaml("kubean/1-hosts-conf.yaml", &[hosts])?;
    bundle.add_yaml("kubean/2-vars-conf.yaml", &[vars])?;
    bundle.add_yaml("kubean/3-cluster.yaml", &[to_value(&kubean_cluster)?])?;
    bundle.add_yaml("kubean/4-cluster-operation.yaml", &[to_value(&operation)?])?;
    Ok(())
}

#[cfg(test)]
mod adopted {
    use kk_spec::{EXAMPLE, parse_spec};

    #[test]
    fn an_adopted_cluster_gets_no_kubean_objects_and_operations_name_kubeans_cluster() {
        let text = EXAMPLE.replace(
            "    namespace: kubean-system\n",
            "    namespace: kubean-system\n    existingCluster: prod-kubean\n",
        );
        let cluster = parse_spec(&text, "s.yaml").unwrap().spec;
        let mut bundle = crate::Bundle::default();
        super::render(&cluster, &mut bundle).unwrap();
        assert!(bundle.files.is_empty());
        let op = super::cluster_operation(&cluster, "x", "upgrade-cluster.yml", None, &[], &[]);
        assert_eq!(op.spec.cluster, "prod-kubean");
        let plain = parse_spec(EXAMPLE, "s.yaml").unwrap().spec;
        super::render(&plain, &mut bundle).unwrap();
        assert_eq!(
            bundle
                .files
                .keys()
                .filter(|p| p.starts_with("kubean/"))
                .count(),
            4
        );
    }
}

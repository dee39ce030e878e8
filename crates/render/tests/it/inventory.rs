//! The rendered Kubespray inventory, read by Ansible itself: `ansible-inventory --list` on
//! kubean/hosts-conf.yaml's hosts.yml (and with vars-conf.yaml's group_vars.yml as
//! group_vars/all.yml), so what Kubean's spray job sees is what we assert.
//!
//! Needs ansible-inventory (PyPI ansible-core). Missing: fails when CI=true, otherwise skips
//! with one loud SKIP line.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use tempfile::TempDir;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn ansible_or_skip() -> bool {
    let present = Command::new("ansible-inventory")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return true;
    }
    let why = "ansible-inventory not installed (pip install ansible-core); run .ci/setup-tools";
    if in_ci() {
        panic!("{why}");
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        // Straight to stderr, past libtest's capture.
        let _ = writeln!(std::io::stderr(), "SKIP: {why}");
    });
    false
}

/// data.<key> of the one ConfigMap under kubean/ that has it (found by content, not by file
/// name: kubean/hosts-conf.yaml and kubean/vars-conf.yaml when this was written).
fn config_map_data(bundle: &kk_render::Bundle, key: &str) -> String {
    let mut found = Vec::new();
    for (path, text) in &bundle.files {
        if !path.starts_with("kubean/") {
            continue;
        }
        let docs = kk_model::yaml::load_documents(text, Default::default())
            .unwrap_or_else(|e| panic!("{path} is not YAML: {e:?}"));
        for doc in docs {
            if doc.value["kind"] == "ConfigMap"
                && let Some(data) = doc.value["data"][key].as_str()
            {
                found.push((path.clone(), data.to_owned()));
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "expected one ConfigMap with data.{key:?} under kubean/, found {:?}",
        found.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    found.remove(0).1
}

fn rendered_example() -> kk_render::Bundle {
    let loaded = kk_spec::parse_spec(kk_spec::EXAMPLE, kk_spec::EXAMPLE_FILE)
        .unwrap_or_else(|e| panic!("the example does not parse: {e:?}"));
    let ca = kk_render::inline_ca_pem(&loaded.spec)
        .expect("the example carries caBundle.base64")
        .expect("caBundle.base64 decodes");
    kk_render::render(&loaded.spec, &ca).expect("the example renders")
}

/// `ansible-inventory -i <dir>/hosts.yml --list`, strict: only the YAML inventory plugin, and
/// an inventory it cannot parse is an error (by default Ansible warns and goes on empty).
fn ansible_inventory(dir: &Path) -> Value {
    let home = dir.join("ansible-home");
    std::fs::create_dir_all(home.join("tmp")).unwrap();
    let config = dir.join("ansible.cfg");
    std::fs::write(&config, "").unwrap();
    let out = Command::new("ansible-inventory")
        .arg("-i")
        .arg(dir.join("hosts.yml"))
        .arg("--list")
        .current_dir(dir)
        .env("ANSIBLE_CONFIG", &config)
        .env("ANSIBLE_HOME", &home)
        .env("ANSIBLE_LOCAL_TEMP", home.join("tmp"))
        .env("ANSIBLE_INVENTORY_ENABLED", "yaml")
        .env("ANSIBLE_INVENTORY_UNPARSED_FAILED", "true")
        .env("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "true")
        .env("ANSIBLE_NOCOLOR", "1")
        .output()
        .expect("ansible-inventory runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ansible-inventory failed:\n{stderr}");
    assert!(
        !stderr.contains("[WARNING]"),
        "ansible-inventory warned:\n{stderr}"
    );
    serde_json::from_slice(&out.stdout).expect("ansible-inventory --list prints JSON")
}

fn names(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// (name, ip, private DNS name, infra) of the example's fixed nodes.
const NODES: [(&str, &str, &str, bool); 5] = [
    ("cp-1", "10.0.1.10", "ip-10-0-1-10.ec2.internal", false),
    ("cp-2", "10.0.2.10", "ip-10-0-2-10.ec2.internal", false),
    ("cp-3", "10.0.3.10", "ip-10-0-3-10.ec2.internal", false),
    ("infra-1", "10.0.1.20", "ip-10-0-1-20.ec2.internal", true),
    ("infra-2", "10.0.2.20", "ip-10-0-2-20.ec2.internal", true),
];

#[test]
fn ansible_reads_the_hosts_yml_groups_and_hostvars() {
    if !ansible_or_skip() {
        return;
    }
    let bundle = rendered_example();
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("hosts.yml"),
        config_map_data(&bundle, "hosts.yml"),
    )
    .unwrap();
    let inv = ansible_inventory(dir.path());

    let control_plane = ["cp-1", "cp-2", "cp-3"];
    assert_eq!(names(&inv["kube_control_plane"]["hosts"]), control_plane);
    assert_eq!(names(&inv["etcd"]["hosts"]), control_plane);
    assert_eq!(names(&inv["kube_node"]["hosts"]), ["infra-1", "infra-2"]);
    let k8s_children = names(&inv["k8s_cluster"]["children"]);
    for child in ["kube_control_plane", "kube_node"] {
        assert!(
            k8s_children.contains(&child),
            "k8s_cluster children {k8s_children:?} lack {child}"
        );
    }
    let all_children = names(&inv["all"]["children"]);
    for group in [
        "kube_control_plane",
        "etcd",
        "kube_node",
        "k8s_cluster",
        "calico_rr",
    ] {
        assert!(
            all_children.contains(&group),
            "all.children {all_children:?} lack {group}"
        );
    }

    let hostvars = inv["_meta"]["hostvars"]
        .as_object()
        .expect("_meta.hostvars");
    assert_eq!(
        hostvars.keys().map(String::as_str).collect::<Vec<_>>(),
        NODES.map(|n| n.0),
        "the inventory's hosts"
    );
    for (name, ip, dns, infra) in NODES {
        let mut expected = json!({
            "access_ip": ip,
            "ansible_connection": "ssh",
            "ansible_host": ip,
            "ansible_port": 22,
            "ansible_user": "ec2-user",
            "ip": ip,
            "kube_override_hostname": dns,
        });
        if infra {
            expected["node_labels"] = json!({ "node-role.kubernetes.io/infra": "" });
            expected["node_taints"] = json!(["CriticalAddonsOnly=true:NoSchedule"]);
        }
        assert_eq!(hostvars[name], expected, "hostvars of {name}");
    }
}

#[test]
fn group_vars_yml_has_the_external_cloud_provider_settings() {
    let bundle = rendered_example();
    let text = config_map_data(&bundle, "group_vars.yml");
    let docs = kk_model::yaml::load_documents(&text, Default::default())
        .unwrap_or_else(|e| panic!("group_vars.yml is not YAML: {e:?}"));
    assert_eq!(docs.len(), 1);
    let vars = &docs[0].value;
    assert_eq!(vars["cloud_provider"], "external");
    assert_eq!(vars["external_cloud_provider"], "manual");
    // true would delete cluster-info: token discovery, which every Karpenter node uses, breaks.
    assert_eq!(vars["remove_anonymous_access"], false);
    assert!(
        names(&vars["supplementary_addresses_in_ssl_keys"]).contains(&"api.demo.internal"),
        "supplementary_addresses_in_ssl_keys: {}",
        vars["supplementary_addresses_in_ssl_keys"]
    );
    assert_eq!(vars["kube_version"], "1.35.5");
    assert_eq!(
        vars["apiserver_loadbalancer_domain_name"],
        "api.demo.internal"
    );
}

/// The same variables as Ansible (PyYAML, YAML 1.1) reads them, as group_vars/all.yml next
/// to the inventory: every host sees them with the right types ("1.35.5" stays a string,
/// false stays a boolean).
#[test]
fn ansible_reads_group_vars_yml_with_the_right_types() {
    if !ansible_or_skip() {
        return;
    }
    let bundle = rendered_example();
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("hosts.yml"),
        config_map_data(&bundle, "hosts.yml"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("group_vars")).unwrap();
    std::fs::write(
        dir.path().join("group_vars/all.yml"),
        config_map_data(&bundle, "group_vars.yml"),
    )
    .unwrap();
    let inv = ansible_inventory(dir.path());
    for (name, ..) in NODES {
        let vars = &inv["_meta"]["hostvars"][name];
        assert_eq!(vars["cloud_provider"], "external", "{name}");
        assert_eq!(vars["external_cloud_provider"], "manual", "{name}");
        assert_eq!(vars["remove_anonymous_access"], false, "{name}");
        assert_eq!(
            vars["supplementary_addresses_in_ssl_keys"],
            json!(["api.demo.internal"]),
            "{name}"
        );
        assert_eq!(vars["kube_version"], "1.35.5", "{name}");
        assert_eq!(
            vars["loadbalancer_apiserver"],
            json!({ "port": 6443 }),
            "{name}"
        );
        assert_eq!(vars["loadbalancer_apiserver_localhost"], false, "{name}");
        assert_eq!(vars["container_manager"], "containerd", "{name}");
    }
}

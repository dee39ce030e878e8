//! `init --discover` against the testbed's apiserver when the cluster itself is hostile (issue
//! 47 item 10): a Node writes its own `status.nodeInfo`, so whoever runs a kubelet chooses the
//! bytes discovery quotes back. The attack: terminal escapes and a newline that would start a
//! YAML key in the kubelet version; the spec and the findings must show them, not obey them.

use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kk_testkit::repo;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// OSC 0 (set the window title) ended by BEL, then a newline and what would be a new key.
const KUBELET_VERSION: &str = "\x1b]0;pwned\x07\n# injected: true";

fn unique() -> String {
    let mut b = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!("{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

fn has_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| k == key || has_key(v, key)),
        Value::Array(list) => list.iter().any(|v| has_key(v, key)),
        _ => false,
    }
}

#[test]
fn a_kubelet_version_with_terminal_escapes_is_shown_escaped_and_adds_no_key() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "init --discover: hostile nodeInfo")
    else {
        return;
    };
    // The kubeadm ConfigMap is cluster-wide state other testbed tests could read.
    let _turn = crate::testbed_apply_turn();
    let node_name = format!("ip-10-9-{}.ec2.internal", unique());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(tb.admin());
    let nodes: Api<Node> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let had_kubeadm_config = rt
        .block_on(config_maps.get_opt("kubeadm-config"))
        .unwrap()
        .is_some();
    rt.block_on(async {
        // The version discovery compares the kubelets with: only a difference is reported.
        if !had_kubeadm_config {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": { "name": "kubeadm-config" },
                "data": { "ClusterConfiguration":
                    "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.3\n" },
            }))
            .unwrap();
            config_maps.create(&PostParams::default(), &cm).await.unwrap();
        }
        let node: Node =
            serde_json::from_value(json!({ "metadata": { "name": node_name } })).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        // As the kubelet would (here the admin, through the status subresource).
        let status = json!({ "status": { "nodeInfo": { "kubeletVersion": KUBELET_VERSION } } });
        nodes
            .patch_status(&node_name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let stored = nodes.get(&node_name).await.unwrap();
        assert_eq!(
            stored.status.unwrap().node_info.unwrap().kubelet_version,
            KUBELET_VERSION,
            "the apiserver keeps the bytes as written"
        );
    });

    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .envs(&tb.env)
        .args(["init", "--discover", "--no-aws", "--kubeconfig"])
        .arg(&tb.kubeconfig)
        .output()
        .unwrap();

    rt.block_on(async {
        let _ = nodes.delete(&node_name, &DeleteParams::default()).await;
        if !had_kubeadm_config {
            let _ = config_maps
                .delete("kubeadm-config", &DeleteParams::default())
                .await;
        }
    });

    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}{stderr}");
    // The attack reached the output (else nothing was tested), escaped, on one line.
    let escaped = "\\e]0;pwned\\u{7}\\n# injected: true";
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("finding: ") && l.contains(escaped)),
        "{stderr}"
    );
    let quoted: Vec<&str> = stdout.lines().filter(|l| l.contains("pwned")).collect();
    assert_eq!(quoted.len(), 1, "{stdout}");
    assert!(
        quoted[0].trim_start().starts_with("#   - "),
        "{}",
        quoted[0]
    );
    assert!(quoted[0].contains(escaped), "{}", quoted[0]);
    // No raw ESC or BEL anywhere, and no line that only the attack could have started.
    for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.contains(['\x1b', '\x07']),
            "{name} holds a raw ESC or BEL"
        );
    }
    assert!(
        !stdout
            .lines()
            .any(|l| l.trim_start().starts_with("# injected")
                || l.trim_start().starts_with("injected")),
        "{stdout}"
    );
    // The spec is YAML without an `injected` key.
    let docs = kk_model::yaml::load_documents(&stdout, kk_model::yaml::LoadLimits::default())
        .expect("the discovered spec is YAML");
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].value["kind"], "ElasticCluster");
    assert!(!has_key(&docs[0].value, "injected"), "{stdout}");
}

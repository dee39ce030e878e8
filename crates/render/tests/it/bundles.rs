//! Rendered bundles: snapshots, acceptance by the real CRD schemas and CEL rules, determinism.

use std::path::PathBuf;

use kk_render::{Bundle, render};
use kk_spec::{ElasticCluster, parse_spec};

fn specs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs")
}

/// (name, spec) for the built-in example and every valid fixture.
fn all_specs() -> Vec<(String, ElasticCluster)> {
    let mut out = vec![(
        "example".to_owned(),
        parse_spec(kk_spec::EXAMPLE, "example").unwrap().spec,
    )];
    let mut files: Vec<PathBuf> = std::fs::read_dir(specs_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let loaded = parse_spec(&text, &name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        out.push((name, loaded.spec));
    }
    assert!(out.len() >= 4, "the example and at least 3 fixtures");
    out
}

/// Every fixture uses the same test CA (fixtures/specs/pki/ca.crt), whatever its source.
fn ca_pem(cluster: &ElasticCluster) -> Vec<u8> {
    match kk_render::inline_ca_pem(cluster) {
        Some(pem) => pem.unwrap(),
        None => std::fs::read(specs_dir().join("pki/ca.crt")).unwrap(),
    }
}

fn render_spec(cluster: &ElasticCluster) -> Bundle {
    render(cluster, &ca_pem(cluster)).unwrap()
}

fn flatten(bundle: &Bundle) -> String {
    let mut text = String::new();
    for (path, content) in &bundle.files {
        text.push_str(&format!("=== {path} ===\n{content}"));
        if !content.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

#[test]
fn bundles_match_their_snapshots() {
    for (name, cluster) in all_specs() {
        insta::assert_snapshot!(name.clone(), flatten(&render_spec(&cluster)));
    }
}

#[test]
fn rendering_is_byte_for_byte_deterministic() {
    for (name, cluster) in all_specs() {
        assert_eq!(render_spec(&cluster), render_spec(&cluster), "{name}");
    }
}

#[test]
fn every_karpenter_and_kubean_object_passes_the_crd_schema_and_cel_rules() {
    let known = kk_crd_check::known_kinds();
    let mut checked = 0;
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        for (path, object) in bundle.manifests() {
            let api = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            if !known.contains(&(api.clone(), kind.clone())) {
                continue;
            }
            let violations = kk_crd_check::validate(&object).unwrap();
            assert!(
                violations.is_empty(),
                "{name}/{path} {kind}: {}",
                violations
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            checked += 1;
        }
    }
    // example: 4 pools, 4 classes, Cluster + ClusterOperation, and so on for the fixtures.
    assert!(checked >= 20, "only {checked} objects checked");
}

#[test]
fn typed_models_round_trip_the_rendered_objects() {
    use kk_model::karpenter::{EC2NodeClass, NodePool};
    use kk_model::kubean::{Cluster, ClusterOperation};
    fn same<T: serde::de::DeserializeOwned + serde::Serialize>(v: &serde_json::Value) {
        let typed: T = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(&serde_json::to_value(typed).unwrap(), v);
    }
    for (_, cluster) in all_specs() {
        for (_, object) in render_spec(&cluster).manifests() {
            match object["kind"].as_str() {
                Some("EC2NodeClass") => same::<EC2NodeClass>(&object),
                Some("NodePool") => same::<NodePool>(&object),
                Some("Cluster") => same::<Cluster>(&object),
                Some("ClusterOperation") => same::<ClusterOperation>(&object),
                _ => {}
            }
        }
    }
}

#[test]
fn ca_hash_equals_what_openssl_computes_for_the_test_ca() {
    // `openssl x509 -pubkey -noout -in fixtures/specs/pki/ca.crt | openssl pkey -pubin -outform der | sha256sum`
    let pem = std::fs::read(specs_dir().join("pki/ca.crt")).unwrap();
    let ca = kk_render::ClusterCa::from_pem(&pem).unwrap();
    assert_eq!(
        ca.cert_hash,
        "sha256:21653cfdac168d446a75e375b2a11321106dc4c67610b50c31d2db403838754e"
    );
}

#[test]
fn karpenter_values_fit_a_non_eks_control_plane() {
    let (_, cluster) = all_specs()
        .into_iter()
        .find(|(n, _)| n == "example")
        .unwrap();
    let bundle = render_spec(&cluster);
    let docs =
        kk_model::yaml::load_documents(&bundle.files["karpenter/values.yaml"], Default::default())
            .unwrap();
    let v = &docs[0].value;
    assert_eq!(
        v["settings"]["clusterEndpoint"],
        "https://api.demo.internal:6443"
    );
    assert_eq!(v["settings"]["eksControlPlane"], false);
    assert_eq!(
        v["settings"]["clusterCABundle"],
        cluster.spec.ca_bundle.base64.clone().unwrap()
    );
    assert_eq!(v["nodeSelector"]["node-role.kubernetes.io/infra"], "");
    // Instance-profile mode: no static keys anywhere.
    assert!(!bundle.files["karpenter/values.yaml"].contains("AWS_SECRET_ACCESS_KEY"));
    let (_, static_keys) = all_specs()
        .into_iter()
        .find(|(n, _)| n == "secrets-manager-arm")
        .unwrap();
    let text = &render_spec(&static_keys).files["karpenter/values.yaml"];
    assert!(text.contains("secretKeyRef") && text.contains("karpenter-aws"));
}

#[test]
fn ssm_mode_userdata_never_contains_a_token_and_static_mode_does() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        for (path, object) in bundle.manifests() {
            if object["kind"] != "EC2NodeClass" {
                continue;
            }
            let user_data = object["spec"]["userData"].as_str().unwrap();
            let token = cluster.spec.join.token.clone();
            match token {
                Some(t) => assert!(user_data.contains(&t), "{name}/{path}"),
                None => assert!(!user_data.contains("TOKEN='"), "{name}/{path}"),
            }
            let tracing = user_data
                .lines()
                .any(|l| l.trim_start().starts_with("set -") && l.contains('x'));
            assert!(!tracing, "{name}/{path}: xtrace would print the token");
        }
    }
}

#[test]
fn a_pinned_ca_hash_that_does_not_match_the_bundle_is_refused() {
    let (_, mut cluster) = all_specs()
        .into_iter()
        .find(|(n, _)| n == "static-minimal")
        .unwrap();
    cluster.spec.join.ca_cert_hash = Some(format!("sha256:{}", "0".repeat(64)));
    let err = render(&cluster, &ca_pem(&cluster)).unwrap_err().to_string();
    assert!(err.contains("does not match the CA bundle"), "{err}");
    assert!(
        err.contains("sha256:21653cfdac168d446a75e375b2a11321106dc4c67610b50c31d2db403838754e"),
        "{err}"
    );
    // The right hash renders.
    cluster.spec.join.ca_cert_hash =
        Some("sha256:21653cfdac168d446a75e375b2a11321106dc4c67610b50c31d2db403838754e".into());
    assert!(render(&cluster, &ca_pem(&cluster)).is_ok());
}

fn spec_named(name: &str) -> ElasticCluster {
    all_specs()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no spec {name}"))
        .1
}

fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    kk_model::yaml::load_documents(text, Default::default())
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .collect()
}

/// The `group_vars.yml` Kubespray reads, from the vars ConfigMap.
fn group_vars(bundle: &Bundle) -> serde_json::Value {
    let cm = &yaml_docs(&bundle.files["kubean/2-vars-conf.yaml"])[0];
    yaml_docs(cm["data"]["group_vars.yml"].as_str().unwrap()).remove(0)
}

/// Issue 11 item 8. Kubespray (kubernetes-sigs/kubespray
/// roles/kubespray_defaults/defaults/main/main.yml, master 46dbdd39, 2026-08-21):
/// `kube_apiserver_port: 6443` is where the apiservers listen (kubeadm `bindPort`), while
/// `loadbalancer_apiserver.port` only forms the endpoint clients use. Setting only the latter
/// leaves the apiservers on 6443 behind a load balancer and a security group that use 8443.
#[test]
fn a_non_default_api_port_is_the_same_everywhere() {
    let cluster = spec_named("secrets-manager-arm");
    assert_eq!(cluster.spec.api_server.port, 8443);
    let bundle = render_spec(&cluster);
    let vars = group_vars(&bundle);
    assert_eq!(
        vars["kube_apiserver_port"], 8443,
        "where the apiservers listen"
    );
    assert_eq!(vars["loadbalancer_apiserver"]["port"], 8443);
    let discovery: serde_json::Value =
        serde_json::from_str(&bundle.files["iam/discovery.json"]).unwrap();
    let sg = discovery["controlPlaneSecurityGroup"]["apply"]
        .as_str()
        .unwrap();
    assert!(
        sg.starts_with("allow TCP 8443 from the node security group"),
        "{sg}"
    );
    assert!(sg.contains("the apiservers listen on 8443"), "{sg}");
    assert_eq!(
        discovery["apiServerLoadBalancer"],
        "listen on api.prod-eu.corp.internal:8443 and forward to TCP 8443 on every control-plane node"
    );
    for (_, object) in bundle.manifests() {
        if object["kind"] == "EC2NodeClass" {
            let user_data = object["spec"]["userData"].as_str().unwrap();
            assert!(
                user_data.contains("API_SERVER_ENDPOINT='api.prod-eu.corp.internal:8443'"),
                "{user_data}"
            );
        }
    }
    let values = &yaml_docs(&bundle.files["karpenter/values.yaml"])[0];
    assert_eq!(
        values["settings"]["clusterEndpoint"],
        "https://api.prod-eu.corp.internal:8443"
    );
    assert!(
        bundle.files["rotator/join-token-rotator.yaml"]
            .contains("--api-server=api.prod-eu.corp.internal:8443")
    );
    // The default port stays 6443 everywhere.
    let vars = group_vars(&render_spec(&spec_named("example")));
    assert_eq!(vars["kube_apiserver_port"], 6443);
}

/// Issue 11 item 1. cloud-provider-aws exits at start without a cluster ID (kubernetes/
/// cloud-provider-aws v1.35.2 pkg/providers/v1/tags.go: "AWS cloud failed to find ClusterID";
/// aws.go reads it from `[Global] KubernetesClusterID` of the file `--cloud-config` names, else
/// from a kubernetes.io/cluster/<id> tag on its own instance). The rendered DaemonSet must read
/// a cloud config whose ID is Karpenter's clusterName, for every spec.
#[test]
fn the_ccm_reads_a_cluster_id_equal_to_karpenters_cluster_name() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let values = &yaml_docs(&bundle.files["karpenter/values.yaml"])[0];
        let cluster_name = values["settings"]["clusterName"].as_str().unwrap();
        let docs = yaml_docs(&bundle.files["cloud/aws-cloud-controller-manager.yaml"]);
        let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
        let pod = &ds["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let path = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|a| a.as_str()?.strip_prefix("--cloud-config="))
            .unwrap_or_else(|| panic!("{name}: the CCM has no --cloud-config"));
        let mount = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| path.starts_with(&format!("{}/", m["mountPath"].as_str().unwrap())))
            .unwrap_or_else(|| panic!("{name}: {path} is not on a mounted volume"));
        let key = &path[mount["mountPath"].as_str().unwrap().len() + 1..];
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let config_map = docs
            .iter()
            .find(|d| {
                d["kind"] == "ConfigMap" && d["metadata"]["name"] == volume["configMap"]["name"]
            })
            .unwrap_or_else(|| panic!("{name}: the cloud config ConfigMap is not rendered"));
        assert_eq!(
            config_map["metadata"]["namespace"],
            ds["metadata"]["namespace"]
        );
        let conf = config_map["data"][key].as_str().unwrap();
        assert_eq!(
            conf,
            format!("[Global]\nKubernetesClusterID = {cluster_name}\n"),
            "{name}"
        );
        // The Kubean-built instances get the tag by hand (Karpenter tags its own).
        let discovery: serde_json::Value =
            serde_json::from_str(&bundle.files["iam/discovery.json"]).unwrap();
        assert_eq!(
            discovery["kubeanInstances"]["tag"],
            serde_json::json!({ "key": format!("kubernetes.io/cluster/{cluster_name}"), "value": "owned" })
        );
        assert!(bundle.files["ORDER.md"].contains(&format!(
            "`kubernetes.io/cluster/{cluster_name}=owned` on every Kubean-built instance"
        )));
    }
}

/// The device plugin against NVIDIA's static manifest for the pinned release
/// (NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml, v0.20.0): not
/// privileged, allowPrivilegeEscalation false, capabilities drop ALL, the device-plugins
/// hostPath in a volume named kubelet-device-plugins-dir with `type: Directory`,
/// system-node-critical. v0.20.0 no longer sets FAIL_ON_INIT_ERROR (v0.17 set it false);
/// ours runs only on GPU nodes and keeps --fail-on-init-error=true explicit (gpu.rs says why).
#[test]
fn the_device_plugin_keeps_what_nvidias_static_manifest_needs() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let Some(text) = bundle.files.get("gpu/nvidia-device-plugin.yaml") else {
            continue;
        };
        let docs = yaml_docs(text);
        let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
        let pod = &ds["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(
            c["securityContext"]["allowPrivilegeEscalation"], false,
            "{name}"
        );
        assert_eq!(
            c["securityContext"]["capabilities"]["drop"],
            serde_json::json!(["ALL"])
        );
        assert!(c["securityContext"].get("privileged").is_none(), "{name}");
        assert_eq!(pod["priorityClassName"], "system-node-critical");
        assert_eq!(
            c["volumeMounts"][0]["mountPath"],
            "/var/lib/kubelet/device-plugins"
        );
        assert_eq!(
            pod["volumes"][0],
            serde_json::json!({
                "name": "kubelet-device-plugins-dir",
                "hostPath": { "path": "/var/lib/kubelet/device-plugins", "type": "Directory" }
            }),
            "{name}"
        );
        assert_eq!(c["volumeMounts"][0]["name"], "kubelet-device-plugins-dir");
        assert!(c.get("env").is_none(), "{name}: no FAIL_ON_INIT_ERROR env");
        assert_eq!(
            c["image"], "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
            "{name}"
        );
        assert_eq!(c["args"][0], "--fail-on-init-error=true", "{name}");
        // Every GPU pool taint is tolerated (upstream tolerates only nvidia.com/gpu:NoSchedule).
        for pool in cluster
            .spec
            .pools
            .iter()
            .filter(|p| p.pool_type == kk_spec::PoolType::Gpu)
        {
            for t in &pool.taints {
                assert!(
                    pod["tolerations"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|tol| tol["key"] == t.key.as_str()
                            && tol["effect"] == t.effect.as_str()),
                    "{name}: {} not tolerated",
                    t.key
                );
            }
        }
    }
}

/// Issue 11 item 5: the controllers pinned to infra nodes tolerate the infra taints and do not
/// ask for more replicas than there are infra nodes. Karpenter's chart (shared/charts/
/// karpenter-1.14.1/values.yaml) defaults to `replicas: 2` with required hostname
/// podAntiAffinity and tolerates only CriticalAddonsOnly.
#[test]
fn infra_controllers_tolerate_the_infra_taints_and_fit_the_infra_nodes() {
    // secrets-manager-arm: one infra node tainted dedicated=infra:NoSchedule.
    let cluster = spec_named("secrets-manager-arm");
    assert_eq!(
        cluster.spec.kubean.infra_taints,
        ["dedicated=infra:NoSchedule"]
    );
    let bundle = render_spec(&cluster);
    let dedicated = serde_json::json!({
        "key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"
    });
    let values = &yaml_docs(&bundle.files["karpenter/values.yaml"])[0];
    let ebs = &yaml_docs(&bundle.files["cloud/ebs-csi-values.yaml"])[0]["controller"];
    let rotator = yaml_docs(&bundle.files["rotator/join-token-rotator.yaml"])
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    for (what, tolerations) in [
        ("karpenter", &values["tolerations"]),
        ("ebs-csi controller", &ebs["tolerations"]),
        (
            "rotator",
            &rotator["spec"]["template"]["spec"]["tolerations"],
        ),
    ] {
        assert!(
            tolerations.as_array().unwrap().contains(&dedicated),
            "{what}: {tolerations}"
        );
    }
    assert_eq!(
        values["replicas"], 1,
        "one infra node: one Karpenter replica"
    );
    assert_eq!(ebs["replicaCount"], 1);
    assert_eq!(rotator["spec"]["replicas"], 1);
    // The example: two infra nodes, CriticalAddonsOnly only: two replicas, no extra toleration.
    let bundle = render_spec(&spec_named("example"));
    let values = &yaml_docs(&bundle.files["karpenter/values.yaml"])[0];
    assert_eq!(values["replicas"], 2);
    assert_eq!(
        values["tolerations"],
        serde_json::json!([{ "key": "CriticalAddonsOnly", "operator": "Exists" }])
    );
}

/// Issue 11 item 9: in static mode ORDER.md creates exactly the token the userData carries
/// (`kubeadm token create` without an argument generates a random one that no node uses);
/// in the store modes ORDER.md names no token at all.
#[test]
fn static_mode_order_creates_the_token_the_userdata_carries() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let order = &bundle.files["ORDER.md"];
        match &cluster.spec.join.token {
            Some(token) => {
                let command = format!("`kubeadm token create {token} --ttl 0 ");
                assert!(order.contains(&command), "{name}: {order}");
                for (_, object) in bundle.manifests() {
                    if object["kind"] == "EC2NodeClass" {
                        let user_data = object["spec"]["userData"].as_str().unwrap();
                        assert!(user_data.contains(&format!("TOKEN='{token}'")), "{name}");
                    }
                }
            }
            None => assert!(
                !order.contains("kubeadm token create "),
                "{name}: a store mode's ORDER.md names a token"
            ),
        }
    }
}

/// Issue 11 item 10: the seed's whole "Validation and Troubleshooting Checklist" (seed 000,
/// section 8: eight commands) is in verify/checklist.sh and ORDER.md, with this bundle's names.
/// The script is run against a recording fake kubectl, so every command is really issued.
#[test]
fn the_seeds_whole_checklist_is_emitted_and_runs() {
    use std::process::Command;
    let cluster = spec_named("example");
    let bundle = render_spec(&cluster);
    let order = &bundle.files["ORDER.md"];
    // The seed's eight commands, its placeholders filled in.
    let seed = [
        "get pods -A",
        "get nodes -o wide",
        "get nodeclaims",
        "get nodes -l node.lifecycle=karpenter",
        "get nodes -l node.accelerator=nvidia-gpu",
        "describe <gpu-node> | grep -A5 nvidia.com/gpu",
        "logs -n karpenter deploy/karpenter",
        "logs cuda-vectoradd-workload-gpu-l4",
    ];
    for command in seed {
        assert!(
            order.contains(&format!("`kubectl {command}`")),
            "ORDER.md lacks {command}"
        );
    }
    assert!(
        order.contains("logs cuda-vectoradd-gpu"),
        "every GPU pool's CUDA test"
    );

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("checklist.sh");
    std::fs::write(&script, &bundle.files["verify/checklist.sh"]).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    if let Ok(out) = Command::new("shellcheck")
        .args(["-s", "bash", "-f", "gcc"])
        .arg(&script)
        .output()
    {
        assert!(
            out.status.success(),
            "shellcheck: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let log = dir.path().join("calls.log");
    let fake = dir.path().join("kubectl");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/bash\necho \"$*\" >>{log}\n\
             [ \"$1 $2\" = \"--context demo\" ] || exit 9\nshift 2\n\
             if [ \"$*\" = \"get nodes -l node.accelerator=nvidia-gpu -o name\" ]; then echo node/ip-10-0-1-99; fi\n\
             if [ \"$1\" = describe ]; then printf 'Capacity:\\n  nvidia.com/gpu: 1\\n'; fi\n",
            log = log.display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let run = Command::new("bash")
        .arg(&script)
        .env("KUBECTL", format!("{} --context demo", fake.display()))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls,
        "--context demo get pods -A\n\
         --context demo get nodes -o wide\n\
         --context demo get nodeclaims\n\
         --context demo get nodes -l node.lifecycle=karpenter\n\
         --context demo get nodes -l node.accelerator=nvidia-gpu\n\
         --context demo get nodes -l node.accelerator=nvidia-gpu -o name\n\
         --context demo describe node/ip-10-0-1-99\n\
         --context demo logs -n karpenter deploy/karpenter\n\
         --context demo logs cuda-vectoradd-workload-gpu-l4\n\
         --context demo logs cuda-vectoradd-gpu\n\
         --context demo logs cuda-vectoradd-training-llm\n"
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("nvidia.com/gpu: 1"));
}

/// Issue 11 item 7: every namespaced object of the new cluster lands in a namespace that exists
/// by then: kube-system / default, or a Namespace applied earlier in the bundle's order. (The
/// rotator lives in Karpenter's namespace, which Helm would only create two steps later.)
#[test]
fn every_namespace_is_created_before_the_objects_in_it() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let mut existing: Vec<String> = vec!["kube-system".into(), "default".into()];
        for (path, object) in bundle.manifests() {
            if path.starts_with("kubean/") {
                continue; // Kubean's management cluster
            }
            if object["kind"] == "Namespace" {
                existing.push(object["metadata"]["name"].as_str().unwrap().to_owned());
                continue;
            }
            if let Some(ns) = object["metadata"]["namespace"].as_str() {
                assert!(
                    existing.iter().any(|e| e == ns),
                    "{name}: {path} {} lands in namespace {ns}, not created before it",
                    object["kind"]
                );
            }
        }
    }
}

/// Issue 16 item 2: the controller runs exactly the image `dist/image` built (repository@digest
/// from the spec, never a movable tag), on amd64 nodes only (the image is linux/amd64), meets
/// the `restricted` Pod Security Standard (non-root, no privilege escalation, every capability
/// dropped, RuntimeDefault seccomp) with a read-only root, and has CPU and memory requests and limits.
#[test]
fn the_controller_runs_its_image_by_digest_hardened_on_amd64() {
    let mut checked = 0;
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let Some(text) = bundle.files.get("rotator/join-token-rotator.yaml") else {
            assert!(!cluster.spec.join.mode.runs_controller(), "{name}");
            continue;
        };
        let image = &cluster.spec.controller.as_ref().expect(&name).image;
        let deployment = yaml_docs(text)
            .into_iter()
            .find(|d| d["kind"] == "Deployment")
            .expect(&name);
        let pod = &deployment["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "{name}");
        let c = &containers[0];
        let reference = c["image"].as_str().unwrap();
        assert_eq!(
            reference,
            format!("{}@{}", image.repository, image.digest),
            "{name}"
        );
        let (_, digest) = reference.rsplit_once("@sha256:").expect(reference);
        assert!(
            digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{name}: {reference}"
        );
        assert_eq!(pod["nodeSelector"]["kubernetes.io/arch"], "amd64", "{name}");
        assert_eq!(
            pod["nodeSelector"]["node-role.kubernetes.io/infra"], "",
            "{name}"
        );
        for sc in [&pod["securityContext"], &c["securityContext"]] {
            assert_eq!(sc["runAsNonRoot"], true, "{name}");
            assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        }
        assert_eq!(
            pod["securityContext"]["runAsUser"], 65532,
            "{name}: the image's user"
        );
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["privileged"], false, "{name}");
        assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{name}");
        assert!(sc["capabilities"]["add"].is_null(), "{name}");
        for kind in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    c["resources"][kind][resource].is_string(),
                    "{name}: no {kind}.{resource}"
                );
            }
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "the example and secrets-manager-arm run the controller"
    );
}

/// Every image reference the bundle writes, with where it is.
fn rendered_images(bundle: &Bundle) -> Vec<(String, String)> {
    fn walk(v: &serde_json::Value, file: &str, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if k == "image"
                        && let Some(s) = v.as_str()
                    {
                        out.push((file.to_owned(), s.to_owned()));
                    }
                    walk(v, file, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, file, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (path, object) in bundle.manifests() {
        walk(&serde_json::to_value(object).unwrap(), &path, &mut out);
    }
    out
}

/// No rendered image floats: each has a fixed tag (or only a digest), none is `latest` or a
/// bare minor; the CCM is the newest known release of the control plane's minor, which carries
/// the nil-State fix (cloud-provider-aws#1365) from 1.33 on.
#[test]
fn every_rendered_image_is_pinned_and_the_ccm_matches_the_minor() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let images = rendered_images(&bundle);
        assert!(!images.is_empty(), "{name}");
        for (file, image) in &images {
            let name_part = image.split('@').next().unwrap();
            let last = name_part.rsplit('/').next().unwrap();
            match last.split_once(':') {
                Some((_, tag)) => assert!(
                    !kk_spec::versions::is_floating(tag),
                    "{name}: {file}: {image} floats"
                ),
                None => assert!(image.contains("@sha256:"), "{name}: {file}: {image}"),
            }
        }
        let minor = kk_spec::images::kubernetes_minor(&cluster.spec.kubernetes_version).unwrap();
        let ccm = images
            .iter()
            .find(|(f, _)| f == "cloud/aws-cloud-controller-manager.yaml")
            .map(|(_, i)| i.clone())
            .unwrap();
        let expected = match minor {
            34 => "v1.34.4",
            35 => "v1.35.3",
            36 => "v1.36.2",
            other => panic!("{name}: add the expected CCM for 1.{other}"),
        };
        assert_eq!(
            ccm,
            format!("registry.k8s.io/provider-aws/cloud-controller-manager:{expected}"),
            "{name}"
        );
    }
}

/// `spec.images` overrides: a mirror repository and a digest render `repository:tag@sha256:…`
/// in manifests, in Karpenter's values (its chart's controller.image) and in the EBS CSI chart's
/// values (digest carried in the tag, which the chart writes after a colon).
#[test]
fn image_overrides_render_repository_tag_and_digest() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let mut cluster = spec_named("seed000-static");
    for key in [
        "cloud-controller-manager",
        "karpenter",
        "pause",
        "aws-ebs-csi-driver/csi-provisioner",
    ] {
        cluster.spec.images.insert(
            key.into(),
            kk_spec::ImageOverride {
                repository: Some(format!("mirror.example.com/{}", key.replace('/', "-"))),
                tag: None,
                digest: Some(digest.clone()),
            },
        );
    }
    let bundle = render_spec(&cluster);
    let images = rendered_images(&bundle);
    let minor = kk_spec::images::kubernetes_minor(&cluster.spec.kubernetes_version).unwrap();
    let ccm_tag = kk_spec::versions::component("cloud-controller-manager")
        .newest_for_kubernetes(minor)
        .unwrap()
        .version
        .clone();
    assert!(images.contains(&(
        "cloud/aws-cloud-controller-manager.yaml".into(),
        format!("mirror.example.com/cloud-controller-manager:{ccm_tag}@{digest}")
    )));
    assert!(
        images
            .iter()
            .any(|(_, i)| *i == format!("mirror.example.com/pause:3.7@{digest}")),
        "{images:?}"
    );
    let values = &yaml_docs(&bundle.files["karpenter/values.yaml"])[0];
    assert_eq!(
        values["controller"]["image"],
        serde_json::json!({
            "repository": "mirror.example.com/karpenter",
            "tag": cluster.spec.karpenter.version,
            "digest": digest,
        })
    );
    let ebs = &yaml_docs(&bundle.files["cloud/ebs-csi-values.yaml"])[0];
    assert_eq!(
        ebs["sidecars"]["provisioner"]["image"],
        serde_json::json!({
            "repository": "mirror.example.com/aws-ebs-csi-driver-csi-provisioner",
            "tag": format!("v6.3.0-eksbuild.4@{digest}"),
        })
    );
    // Without overrides the chart keeps its own image pins: no controller.image in values.
    let plain = render_spec(&spec_named("seed000-static"));
    let values = &yaml_docs(&plain.files["karpenter/values.yaml"])[0];
    assert!(values["controller"].get("image").is_none());
}

/// `registry.mirror`: every image the bundle writes (manifests, Karpenter's values, the EBS CSI
/// chart's values, Kubean's ClusterOperation) names the mirror, keeping its upstream path, and
/// Kubespray gets its offline variables.
#[test]
fn a_registry_mirror_rewrites_every_image_and_sets_kubesprays_offline_vars() {
    let mirror = "registry.internal:5000";
    for (name, mut cluster) in all_specs() {
        cluster.spec.registry = Some(kk_spec::Registry {
            mirror: mirror.into(),
            files_repo: Some("https://files.internal/k8s".into()),
        });
        let bundle = render_spec(&cluster);
        let images = rendered_images(&bundle);
        for (file, image) in &images {
            assert!(
                image.starts_with(&format!("{mirror}/")),
                "{name}: {file}: {image}"
            );
        }
        assert!(images.iter().any(|(_, i)| i.starts_with(&format!(
            "{mirror}/provider-aws/cloud-controller-manager:v1."
        ))));
        let values = &yaml_docs(&bundle.files["karpenter/values.yaml"])[0];
        assert_eq!(
            values["controller"]["image"]["repository"],
            format!("{mirror}/karpenter/controller"),
            "{name}"
        );
        let ebs = &yaml_docs(&bundle.files["cloud/ebs-csi-values.yaml"])[0];
        assert_eq!(
            ebs["image"]["repository"],
            format!("{mirror}/ebs-csi-driver/aws-ebs-csi-driver")
        );
        assert_eq!(
            ebs["sidecars"]["nodeDriverRegistrar"]["image"]["repository"],
            format!("{mirror}/csi-components/csi-node-driver-registrar")
        );
        let vars = group_vars(&bundle);
        assert_eq!(vars["registry_host"], mirror);
        assert_eq!(vars["kube_image_repo"], mirror);
        assert_eq!(vars["files_repo"], "https://files.internal/k8s");
        assert_eq!(
            vars["containerd_registries_mirrors"][0]["prefix"],
            "registry.k8s.io"
        );
        assert_eq!(
            vars["containerd_registries_mirrors"][0]["mirrors"][0]["host"],
            format!("https://{mirror}")
        );
        for (path, object) in bundle.manifests() {
            let v = serde_json::to_value(object).unwrap();
            if v["kind"] == "ClusterOperation" {
                assert!(
                    v["spec"]["image"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("{mirror}/kubean-io/spray-job:")),
                    "{path}"
                );
            }
        }
    }
}

/// The capacity-reservation terms render as the CRD's `capacityReservationSelectorTerms`; the
/// CRD's own rules refuse what `validate` refuses earlier (a term mixing `id` with other
/// fields, an `ownerID` alone), so the check above would catch a render that let one through.
#[test]
fn capacity_reservation_terms_pass_the_crd_and_its_cel_refuses_mixed_terms() {
    let bundle = render_spec(&spec_named("training-reserved"));
    let class = &yaml_docs(&bundle.files["nodeclasses/training.yaml"])[0];
    let terms = &class["spec"]["capacityReservationSelectorTerms"];
    assert_eq!(terms[0], serde_json::json!({"id": "cr-0123456789abcdef0"}));
    assert_eq!(terms[2]["ownerID"], "210987654321");
    assert!(kk_crd_check::validate(class).unwrap().is_empty());
    for bad in [
        serde_json::json!([{"id": "cr-0123456789abcdef0", "tags": {"team": "ml"}}]),
        serde_json::json!([{"ownerID": "210987654321"}]),
        serde_json::json!([{"id": "cr-NOT_HEX"}]),
    ] {
        let mut broken = class.clone();
        broken["spec"]["capacityReservationSelectorTerms"] = bad.clone();
        let violations = kk_crd_check::validate(&broken).unwrap();
        assert!(!violations.is_empty(), "the CRD accepted {bad}");
    }
    let pool = &yaml_docs(&bundle.files["nodepools/training.yaml"])[0];
    assert_eq!(
        pool["spec"]["template"]["spec"]["terminationGracePeriod"],
        "90m"
    );
    assert!(kk_crd_check::validate(pool).unwrap().is_empty());
}

/// `efa: true` pools (the example's training pool): the EFA device plugin runs on exactly
/// their nodes and tolerates exactly their taints; the node security groups' self-referencing
/// rule is in iam/discovery.json; specs without EFA pools get neither.
#[test]
fn the_efa_device_plugin_serves_exactly_the_efa_pools() {
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let efa: Vec<&kk_spec::Pool> = cluster.spec.pools.iter().filter(|p| p.efa).collect();
        let discovery: serde_json::Value =
            serde_json::from_str(&bundle.files["iam/discovery.json"]).unwrap();
        let Some(text) = bundle.files.get("efa/aws-efa-k8s-device-plugin.yaml") else {
            assert!(efa.is_empty(), "{name}: EFA pools but no EFA device plugin");
            assert!(discovery.get("efaSecurityGroups").is_none(), "{name}");
            continue;
        };
        assert!(
            !efa.is_empty(),
            "{name}: an EFA device plugin without EFA pools"
        );
        let ds = &yaml_docs(text)[0];
        let pod = &ds["spec"]["template"]["spec"];
        let names: Vec<&str> = efa.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            serde_json::json!([{ "matchExpressions": [
                { "key": "karpenter.sh/nodepool", "operator": "In", "values": names }
            ] }]),
            "{name}"
        );
        let mut wanted: Vec<serde_json::Value> = efa
            .iter()
            .flat_map(|p| &p.taints)
            .map(|t| match &t.value {
                Some(v) => serde_json::json!({"key": t.key, "operator": "Equal", "value": v, "effect": t.effect}),
                None => serde_json::json!({"key": t.key, "operator": "Exists", "effect": t.effect}),
            })
            .collect();
        wanted.sort_by_key(|v| v.to_string());
        wanted.dedup();
        let mut got = pod["tolerations"].as_array().unwrap().clone();
        got.sort_by_key(|v| v.to_string());
        assert_eq!(
            got, wanted,
            "{name}: tolerations are exactly the EFA pools' taints"
        );
        assert_eq!(
            pod["containers"][0]["image"],
            "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
        );
        assert_eq!(
            discovery["efaSecurityGroups"]["pools"],
            serde_json::json!(names)
        );
        assert!(
            bundle.files["ORDER.md"].contains("`efa/aws-efa-k8s-device-plugin.yaml`"),
            "{name}: ORDER.md names the EFA plugin"
        );
    }
    assert!(
        render_spec(&spec_named("example"))
            .files
            .contains_key("efa/aws-efa-k8s-device-plugin.yaml"),
        "the example's training pool uses EFA"
    );
}

/// Issue 28 item 1: under `gpu.stack: operator` the bundle has no bare device plugin; the
/// operator's chart installs after Karpenter (apply installs every release before any
/// NodePool); its daemonsets and NFD worker tolerate exactly the GPU pools' hard taints; each
/// time-sliced pool names a config the ConfigMap holds, and an unshared pool names none.
#[test]
fn the_gpu_operator_replaces_the_device_plugin_and_serves_every_gpu_pool() {
    let cluster = spec_named("gpu-operator");
    let bundle = render_spec(&cluster);
    assert!(!bundle.files.contains_key("gpu/nvidia-device-plugin.yaml"));
    let releases: Vec<&str> = bundle
        .helm_releases()
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        releases,
        ["aws-ebs-csi-driver", "karpenter", "gpu-operator"]
    );
    let values = &bundle.objects("gpu/gpu-operator-values.yaml")[0];
    let mut wanted: Vec<serde_json::Value> = Vec::new();
    for pool in cluster.spec.pools.iter().filter(|p| p.gpu.is_some()) {
        for t in &pool.taints {
            let toleration = match &t.value {
                Some(v) => {
                    serde_json::json!({"key": t.key, "operator": "Equal", "value": v, "effect": t.effect})
                }
                None => serde_json::json!({"key": t.key, "operator": "Exists", "effect": t.effect}),
            };
            if !wanted.contains(&toleration) {
                wanted.push(toleration);
            }
        }
    }
    for list in [
        &values["daemonsets"]["tolerations"],
        &values["node-feature-discovery"]["worker"]["tolerations"],
    ] {
        let got = list.as_array().unwrap();
        assert_eq!(got.len(), wanted.len(), "{list}");
        assert!(wanted.iter().all(|w| got.contains(w)), "{list}");
    }
    let configs = &bundle.objects("gpu/gpu-operator-device-plugin-configs.yaml")[0]["data"];
    assert_eq!(
        values["devicePlugin"]["config"]["name"],
        bundle.objects("gpu/gpu-operator-device-plugin-configs.yaml")[0]["metadata"]["name"]
    );
    for pool in cluster.spec.pools.iter().filter(|p| p.gpu.is_some()) {
        let nodepool = &bundle.objects(&format!("nodepools/{}.yaml", pool.name))[0];
        let label =
            &nodepool["spec"]["template"]["metadata"]["labels"]["nvidia.com/device-plugin.config"];
        let replicas = pool.gpu.as_ref().unwrap().sharing_replicas;
        if replicas > 1 {
            let key = label.as_str().unwrap();
            assert!(
                configs[key]
                    .as_str()
                    .unwrap()
                    .contains(&format!("replicas: {replicas}")),
                "{}: {key}",
                pool.name
            );
        } else {
            assert!(label.is_null(), "{}", pool.name);
        }
    }
    assert!(bundle.files["ORDER.md"].contains("helm upgrade --install gpu-operator gpu-operator"));
}

/// Every manifest a bundle holds reaches `apply` (`Bundle::manifests`), save the directories
/// apply leaves out on purpose because a plain cluster has no such kinds (ORDER.md says how to
/// apply them). NodeOverlays once were rendered and never applied, so a time-sliced pool's
/// first nodes were planned one GPU per pod.
#[test]
fn every_manifest_is_applied_except_the_kinds_apply_leaves_out() {
    const LEFT_OUT: [&str; 2] = ["kueue/", "monitoring/"];
    for (name, cluster) in all_specs() {
        let bundle = render_spec(&cluster);
        let applied: std::collections::BTreeSet<String> = bundle
            .manifests()
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        for path in bundle.files.keys() {
            if bundle.kind(path) != Some(kk_render::FileKind::Manifest)
                || LEFT_OUT.iter().any(|dir| path.starts_with(dir))
            {
                continue;
            }
            assert!(applied.contains(path), "{name}: {path} is never applied");
        }
        let position = |dir: &str| {
            bundle
                .manifests()
                .iter()
                .position(|(path, _)| path.starts_with(dir))
        };
        if let (Some(overlay), Some(pool)) = (position("nodeoverlays/"), position("nodepools/")) {
            assert!(
                overlay < pool,
                "{name}: NodeOverlays go before the NodePools"
            );
        }
    }
}

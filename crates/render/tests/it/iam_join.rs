//! `joinMethod: iam`: the pieces rendered in different places agree with each other — what the
//! node signs (nodeadm's cluster name) is what the authenticator accepts (its cluster ID), the
//! name the node registers under is the one the mapping grants, the certificate the API server
//! trusts is the spec's, and Kubespray's DNS and service CIDR are what the kubelet is told.

use std::path::PathBuf;

use kk_model::yaml::{LoadLimits, load_documents};
use kk_render::{Bundle, render};
use kk_spec::{ElasticCluster, parse_spec};
use serde_json::Value;

fn specs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs")
}

fn iam_spec() -> ElasticCluster {
    let text = std::fs::read_to_string(specs_dir().join("iam-eks.yaml")).unwrap();
    parse_spec(&text, "iam-eks.yaml").unwrap().spec
}

fn render_it(cluster: &ElasticCluster) -> Result<Bundle, kk_render::RenderError> {
    render(
        cluster,
        &std::fs::read(specs_dir().join("pki/ca.crt")).unwrap(),
    )
}

fn docs(bundle: &Bundle, path: &str) -> Vec<Value> {
    let text = bundle.files.get(path).unwrap_or_else(|| panic!("{path}"));
    load_documents(text, LoadLimits::default())
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .collect()
}

fn yaml(text: &str) -> Value {
    load_documents(text, LoadLimits::default()).unwrap()[0]
        .value
        .clone()
}

/// The NodeConfig inside a node class's MIME userData.
fn node_config(bundle: &Bundle, class: &str) -> Value {
    let class = &docs(bundle, &format!("nodeclasses/{class}.yaml"))[0];
    assert_eq!(
        class["spec"]["amiFamily"], "Custom",
        "AL2023 would call eks:DescribeCluster"
    );
    let user_data = class["spec"]["userData"].as_str().unwrap();
    assert!(user_data.contains("Content-Type: application/node.eks.aws"));
    let body = user_data
        .split("\n---\n")
        .nth(1)
        .unwrap()
        .split("\n--//--")
        .next()
        .unwrap();
    yaml(body)
}

fn group_vars(bundle: &Bundle) -> Value {
    let cm = &docs(bundle, "kubean/2-vars-conf.yaml")[0];
    yaml(cm["data"]["group_vars.yml"].as_str().unwrap())
}

fn authenticator_config(bundle: &Bundle) -> Value {
    let cm = &docs(bundle, "authenticator/aws-iam-authenticator.yaml")[0];
    yaml(cm["data"]["config.yaml"].as_str().unwrap())
}

#[test]
fn the_node_signs_for_the_cluster_id_the_authenticator_checks() {
    let bundle = render_it(&iam_spec()).unwrap();
    let config = authenticator_config(&bundle);
    for class in ["eks-general", "eks-gpu"] {
        let nc = node_config(&bundle, class);
        assert_eq!(nc["apiVersion"], "node.eks.aws/v1alpha1");
        // nodeadm's kubelet kubeconfig runs `aws eks get-token --cluster-name <cluster.name>`,
        // which signs that name into the token's x-k8s-aws-id header.
        assert_eq!(
            nc["spec"]["cluster"]["name"], config["clusterID"],
            "{class}"
        );
        assert_eq!(config["clusterID"], "lab-eu-west-1");
        assert_eq!(
            nc["spec"]["cluster"]["apiServerEndpoint"],
            "https://k8s.lab.example.com:6443"
        );
    }
}

#[test]
fn the_mapped_user_name_is_the_name_the_node_registers_under() {
    let bundle = render_it(&iam_spec()).unwrap();
    let config = authenticator_config(&bundle);
    let roles = config["server"]["mapRoles"].as_array().unwrap();
    assert_eq!(roles.len(), 1, "only the node role is mapped: {roles:?}");
    assert_eq!(
        roles[0]["rolearn"],
        "arn:aws:iam::123456789012:role/lab-node"
    );
    assert_eq!(roles[0]["username"], "system:node:{{SessionName}}");
    assert_eq!(roles[0]["groups"], serde_json::json!(["system:nodes"]));
    assert!(config["server"].get("mapAccounts").is_none());
    assert!(config["server"].get("mapUsers").is_none());
    for class in ["eks-general", "eks-gpu"] {
        // An instance profile's session name is its instance ID; InstanceIdNodeName names the
        // Node by it, so NodeRestriction ties the node's credentials to its own Node object.
        let nc = node_config(&bundle, class);
        assert_eq!(nc["spec"]["featureGates"]["InstanceIdNodeName"], true);
    }
}

#[test]
fn the_kubelet_uses_kubesprays_dns_and_service_cidr() {
    let bundle = render_it(&iam_spec()).unwrap();
    let vars = group_vars(&bundle);
    for class in ["eks-general", "eks-gpu"] {
        let nc = node_config(&bundle, class);
        assert_eq!(
            nc["spec"]["kubelet"]["config"]["clusterDNS"][0],
            vars["nodelocaldns_ip"]
        );
        assert_eq!(vars["nodelocaldns_ip"], "169.254.25.10");
        assert_eq!(
            nc["spec"]["cluster"]["cidr"],
            vars["kube_service_addresses"]
        );
        let flags: Vec<&str> = nc["spec"]["kubelet"]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(
            flags.iter().any(
                |f| f.starts_with("--register-with-taints=karpenter.sh/unregistered:NoExecute")
            ),
            "{flags:?}"
        );
    }
    let general = node_config(&bundle, "eks-general");
    assert_eq!(general["spec"]["kubelet"]["config"]["maxPods"], 58);
    let class = &docs(&bundle, "nodeclasses/eks-general.yaml")[0];
    assert_eq!(
        class["spec"]["kubelet"]["maxPods"], 58,
        "Karpenter assumes what the kubelet does"
    );
    assert_eq!(
        class["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSize"],
        "50Gi"
    );
}

#[test]
fn the_api_server_trusts_exactly_the_specs_serving_certificate_on_loopback() {
    let cluster = iam_spec();
    let bundle = render_it(&cluster).unwrap();
    let vars = group_vars(&bundle);
    let auth = cluster.spec.iam_authenticator.as_ref().unwrap();
    assert_eq!(vars["kube_webhook_token_auth"], true);
    assert_eq!(vars["kube_webhook_token_auth_url_skip_tls_verify"], false);
    assert_eq!(
        vars["kube_webhook_token_auth_ca_data"],
        auth.serving_certificate.as_str()
    );
    let kubeconfig = yaml(&bundle.files["authenticator/webhook-kubeconfig.conf"]);
    let server = &kubeconfig["clusters"][0]["cluster"];
    assert_eq!(server["server"], vars["kube_webhook_token_auth_url"]);
    assert_eq!(server["server"], "https://127.0.0.1:21362/authenticate");
    assert_eq!(
        server["certificate-authority-data"],
        auth.serving_certificate.as_str()
    );
    let config = authenticator_config(&bundle);
    assert_eq!(config["server"]["address"], "127.0.0.1");
    assert_eq!(config["server"]["port"], 21362);
    assert_eq!(config["server"]["kubeconfigPregenerated"], true);
}

#[test]
fn the_authenticator_holds_no_credentials_and_the_bundle_no_key() {
    let bundle = render_it(&iam_spec()).unwrap();
    for (path, text) in &bundle.files {
        assert!(!text.contains("PRIVATE KEY"), "{path}");
    }
    let ds = &docs(&bundle, "authenticator/aws-iam-authenticator.yaml")[1];
    assert_eq!(ds["kind"], "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert!(pod.get("serviceAccountName").is_none());
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"],
        ""
    );
    let c = &pod["containers"][0];
    assert!(c.get("env").is_none(), "no AWS credentials: {c}");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["volumes"][1]["secret"]["secretName"],
        "aws-iam-authenticator-serving"
    );
}

#[test]
fn a_serving_certificate_without_the_loopback_address_is_refused() {
    let mut cluster = iam_spec();
    // The test cluster CA: a certificate, but not for 127.0.0.1.
    use base64::Engine;
    let ca = std::fs::read(specs_dir().join("pki/ca.crt")).unwrap();
    cluster
        .spec
        .iam_authenticator
        .as_mut()
        .unwrap()
        .serving_certificate = base64::engine::general_purpose::STANDARD.encode(ca);
    let err = render_it(&cluster).unwrap_err().to_string();
    assert!(
        err.contains("servingCertificate") && err.contains("127.0.0.1"),
        "{err}"
    );
}

#[test]
fn kubeadm_pools_keep_their_script_and_clusters_without_iam_get_no_webhook() {
    let bundle = render_it(&iam_spec()).unwrap();
    let class = &docs(&bundle, "nodeclasses/kubeadm-general.yaml")[0];
    assert!(
        class["spec"]["userData"]
            .as_str()
            .unwrap()
            .contains("kubeadm join")
    );
    let mut cluster = iam_spec();
    cluster.spec.pools.retain(|p| p.name == "kubeadm-general");
    let bundle = render_it(&cluster).unwrap();
    assert!(!bundle.files.keys().any(|p| p.starts_with("authenticator/")));
    assert!(group_vars(&bundle).get("kube_webhook_token_auth").is_none());
}

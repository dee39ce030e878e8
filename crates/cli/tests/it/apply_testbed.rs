//! `kubean-karpenter apply` against the testbed's real apiserver.

use std::process::Command;

use kk_testkit::repo;

fn apply(testbed: &kk_testkit::testbed::Testbed, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("apply")
        .arg("--kubeconfig")
        .arg(&testbed.kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_cli_prints_the_apiservers_cel_message_with_object_and_field_and_applies_nothing() {
    let _turn = crate::testbed_apply_turn();
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "cli apply") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    // A valid NodePool first: the dry run must stop the whole run before it is applied.
    std::fs::write(
        &file,
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: cli-first-ok}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: x}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: cli-both}
spec:
  amiFamily: Custom
  amiSelectorTerms: [{id: ami-0123456789abcdef0}]
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  role: r
  instanceProfile: p
"#,
    )
    .unwrap();
    let out = apply(&testbed, &[file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml: EC2NodeClass/cli-both: ")
            && stderr.contains("spec: Invalid value")
            && stderr.contains("must specify exactly one of ['role', 'instanceProfile']"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing applied"), "{stderr}");
    // The valid NodePool was not created either.
    let check = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(["apply", "--dry-run=server", "--kubeconfig"])
        .arg(&testbed.kubeconfig)
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    let client_check = kk_live_has_nodepool(&testbed, "cli-first-ok");
    assert!(!client_check, "the valid object must not have been applied");
}

fn kk_live_has_nodepool(testbed: &kk_testkit::testbed::Testbed, name: &str) -> bool {
    let server = &testbed.env["KK_TESTBED_APISERVER"];
    let token = &testbed.env["KK_TESTBED_ADMIN_TOKEN"];
    let ca = &testbed.env["KK_TESTBED_CA"];
    let out = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--cacert",
            ca,
            "-H",
        ])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("{server}/apis/karpenter.sh/v1/nodepools/{name}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout) == "200"
}

#[test]
fn the_example_spec_passes_a_server_side_dry_run_through_the_cli() {
    let _turn = crate::testbed_apply_turn();
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "cli apply example") else {
        return;
    };
    let spec = repo().join("crates/spec/src/example.yaml");
    // Kubean's namespace exists in the management cluster (Kubean is installed there); the
    // bundle creates Karpenter's namespace itself.
    let ns = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        ns.path(),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: kubean-system}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: default}\n",
    )
    .unwrap();
    let _ = apply(&testbed, &[ns.path().to_str().unwrap()]);
    // The testbed plays both clusters: Kubean's management cluster and the new one.
    let out = apply(
        &testbed,
        &[
            "--mgmt-kubeconfig",
            testbed.kubeconfig.to_str().unwrap(),
            "--skip-aws",
            "--skip-helm",
            "--dry-run=server",
            "-o",
            "json",
            spec.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    // Four pools, the training pool's with capacityReservationSelectorTerms and
    // terminationGracePeriod, which the apiserver checks against Karpenter's CRDs.
    assert_eq!(kinds.iter().filter(|k| **k == "EC2NodeClass").count(), 4);
    assert_eq!(kinds.iter().filter(|k| **k == "NodePool").count(), 4);
    // The EFA device plugin is applied; the Kueue objects are not (Kueue may not be there).
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|o| o["name"] == "aws-efa-k8s-device-plugin")
    );
    assert!(!kinds.contains(&"ClusterQueue"));
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|o| o["result"] == "accepted (server dry run)")
    );
}

/// Issue 11 item 7: a real apply of a whole spec in a fresh cluster. Karpenter's namespace did
/// not exist until Helm created it two steps after the rotator was applied into it; now the
/// bundle creates it first. kubean/ goes to the management cluster only when one is named.
#[test]
fn a_spec_applies_in_order_into_a_fresh_cluster_and_kubean_objects_need_the_management_cluster() {
    let _turn = crate::testbed_apply_turn();
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "cli apply order") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    let example = kk_spec::EXAMPLE
        .replace(
            "    namespace: karpenter\n",
            "    namespace: karpenter-order-test\n",
        )
        .replace(
            "    namespace: kubean-system\n",
            "    namespace: kubean-order-test\n",
        );
    assert_ne!(example, kk_spec::EXAMPLE);
    std::fs::write(&spec, &example).unwrap();
    // No management cluster named: refused before anything is sent.
    let out = apply(
        &testbed,
        &["--skip-aws", "--skip-helm", spec.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kubean/ object(s) belong to the management cluster where Kubean runs")
            && stderr.contains("--mgmt-context"),
        "{stderr}"
    );
    // Kubean's namespace exists where Kubean runs.
    let ns = dir.path().join("ns.yaml");
    std::fs::write(
        &ns,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: kubean-order-test}\n",
    )
    .unwrap();
    let out = apply(&testbed, &[ns.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(
        &testbed,
        &[
            "--mgmt-kubeconfig",
            testbed.kubeconfig.to_str().unwrap(),
            "--skip-aws",
            "--skip-helm",
            "-o",
            "json",
            spec.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let order: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["name"].as_str().unwrap()
            )
        })
        .collect();
    let at = |what: &str| {
        order
            .iter()
            .position(|o| o == what)
            .unwrap_or_else(|| panic!("{what} not applied: {order:?}"))
    };
    assert!(
        at("Namespace/kubean-karpenter-rotator") < at("ServiceAccount/kubean-karpenter-rotator")
    );
    assert!(
        at("Namespace/kubean-karpenter-csr-approver")
            < at("ServiceAccount/kubean-karpenter-csr-approver")
    );
    assert!(
        at("Namespace/karpenter-order-test")
            < at("ValidatingAdmissionPolicy/kubean-karpenter-rotator")
    );
    assert!(
        at("Cluster/demo") < at("Namespace/karpenter-order-test"),
        "kubean/ first"
    );
}

/// Issue 11 item 7, stage 2: `kubeconfig` reads the new cluster's kubeconfig from Kubean's
/// `<cluster>-kubeconf` ConfigMap (key `config`; kubean-io/kubean playbooks/kubeconfig.yml,
/// v0.37.0) on the management cluster and writes it 0600, printing the CA hash and never the
/// admin credentials. The testbed plays the management cluster.
#[test]
fn stage_two_takes_the_kubeconfig_kubean_stored() {
    let _turn = crate::testbed_apply_turn();
    use std::os::unix::fs::PermissionsExt;
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "cli kubeconfig") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    // Fresh names per run: the testbed keeps what earlier runs created.
    let cluster = format!("stage2-{}", std::process::id());
    let namespace = format!("kubean-{cluster}");
    let example = kk_spec::EXAMPLE
        .replace("name: demo ", &format!("name: {cluster} "))
        .replace(
            "    namespace: kubean-system\n",
            &format!("    namespace: {namespace}\n"),
        );
    std::fs::write(&spec, &example).unwrap();
    let ca = example
        .lines()
        .find_map(|l| l.trim().strip_prefix("base64: "))
        .unwrap();
    // The new cluster is the testbed too: `kubeconfig` compares the CA with the one its
    // server serves and the one kube-root-ca.crt publishes (issue #47 item 6).
    let secret_key = testbed.env["KK_TESTBED_ADMIN_TOKEN"].clone();
    let server = &testbed.env["KK_TESTBED_APISERVER"];
    let testbed_ca = std::fs::read_to_string(&testbed.env["KK_TESTBED_CA"]).unwrap();
    let testbed_ca_b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&testbed_ca)
    };
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster.local\n  cluster:\n    certificate-authority-data: {testbed_ca_b64}\n    server: {server}\ncontexts:\n- name: kubernetes-admin@cluster.local\n  context: {{cluster: cluster.local, user: kubernetes-admin, namespace: {namespace}}}\ncurrent-context: kubernetes-admin@cluster.local\nusers:\n- name: kubernetes-admin\n  user: {{token: {secret_key}}}\n"
    );
    let target = dir.path().join(format!("{cluster}.kubeconfig"));
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
            .arg("kubeconfig")
            .arg(&spec)
            .arg("-f")
            .arg(&target)
            .arg("--mgmt-kubeconfig")
            .arg(&testbed.kubeconfig)
            .args(extra)
            .output()
            .unwrap()
    };
    // Before Kubean's post-hook ran: a clear error, nothing written.
    let ns = dir.path().join("ns.yaml");
    std::fs::write(
        &ns,
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n"),
    )
    .unwrap();
    // No controller-manager publishes kube-root-ca.crt on the testbed.
    let root_ca = dir.path().join("root-ca.json");
    std::fs::write(
        &root_ca,
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": namespace},
            "data": {"ca.crt": testbed_ca},
        })
        .to_string(),
    )
    .unwrap();
    assert!(apply(&testbed, &[ns.to_str().unwrap()]).status.success());
    assert!(
        apply(&testbed, &[root_ca.to_str().unwrap()])
            .status
            .success()
    );
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "ConfigMap {namespace}/{cluster}-kubeconf not found"
        )),
        "{stderr}"
    );
    assert!(!target.exists());
    // What Kubean's kubeconfig.yml creates.
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": format!("{cluster}-kubeconf"), "namespace": namespace },
        "data": { "config": kubeconfig },
    });
    let cm_file = dir.path().join("cm.yaml");
    std::fs::write(&cm_file, serde_json::to_string(&cm).unwrap()).unwrap();
    assert!(
        apply(&testbed, &[cm_file.to_str().unwrap()])
            .status
            .success()
    );
    let out = run(&["-o", "json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stdout.contains(&secret_key) && !stderr.contains(&secret_key),
        "the admin key leaked"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let pem_hash = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(["ca-hash", "--pem"])
        .arg(&testbed.env["KK_TESTBED_CA"])
        .output()
        .unwrap();
    assert_eq!(
        report["caCertHash"].as_str().unwrap(),
        String::from_utf8_lossy(&pem_hash.stdout).trim()
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), kubeconfig);
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // An existing file is kept without --force.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --force"));
    // Stage 2 renders the whole bundle from it.
    let staged = example.replacen(
        &format!("    base64: {ca}\n"),
        &format!("    kubeconfig: {{path: {cluster}.kubeconfig}}\n"),
        1,
    );
    assert_ne!(staged, example);
    std::fs::write(&spec, staged).unwrap();
    let bundle = dir.path().join("bundle");
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("render")
        .arg(&spec)
        .arg("-o")
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(bundle.join("karpenter/values.yaml").is_file());
}

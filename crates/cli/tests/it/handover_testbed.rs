//! `apply` moves a controller of ours out of Karpenter's namespace into its own (issue 47,
//! finding 8) and never leaves a moment where no Deployment of it has the rights to lead: the
//! old Deployment keeps its account's bindings until the new Deployment has an available pod,
//! and if that never comes, apply stops and the old one keeps running.
//!
//! Stand-in: the testbed runs no kube-controller-manager and no kubelet, so no pod ever starts
//! there; the test writes the new Deployment's status (one available pod) as they would.
//! Everything else is the real apiserver. The objects are the CSR approver's as rendered,
//! renamed so this test owns each of them (the testbed is shared); of its admission policies only
//! the one on Node deletes is kept (it constrains the renamed accounts and nobody else), since the
//! approval policy renamed would govern the real approver's CSRs.
//!
//! The attack: anyone may create a Deployment with our name and label in a namespace of theirs.
//! apply must not bind its account, copy Secrets from there or delete anything of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kk_testkit::cli::Cli;
use kk_testkit::repo;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The admin's client, with the runtime that drives it.
fn admin(tb: &kk_testkit::testbed::Testbed) -> (tokio::runtime::Runtime, kube::Client) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(tb.admin());
    (rt, client)
}

/// `kubectl delete ARGS --ignore-not-found`, best effort: clean-up of what a test made.
fn delete(tb: &kk_testkit::testbed::Testbed, args: &[&str]) {
    let _ = Command::new("kubectl")
        .env("KUBECONFIG", &tb.kubeconfig)
        .arg("delete")
        .args(args)
        .arg("--ignore-not-found")
        .output();
}

fn unique() -> String {
    let mut b = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!("{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

/// The approver's rendered objects for a spec whose Karpenter namespace is `karpenter`, renamed
/// to `name`, without its admission policies and the shared record ConfigMap; its pods read a
/// Secret `secret` (as the rotator's read its AWS keys).
fn renamed_approver(name: &str, karpenter: &str, secret: &str) -> Vec<Value> {
    let text = kk_spec::EXAMPLE.replace(
        "    namespace: karpenter\n",
        &format!("    namespace: {karpenter}\n"),
    );
    let cluster = kk_spec::parse_spec(&text, "example").unwrap().spec;
    let pem = kk_render::inline_ca_pem(&cluster).unwrap().unwrap();
    let bundle = kk_render::render(&cluster, &pem).unwrap();
    let objects: Vec<Value> = bundle
        .manifests()
        .into_iter()
        .filter(|(path, _)| {
            path == "rotator/csr-approver.yaml"
                || path == "namespaces/kubean-karpenter-csr-approver.yaml"
        })
        .map(|(_, o)| o)
        .filter(|o| {
            let node_deletes = o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-node-deletes"));
            match o["kind"].as_str() {
                Some("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding") => {
                    node_deletes
                }
                Some("ConfigMap") => false,
                _ => true,
            }
        })
        .collect();
    let text = serde_json::to_string(&objects)
        .unwrap()
        .replace("kubean-karpenter-csr-approver", name)
        .replace(
            "kubean-karpenter:csr-approver",
            &format!("{name}:csr-approver"),
        );
    let mut objects: Vec<Value> = serde_json::from_str(&text).unwrap();
    for o in &mut objects {
        if o["kind"] == "Deployment" {
            o["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "name": "KEY", "valueFrom": { "secretKeyRef": { "name": secret, "key": "key" } } }));
        }
    }
    assert_eq!(
        objects.iter().filter(|o| o["kind"] == "Deployment").count(),
        1
    );
    objects
}

/// The same objects as an install made before the controllers had namespaces of their own:
/// the account and Deployment in Karpenter's namespace, the bindings naming that account.
fn old_layout(objects: &[Value], name: &str, karpenter: &str) -> Vec<Value> {
    let mut old =
        vec![json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": karpenter } })];
    for o in objects {
        let mut o = o.clone();
        match o["kind"].as_str() {
            Some("Namespace") => continue,
            Some("ServiceAccount" | "Deployment") => o["metadata"]["namespace"] = json!(karpenter),
            Some("RoleBinding" | "ClusterRoleBinding") => {
                o["subjects"] =
                    json!([{ "kind": "ServiceAccount", "name": name, "namespace": karpenter }])
            }
            _ => {}
        }
        old.push(o);
    }
    old
}

fn write(dir: &Path, file: &str, objects: &[Value]) -> PathBuf {
    let path = dir.join(file);
    let text: Vec<String> = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect();
    std::fs::write(&path, text.join("\n---\n")).unwrap();
    path
}

fn subjects(rt: &tokio::runtime::Runtime, client: &kube::Client, name: &str) -> Vec<String> {
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = rt
        .block_on(bindings.get(&format!("{name}:csr-approver")))
        .unwrap();
    binding
        .subjects
        .unwrap_or_default()
        .into_iter()
        .map(|s| format!("{}/{}", s.namespace.unwrap_or_default(), s.name))
        .collect()
}

#[test]
fn apply_moves_a_controller_to_its_own_namespace_only_once_the_new_one_is_available() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: controller handover") else {
        return;
    };
    let cli = Cli::new(crate::BIN).testbed(&tb).kubeconfig(&tb.kubeconfig);
    let n = unique();
    let (name, karpenter, secret) = (
        format!("hv-{n}"),
        format!("karpenter-hv-{n}"),
        format!("keys-{n}"),
    );
    let dir = tempfile::tempdir().unwrap();
    let new = renamed_approver(&name, &karpenter, &secret);
    let old = old_layout(&new, &name, &karpenter);
    let old_file = write(dir.path(), "old.yaml", &old);
    let new_file = write(dir.path(), "new.yaml", &new);
    let (rt, client) = admin(&tb);

    // The install as it was, and the Secret its pods read.
    let out = cli.run(&["apply", old_file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secrets_old: Api<Secret> = Api::namespaced(client.clone(), &karpenter);
    rt.block_on(secrets_old.create(
        &Default::default(),
        &serde_json::from_value(json!({ "metadata": { "name": secret }, "stringData": { "key": "not-printed-7f3a" } })).unwrap(),
    ))
    .unwrap();

    // A look-alike in an attacker's namespace: our name, our label, its own account.
    let evil = format!("evil-hv-{n}");
    let look_alike: Vec<Value> = vec![
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": evil } }),
        json!({ "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": { "name": name, "namespace": evil, "labels": { "app.kubernetes.io/managed-by": "kubean-karpenter" } } }),
        json!({ "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": { "name": name, "namespace": evil, "labels": { "app.kubernetes.io/managed-by": "kubean-karpenter" } },
                "spec": { "selector": { "matchLabels": { "app": "evil" } }, "template": {
                    "metadata": { "labels": { "app": "evil" } },
                    "spec": { "serviceAccountName": name, "containers": [{ "name": "c", "image": "registry.example/evil@sha256:0000000000000000000000000000000000000000000000000000000000000000" }] } } } }),
    ];
    let evil_file = write(dir.path(), "evil.yaml", &look_alike);
    let out = cli.run(&["apply", evil_file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The new Deployment never gets a pod: apply stops, and the old one keeps its rights.
    let out = cli.run(&[
        "apply",
        new_file.to_str().unwrap(),
        "--handover-timeout",
        "4s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for says in [
        format!("handover: moving Deployment {name} from namespace {karpenter} to {name}"),
        format!("handover: copied Secret {secret} from namespace {karpenter} to {name}"),
        "has no available pod after".to_owned(),
        format!("the controller keeps running in namespace {karpenter} with its rights"),
        "re-running apply resumes".to_owned(),
        format!(
            "handover: Deployment {evil}/{name} is named and labelled like ours but left alone: the RoleBinding kube-system/{name} does not name its account"
        ),
    ] {
        assert!(stderr.contains(&says), "should say {says:?}: {stderr}");
    }
    assert!(!stderr.contains("not-printed-7f3a"), "{stderr}");
    let old_deployments: Api<Deployment> = Api::namespaced(client.clone(), &karpenter);
    let new_deployments: Api<Deployment> = Api::namespaced(client.clone(), &name);
    assert!(
        rt.block_on(old_deployments.get_opt(&name))
            .unwrap()
            .is_some()
    );
    assert!(
        rt.block_on(new_deployments.get_opt(&name))
            .unwrap()
            .is_some()
    );
    let both = subjects(&rt, &client, &name);
    assert!(
        both.contains(&format!("{karpenter}/{name}")) && both.contains(&format!("{name}/{name}")),
        "while the new Deployment is not available both accounts are bound: {both:?}"
    );
    assert!(
        !both.contains(&format!("{evil}/{name}")),
        "the look-alike's account is never bound: {both:?}"
    );

    // As the Deployment controller and kubelet would once a pod is ready.
    let generation = rt
        .block_on(new_deployments.get(&name))
        .unwrap()
        .metadata
        .generation
        .unwrap();
    rt.block_on(new_deployments.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": {
            "observedGeneration": generation, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        } })),
    ))
    .unwrap();

    let out = cli.run(&[
        "apply",
        new_file.to_str().unwrap(),
        "--handover-timeout",
        "60s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    for says in [
        format!("handover: {name}/{name} has 1 available pod(s)"),
        format!("handover: deleted Deployment {karpenter}/{name}"),
        format!("handover: deleted ServiceAccount {karpenter}/{name}"),
        format!("handover: deleted Secret {karpenter}/{secret} (now in namespace {name})"),
    ] {
        assert!(stderr.contains(&says), "should say {says:?}: {stderr}");
    }
    assert!(
        rt.block_on(old_deployments.get_opt(&name))
            .unwrap()
            .is_none()
    );
    let old_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &karpenter);
    assert!(rt.block_on(old_accounts.get_opt(&name)).unwrap().is_none());
    assert!(rt.block_on(secrets_old.get_opt(&secret)).unwrap().is_none());
    let secrets_new: Api<Secret> = Api::namespaced(client.clone(), &name);
    let copied = rt.block_on(secrets_new.get(&secret)).unwrap();
    assert_eq!(
        copied.data.unwrap()["key"].0,
        b"not-printed-7f3a".to_vec(),
        "the keys travelled unchanged"
    );
    assert_eq!(
        subjects(&rt, &client, &name),
        vec![format!("{name}/{name}")]
    );
    // The look-alike is untouched: its Deployment and account are still there.
    let evil_deployments: Api<Deployment> = Api::namespaced(client.clone(), &evil);
    assert!(
        rt.block_on(evil_deployments.get_opt(&name))
            .unwrap()
            .is_some()
    );
    let evil_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &evil);
    assert!(rt.block_on(evil_accounts.get_opt(&name)).unwrap().is_some());

    // Moved: the next apply moves nothing (the look-alike is still only noted).
    let out = cli.run(&["apply", new_file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && !stderr.contains("handover: moving")
            && !stderr.contains("handover: deleted"),
        "{stderr}"
    );

    // A move that stopped after deleting the old Deployment (killed there) left the old account
    // and the Secret's original: the next apply retires them.
    rt.block_on(old_accounts.create(
        &Default::default(),
        &serde_json::from_value(json!({ "metadata": { "name": name, "labels": { "app.kubernetes.io/managed-by": "kubean-karpenter" } } })).unwrap(),
    ))
    .unwrap();
    rt.block_on(secrets_old.create(
        &Default::default(),
        &serde_json::from_value(json!({ "metadata": { "name": secret }, "stringData": { "key": "not-printed-7f3a" } })).unwrap(),
    ))
    .unwrap();
    let out = cli.run(&["apply", new_file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for says in [
        format!("handover: moving what is left of {name} from namespace {karpenter} to {name}"),
        format!("handover: deleted ServiceAccount {karpenter}/{name}"),
        format!("handover: deleted Secret {karpenter}/{secret} (now in namespace {name})"),
    ] {
        assert!(stderr.contains(&says), "should say {says:?}: {stderr}");
    }
    assert!(rt.block_on(old_accounts.get_opt(&name)).unwrap().is_none());
    assert!(rt.block_on(secrets_old.get_opt(&secret)).unwrap().is_none());
    assert!(rt.block_on(evil_accounts.get_opt(&name)).unwrap().is_some());

    // Clean up what is this test's alone.
    for ns in [&name, &karpenter, &evil] {
        delete(&tb, &["namespace", ns, "--wait=false"]);
    }
    delete(
        &tb,
        &[
            "clusterrole,clusterrolebinding",
            &format!("{name}:csr-approver"),
        ],
    );
    delete(
        &tb,
        &[
            "validatingadmissionpolicy,validatingadmissionpolicybinding",
            &format!("{name}-node-deletes"),
        ],
    );
    delete(&tb, &["-n", "kube-system", "role,rolebinding,lease", &name]);
}

/// Issue 47 review, F4: a tenant who may create namespaces makes the controller's namespace
/// before apply does and holds rights there; apply refuses to put the controller's account in it.
#[test]
fn apply_refuses_a_controller_namespace_someone_else_made() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: squatted controller namespace")
    else {
        return;
    };
    let cli = Cli::new(crate::BIN).testbed(&tb).kubeconfig(&tb.kubeconfig);
    let n = unique();
    let name = format!("sq-{n}");
    let dir = tempfile::tempdir().unwrap();
    let objects = renamed_approver(&name, &format!("karpenter-sq-{n}"), &format!("keys-{n}"));
    let file = write(dir.path(), "bundle.yaml", &objects);
    let squat = write(
        dir.path(),
        "squat.yaml",
        &[json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } })],
    );
    let out = cli.run(&["apply", squat.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for dry_run in [true, false] {
        let mut args = vec!["apply", file.to_str().unwrap()];
        if dry_run {
            args.push("--dry-run=server");
        }
        let out = cli.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "namespace {name} exists but kubean-karpenter did not make it"
            )) && stderr.contains("nothing more applied"),
            "{stderr}"
        );
    }
    let (rt, client) = admin(&tb);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    assert!(
        rt.block_on(accounts.get_opt(&name)).unwrap().is_none(),
        "no controller account in a namespace someone else made"
    );
    delete(&tb, &["namespace", &name, "--wait=false"]);
}

//! `apply --diff`, `apply --prune`, the Helm step and doctor's read-only role, against the
//! testbed's apiserver. Every spec here gets a unique cluster, pool and namespace names: the
//! testbed is shared by tests running at the same time.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kk_testkit::cli::Cli;
use kk_testkit::repo;

use crate::cli;

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn unique() -> String {
    let mut b = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!("t{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

/// The example spec with unique names; `edit` changes it further.
fn spec(
    tb: &kk_testkit::testbed::Testbed,
    dir: &Path,
    n: &str,
    edit: impl Fn(String) -> String,
) -> PathBuf {
    let text = kk_spec::EXAMPLE
        .replace("name: demo ", &format!("name: {n} "))
        .replace(
            "/kubean-karpenter/demo/join",
            &format!("/kubean-karpenter/{n}/join"),
        )
        .replace("workload-general", &format!("wg-{n}"))
        .replace("workload-gpu-l4", &format!("wl4-{n}"))
        .replace(
            "    namespace: karpenter\n",
            &format!("    namespace: karpenter-{n}\n"),
        )
        .replace(
            "    namespace: kubean-system\n",
            &format!("    namespace: kubean-{n}\n"),
        );
    let path = dir.join(format!("{n}.yaml"));
    std::fs::write(&path, edit(text)).unwrap();
    // Kubean's namespace, and the default ServiceAccount the testbed never creates.
    let ns = dir.join("ns.yaml");
    std::fs::write(
        &ns,
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: kubean-{n}}}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: default, namespace: default}}\n"),
    )
    .unwrap();
    ok(&cli(
        tb,
        &[
            "apply",
            ns.to_str().unwrap(),
            "--kubeconfig",
            tb.kubeconfig.to_str().unwrap(),
        ],
    ));
    path
}

fn apply<'a>(
    tb: &'a kk_testkit::testbed::Testbed,
    spec: &'a Path,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let k = tb.kubeconfig.to_str().unwrap();
    let mut v = vec![
        "apply",
        spec.to_str().unwrap(),
        "--kubeconfig",
        k,
        "--mgmt-kubeconfig",
        k,
        "--skip-aws",
    ];
    v.extend_from_slice(extra);
    v
}

fn kubectl(tb: &kk_testkit::testbed::Testbed, args: &[&str]) -> Output {
    Command::new("kubectl")
        .env("KUBECONFIG", &tb.kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn diff_shows_the_changed_field_and_changes_nothing() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply --diff") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = unique();
    let s = spec(&tb, dir.path(), &n, |t| t);
    ok(&cli(&tb, &apply(&tb, &s, &["--skip-helm"])));
    let changed = spec(&tb, dir.path(), &n, |t| {
        t.replace("workload-tier: general", "workload-tier: changed")
    });
    let out = ok(&cli(&tb, &apply(&tb, &changed, &["--skip-helm", "--diff"])));
    assert!(
        out.contains(&format!("NodePool/wg-{n}:\n  spec.template.metadata.labels.workload-tier: \"general\" -> \"changed\"")),
        "{out}"
    );
    assert!(
        out.contains("kubean-karpenter-rotator/ServiceAccount/kubean-karpenter-rotator: unchanged"),
        "{out}"
    );
    // The pool's labels are also kubelet flags in its EC2NodeClass's userData: that line.
    assert!(
        out.contains("EC2NodeClass/kubean-aws-cpu:\n  spec.userData: (text)\n"),
        "{out}"
    );
    // The node identity policy holds each pool's labels, so it changes with them.
    assert!(
        out.contains("ValidatingAdmissionPolicy/kubean-karpenter-node-identity:\n  spec.variables"),
        "{out}"
    );
    assert!(
        out.contains("workload-tier=changed") && out.contains("3 object(s) would change"),
        "{out}"
    );
    let live = kubectl(
        &tb,
        &[
            "get",
            "nodepool",
            &format!("wg-{n}"),
            "-o",
            "jsonpath={.spec.template.metadata.labels.workload-tier}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&live.stdout),
        "general",
        "--diff changed nothing"
    );
}

#[test]
fn prune_deletes_what_the_bundle_dropped_and_nodepools_only_when_confirmed() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply --prune") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = unique();
    let s = spec(&tb, dir.path(), &n, |t| t);
    ok(&cli(&tb, &apply(&tb, &s, &["--skip-helm"])));
    // The CPU pool renamed: its NodePool and inflate Deployment leave the bundle.
    let renamed = spec(&tb, dir.path(), &n, |t| {
        t.replace(&format!("wg-{n}"), &format!("wg2-{n}"))
    });
    let out = ok(&cli(
        &tb,
        &apply(&tb, &renamed, &["--skip-helm", "--prune"]),
    ));
    assert!(
        out.contains(&format!("default/Deployment/inflate-wg-{n} pruned")),
        "{out}"
    );
    assert!(
        out.contains(&format!("NodePool/wg-{n} kept")) && out.contains("--prune-nodepools"),
        "{out}"
    );
    assert!(
        !kubectl(
            &tb,
            &[
                "get",
                "deployment",
                "-n",
                "default",
                &format!("inflate-wg-{n}")
            ]
        )
        .status
        .success()
    );
    assert!(
        kubectl(&tb, &["get", "nodepool", &format!("wg-{n}")])
            .status
            .success(),
        "the NodePool is kept"
    );
    // Another cluster's labelled objects are never candidates: only this spec's inventory is.
    assert!(!out.contains("NodePool/workload-general"), "{out}");
    let out = ok(&cli(
        &tb,
        &apply(
            &tb,
            &renamed,
            &["--skip-helm", "--prune", "--prune-nodepools"],
        ),
    ));
    assert!(out.contains(&format!("NodePool/wg-{n} pruned")), "{out}");
    assert!(
        !kubectl(&tb, &["get", "nodepool", &format!("wg-{n}")])
            .status
            .success()
    );
}

/// A stand-in for the `helm` CLI that keeps releases in a folder: `version`, `list -o json`,
/// `get values -o json` and `upgrade --install` (which records the values it was given). It
/// logs every call, so the test sees whether apply installed, upgraded or skipped.
const FAKE_HELM: &str = r#"#!/usr/bin/env python3
import json, os, sys, yaml
state = os.environ["FAKE_HELM_STATE"]
os.makedirs(state, exist_ok=True)
args = sys.argv[1:]
with open(os.path.join(state, "calls.log"), "a") as f:
    f.write(" ".join(args) + "\n")
def opt(name):
    return args[args.index(name) + 1] if name in args else None
if args[0] == "version":
    print("v3.99.0"); sys.exit(0)
if args[0] == "list":
    name = opt("--filter").strip("^$")
    path = os.path.join(state, name + ".json")
    print(json.dumps([json.load(open(path))["release"]] if os.path.exists(path) else [])); sys.exit(0)
if args[:2] == ["get", "values"]:
    print(json.dumps(json.load(open(os.path.join(state, args[2] + ".json")))["values"])); sys.exit(0)
if args[:2] == ["upgrade", "--install"]:
    name, chart = args[2], args[3]
    version = opt("--version") or "0.0.0"
    values = yaml.safe_load(open(opt("-f")))
    release = {"name": name, "chart": chart.rsplit("/", 1)[-1] + "-" + version}
    json.dump({"release": release, "values": values}, open(os.path.join(state, name + ".json"), "w"))
    sys.exit(0)
sys.exit("fake helm: unsupported " + " ".join(args))
"#;

#[test]
fn helm_installs_then_skips_unchanged_releases_and_names_the_command_without_helm() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: Helm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = unique();
    let s = spec(&tb, dir.path(), &n, |t| t);
    // No helm: exit 2, naming the commands to run.
    let out = Cli::new(crate::BIN)
        .testbed(&tb)
        .envs([("KK_HELM", "/nonexistent/helm")])
        .run(&apply(&tb, &s, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`helm` is not on PATH")
            && stderr.contains("helm upgrade --install karpenter oci://public.ecr.aws/karpenter/karpenter --version 1.15.2")
            && stderr.contains("helm upgrade --install aws-ebs-csi-driver")
            && stderr.contains("--version 2.64.0"),
        "{stderr}"
    );
    let helm = dir.path().join("helm");
    std::fs::write(&helm, FAKE_HELM).unwrap();
    std::fs::set_permissions(&helm, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let state = dir.path().join("helm-state");
    let env = [
        ("KK_HELM", helm.to_str().unwrap()),
        ("FAKE_HELM_STATE", state.to_str().unwrap()),
    ];
    let with_helm = Cli::new(crate::BIN).testbed(&tb).envs(env);
    let out = ok(&with_helm.run(&apply(&tb, &s, &[])));
    assert!(
        out.contains("helm: karpenter: installed")
            && out.contains("helm: aws-ebs-csi-driver: installed"),
        "{out}"
    );
    let calls = || std::fs::read_to_string(state.join("calls.log")).unwrap();
    assert_eq!(
        calls().matches("upgrade --install").count(),
        2,
        "{}",
        calls()
    );
    // Second apply: chart and values unchanged, so no `helm upgrade` (it would add a revision).
    let out = ok(&with_helm.run(&apply(&tb, &s, &[])));
    assert!(out.contains("helm: karpenter: unchanged"), "{out}");
    assert_eq!(
        calls().matches("upgrade --install").count(),
        2,
        "{}",
        calls()
    );
    // A changed value: upgraded.
    let changed = spec(&tb, dir.path(), &n, |t| {
        t.replace(
            "    isolatedVPC: false\n",
            &format!("    interruptionQueue: q-{n}\n    isolatedVPC: false\n"),
        )
    });
    let out = ok(&with_helm.run(&apply(&tb, &changed, &[])));
    assert!(out.contains("helm: karpenter: upgraded"), "{out}");
    assert_eq!(
        calls().matches("upgrade --install karpenter").count(),
        2,
        "{}",
        calls()
    );
}

#[test]
fn doctor_runs_with_only_its_read_only_role_and_that_role_cannot_write() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "doctor: read-only role") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = unique();
    let s = spec(&tb, dir.path(), &n, |t| t);
    // doctor --permissions renders the ClusterRole; bind it to a fresh ServiceAccount.
    let perms: serde_json::Value =
        serde_json::from_slice(&cli(&tb, &["doctor", "--permissions", "-o", "json"]).stdout)
            .unwrap();
    let mut role = perms["clusterRole"].clone();
    role["metadata"]["name"] = serde_json::json!(format!("kk-doctor-{n}"));
    let objects = format!(
        "{}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: doctor-{n}, namespace: default}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: kk-doctor-{n}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kk-doctor-{n}}}\nsubjects: [{{kind: ServiceAccount, name: doctor-{n}, namespace: default}}]\n",
        serde_json::to_string(&role).unwrap()
    );
    let file = dir.path().join("rbac.yaml");
    std::fs::write(&file, objects).unwrap();
    ok(&cli(
        &tb,
        &[
            "apply",
            file.to_str().unwrap(),
            "--kubeconfig",
            tb.kubeconfig.to_str().unwrap(),
        ],
    ));
    let token = kubectl(
        &tb,
        &["create", "token", &format!("doctor-{n}"), "-n", "default"],
    );
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout).unwrap().trim().to_owned();
    let kubeconfig = dir.path().join("doctor.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: tb, cluster: {{server: \"{}\", certificate-authority: \"{}\"}}}}]\nusers: [{{name: doctor, user: {{token: \"{token}\"}}}}]\ncontexts: [{{name: tb, context: {{cluster: tb, user: doctor}}}}]\ncurrent-context: tb\n",
            tb.env["KK_TESTBED_APISERVER"], tb.env["KK_TESTBED_CA"]
        ),
    )
    .unwrap();
    let out = cli(
        &tb,
        &[
            "doctor",
            s.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--no-aws",
            "-o",
            "json",
        ],
    );
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        !report.contains("forbidden"),
        "the role lacks a permission doctor uses: {report}"
    );
    // Finding #7, the attack: the same identity reads Secrets (service-account tokens, the
    // controllers' AWS keys, the authenticator's serving key): forbidden, get and list.
    for args in [
        vec!["get", "secrets", "-n", "kube-system"],
        vec!["get", "secrets", "-A"],
        vec![
            "get",
            "secret",
            "bootstrap-token-abcdef",
            "-n",
            "kube-system",
        ],
    ] {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("forbidden"),
            "doctor's role could {args:?}: {stderr}"
        );
    }
    // The attack: the same identity tries to write.
    let cm = dir.path().join("cm.yaml");
    std::fs::write(&cm, format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: doctor-write-{n}, namespace: default}}\n")).unwrap();
    let out = cli(
        &tb,
        &[
            "apply",
            cm.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn verify_cleans_up_what_it_created_when_interrupted() {
    let _turn = crate::testbed_apply_turn();
    // The testbed has no scheduler: verify's pods stay Pending and it waits in its first
    // phase until Ctrl-C (SIGINT).
    let Some(tb) = kk_testkit::testbed::require(&repo(), "verify: Ctrl-C") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = unique();
    let s = spec(&tb, dir.path(), &n, |t| t);
    let child = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .envs(&tb.env)
        .args([
            "verify",
            s.to_str().unwrap(),
            "--pool",
            &format!("wg-{n}"),
            "--kubeconfig",
            tb.kubeconfig.to_str().unwrap(),
            "--no-doctor",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let name = format!("kk-verify-wg-{n}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !kubectl(&tb, &["get", "deployment", "-n", "default", &name])
        .status
        .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "verify never created {name}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!("cleaned up Deployment default/{name}")),
        "{stderr}"
    );
    let left = kubectl(
        &tb,
        &[
            "get",
            "deployment",
            "-n",
            "default",
            &name,
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    );
    assert!(
        !left.status.success() || !left.stdout.is_empty(),
        "the Deployment is gone or going"
    );
}

#[test]
fn an_apiserver_refusal_half_way_exits_2_lists_what_was_applied_and_the_rerun_resumes() {
    let _turn = crate::testbed_apply_turn();
    // A ValidatingAdmissionPolicy that lets Deployments in the CSR approver's namespace pass
    // only as a dry run: the dry run of everything passes, the real apply is refused at the
    // first Deployment (the CSR approver's), after the objects before it were applied. (The
    // turn keeps other tests' applies out of that namespace meanwhile.)
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: apiserver refusal half-way")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = unique();
    let s = spec(&tb, dir.path(), &n, |t| t);
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: dry-run-only-{n}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}}]
  validations: [{{expression: 'request.dryRun == true', message: 'refused half-way by the test'}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: dry-run-only-{n}}}
spec:
  policyName: dry-run-only-{n}
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: kubean-karpenter-csr-approver}}}}
"
        ),
    )
    .unwrap();
    ok(&cli(
        &tb,
        &[
            "apply",
            policy.to_str().unwrap(),
            "--kubeconfig",
            tb.kubeconfig.to_str().unwrap(),
        ],
    ));
    std::thread::sleep(std::time::Duration::from_secs(3));
    let out = cli(&tb, &apply(&tb, &s, &["--skip-helm"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for says in [
        "refused half-way by the test",
        "refused an object after the dry run passed",
        "applied: ",
        "ServiceAccount/kubean-karpenter-csr-approver",
        "not applied: kubean-karpenter-csr-approver/Deployment/kubean-karpenter-csr-approver",
        "kubean-karpenter-rotator/Deployment/kubean-karpenter-rotator",
        "re-running apply resumes",
    ] {
        assert!(stderr.contains(says), "should say {says:?}: {stderr}");
    }
    // The admission fixed, the re-run applies the rest.
    assert!(
        kubectl(
            &tb,
            &[
                "delete",
                "validatingadmissionpolicybinding",
                &format!("dry-run-only-{n}")
            ]
        )
        .status
        .success()
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    ok(&cli(&tb, &apply(&tb, &s, &["--skip-helm"])));
    assert!(
        kubectl(
            &tb,
            &[
                "get",
                "deployment",
                "-n",
                "kubean-karpenter-rotator",
                "kubean-karpenter-rotator"
            ]
        )
        .status
        .success()
    );
}

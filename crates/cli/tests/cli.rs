//! The binary as a user runs it: exit codes, stdin, nothing written on failure.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs")
        .join(rel)
}

#[test]
fn init_prints_a_spec_that_renders() {
    let init = bin().arg("init").output().unwrap();
    assert!(init.status.success());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b");
    let mut child = bin()
        .args(["render", "-", "-o"])
        .arg(&out)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&init.stdout).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(out.join("ORDER.md").is_file());
    assert!(out.join("nodeclasses/kubean-aws-gpu.yaml").is_file());
}

#[test]
fn invalid_spec_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    let result = bin()
        .arg("render")
        .arg(fixture("invalid/negative-limit.yaml"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr
            .contains("negative-limit.yaml:37:21: spec.pools[0].limits.cpu: limit -4 is negative"),
        "{stderr}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no staging left behind"
    );
}

#[test]
fn existing_output_is_kept_without_force_and_replaced_whole_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    std::fs::create_dir_all(out.join("stale")).unwrap();
    let refused = bin()
        .args(["render", "--example", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(out.join("stale").exists());
    let forced = bin()
        .args(["render", "--example", "--force", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(forced.status.success());
    assert!(
        !out.join("stale").exists(),
        "old bundle replaced, not merged"
    );
    assert!(out.join("karpenter/values.yaml").is_file());
}

#[test]
fn ca_from_file_and_kubeconfig_resolve_relative_to_the_spec() {
    for spec in [
        "static-minimal.yaml",
        "secrets-manager-arm.yaml",
        "seed000-static.yaml",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b");
        let result = bin()
            .arg("render")
            .arg(fixture(spec))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            result.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
}

#[test]
fn missing_ca_file_names_the_field() {
    let text = std::fs::read_to_string(fixture("static-minimal.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, text).unwrap();
    let result = bin()
        .arg("render")
        .arg(&spec)
        .arg("-o")
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains(":12:11: spec.caBundle.file: cannot read"),
        "{stderr}"
    );
    assert!(!dir.path().join("b").exists());
}

#[test]
fn stdout_output_is_the_manifest_stream() {
    let result = bin()
        .args(["render", "--example", "-o", "-"])
        .output()
        .unwrap();
    assert!(result.status.success());
    let text = String::from_utf8(result.stdout).unwrap();
    let docs = kk_model::yaml::load_documents(&text, Default::default()).unwrap();
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|d| d.value["kind"].as_str())
        .collect();
    // Kubean first (its ConfigMaps before the Cluster, the operation last), workloads last;
    // Helm values are not manifests.
    assert_eq!(
        &kinds[..4],
        &["ConfigMap", "ConfigMap", "Cluster", "ClusterOperation"]
    );
    assert!(kinds.contains(&"EC2NodeClass") && kinds.contains(&"NodePool"));
    let first_pool = kinds.iter().position(|k| *k == "NodePool").unwrap();
    let last_class = kinds.iter().rposition(|k| *k == "EC2NodeClass").unwrap();
    assert!(last_class < first_pool);
    assert!(
        !text.contains("settings:"),
        "values files are not part of the stream"
    );
}

#[test]
fn usage_errors_exit_2() {
    let result = bin().args(["render"]).output().unwrap();
    assert_eq!(result.status.code(), Some(2));
}

/// Issue 11 item 7, stage 1: before Kubean has built the control plane there is no CA; a spec
/// without caBundle renders only kubean/ and an ORDER.md that says how to reach stage 2, and
/// says so on stderr.
#[test]
fn a_spec_without_a_ca_renders_stage_one_only() {
    let dir = tempfile::tempdir().unwrap();
    let example = kk_spec::EXAMPLE;
    let start = example.find("  caBundle:").unwrap();
    let end = start + example[start..].find("  kubean:").unwrap();
    let spec = format!("{}{}", &example[..start], &example[end..]);
    let spec_path = dir.path().join("stage1.yaml");
    std::fs::write(&spec_path, spec).unwrap();
    let out_dir = dir.path().join("bundle");
    let out = bin()
        .arg("render")
        .arg(&spec_path)
        .arg("-o")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("stage 1: spec.caBundle is not set"),
        "{stderr}"
    );
    let mut files: Vec<String> = walk(&out_dir);
    files.sort();
    assert_eq!(
        files,
        [
            "ORDER.md",
            "kubean/1-hosts-conf.yaml",
            "kubean/2-vars-conf.yaml",
            "kubean/3-cluster.yaml",
            "kubean/4-cluster-operation.yaml"
        ]
    );
    let order = std::fs::read_to_string(out_dir.join("ORDER.md")).unwrap();
    assert!(order.contains("stage 1 of 2"), "{order}");
    assert!(
        order.contains("-n kubean-system get configmap demo-kubeconf -o jsonpath='{.data.config}' > demo.kubeconfig"),
        "{order}"
    );
    assert!(
        order.contains("caBundle: {kubeconfig: {path: demo.kubeconfig}}"),
        "{order}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            for rel in walk(&path) {
                out.push(format!(
                    "{}/{rel}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        } else {
            out.push(path.file_name().unwrap().to_string_lossy().to_string());
        }
    }
    out
}

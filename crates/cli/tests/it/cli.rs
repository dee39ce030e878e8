//! The binary as a user runs it: exit codes, stdin, nothing written on failure.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// 2026-12-07, the day these tests were written against: what they assert of warnings that
/// depend on the day (a Kubernetes minor's end of life) must not change with the calendar.
const PINNED_DAY: &str = "1796601600";

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"));
    command.env("SOURCE_DATE_EPOCH", PINNED_DAY);
    command
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
fn spot_pools_with_the_interruption_queue_off_validate_with_a_located_warning() {
    // The seed's runbook: spot pools, interruptionQueue: "".
    let spec = fixture("seed000-static.yaml");
    let out = bin().arg("validate").arg(&spec).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning is not an error: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is valid (2 pools, 2 warnings)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(
            "seed000-static.yaml:68:24: spec.karpenter.interruptionQueue: a pool allows spot"
        ) && stderr.contains("remove the field (the queue is then named after the cluster)"),
        "{stderr}"
    );
    // The other warning: no spec.controller, so no health agent watches the GPU pool.
    assert!(
        stderr.contains("nothing watches pool workload-gpu-l4's GPUs"),
        "{stderr}"
    );
    // The example allows spot and names no queue: it gets one, and no warning.
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["render", "--example", "-o"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
    assert!(dir.path().join("b/interruption/rules.json").is_file());
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
            .contains("negative-limit.yaml:38:21: spec.pools[0].limits.cpu: limit -4 is negative"),
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

/// Attack row "a token that lives over a day": refused before any cluster is contacted (the
/// kubeconfig points nowhere), exit 2; the opt-in that once let it through is gone.
#[test]
fn a_token_over_a_day_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut cmd = bin();
        cmd.args(["token", "create", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(extra);
        cmd.output().unwrap()
    };
    let refused = run(&["--ttl", "25h"]);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("ceiling") && err.contains("1d1h"), "{err}");
    // The old opt-in is no flag at all any more.
    let opted = run(&["--ttl", "25h", "--allow-long-ttl"]);
    assert_eq!(opted.status.code(), Some(2));
    let err = String::from_utf8_lossy(&opted.stderr);
    assert!(
        err.contains("unexpected argument '--allow-long-ttl'"),
        "{err}"
    );
    // The default is short-lived and passes the check too.
    let default = run(&[]);
    assert!(!String::from_utf8_lossy(&default.stderr).contains("ceiling"));
}

/// Attack row "bundle file readable by another user": every directory of a rendered bundle
/// is 0700 and every file 0600 (a static-mode userData holds the token), whatever the
/// umask; and `nobody` cannot read the userData.
#[cfg(unix)]
#[test]
fn the_bundle_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    let spec = fixture("static-minimal.yaml");
    let result = bin()
        .arg("render")
        .arg(&spec)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let mut files = 0;
    let mut stack = vec![out.clone()];
    while let Some(d) = stack.pop() {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", path.display());
                files += 1;
            }
        }
    }
    assert!(files > 5);
    // Another user, when the test may switch to one (root with runuser).
    let nodeclass = std::fs::read_dir(out.join("nodeclasses"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        std::fs::read_to_string(&nodeclass)
            .unwrap()
            .contains("TOKEN=")
    );
    // Make the temp dir traversable so only the bundle's own modes stand in the way.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // runuser exists where the test runs as root; elsewhere the modes above are the proof.
    if let Ok(other) = Command::new("runuser")
        .args(["-u", "nobody", "--", "cat"])
        .arg(&nodeclass)
        .output()
        && !String::from_utf8_lossy(&other.stderr).contains("may not be used")
    {
        assert!(
            !other.status.success(),
            "nobody read {}",
            nodeclass.display()
        );
        assert!(String::from_utf8_lossy(&other.stderr).contains("Permission denied"));
    }
}

/// `token revoke` given a whole token instead of its ID: refused, and the secret half
/// appears nowhere in the output.
#[test]
fn token_revoke_never_echoes_a_secret() {
    let secret = "0123456789abcdef";
    for arg in [format!("abcdef.{secret}"), secret.to_owned()] {
        let result = bin()
            .args(["token", "revoke", "--kubeconfig", "/nonexistent", &arg])
            .output()
            .unwrap();
        assert_eq!(result.status.code(), Some(2));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        );
        assert!(!all.contains(secret), "{all}");
        assert!(all.contains("invalid token ID"), "{all}");
    }
}

/// Finding #10, performed: a spec whose Karpenter namespace climbs out of the bundle
/// (`namespaces/<namespace>.yaml`) and carries a quote into the rotator's CEL. `render` exits
/// 2 with the field and its line, and writes nothing, inside or outside the output directory.
#[test]
fn a_namespace_that_climbs_out_of_the_bundle_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("static-minimal.yaml")).unwrap();
    let hostile = text.replacen(
        "  join:\n",
        "  karpenter:\n    namespace: \"../../escaped' || true || '\"\n  join:\n",
        1,
    );
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, &hostile).unwrap();
    let line = hostile.lines().position(|l| l.contains("escaped")).unwrap() + 1;
    let out = dir.path().join("a").join("b").join("bundle");
    let result = bin()
        .arg("render")
        .arg(&spec)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("spec.yaml:{line}:"))
            && stderr.contains("spec.karpenter.namespace"),
        "{stderr}"
    );
    assert!(stderr.contains("not a DNS label"), "{stderr}");
    assert!(!out.exists());
    let mut left = Vec::new();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                left.push(path);
            }
        }
    }
    assert_eq!(left, [spec], "render wrote files");
}

#[test]
fn verify_interruption_needs_a_queue_and_a_cpu_pool_and_says_so_before_touching_anything() {
    // No cluster is reachable here: both refusals come before verify connects.
    let off = bin()
        .args(["verify", "--interruption"])
        .arg(fixture("seed000-static.yaml"))
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&off.stderr);
    assert_eq!(off.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--interruption: the spec has no interruption queue"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("cluster.yaml");
    std::fs::write(&spec, kk_spec::EXAMPLE).unwrap();
    let gpu_only = bin()
        .args(["verify", "--interruption", "--pool", "workload-gpu-l4"])
        .arg(&spec)
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&gpu_only.stderr);
    assert_eq!(gpu_only.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--interruption needs a CPU pool"),
        "{stderr}"
    );
}

#[test]
fn a_kubernetes_minor_past_its_end_of_life_is_a_located_warning_with_the_date_and_the_next_minor() {
    let spec = fixture("static-minimal.yaml");
    let line = std::fs::read_to_string(&spec)
        .unwrap()
        .lines()
        .position(|l| l.contains("kubernetesVersion: v1.34.2"))
        .expect("the fixture is on 1.34")
        + 1;
    let out = bin().arg("validate").arg(&spec).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning is not an error: {stderr}");
    assert!(
        stderr.contains(&format!(
            "static-minimal.yaml:{line}:22: spec.kubernetesVersion: Kubernetes 1.34 reached its end of life on 2026-10-27"
        )) && stderr.contains("plan the upgrade to 1.35"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 warning"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Two months before its end: maintenance mode, said as such.
    let out = bin()
        .arg("validate")
        .arg(&spec)
        .env("SOURCE_DATE_EPOCH", "1788480000") // 2026-09-04
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Kubernetes 1.34 is in maintenance mode (critical and security fixes only) until its end of life on 2026-10-27"),
        "{stderr}"
    );
    // While it is fully supported: nothing.
    let out = bin()
        .arg("validate")
        .arg(&spec)
        .env("SOURCE_DATE_EPOCH", "1767225600") // 2026-01-01
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("spec.kubernetesVersion"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

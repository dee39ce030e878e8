//! The rendered `monitoring/` objects (PrometheusRule, PodMonitor) against the Prometheus
//! Operator's own CRDs on the testbed's real apiserver. The CRDs come from the Go module
//! `github.com/prometheus-operator/prometheus-operator` (`example/prometheus-operator-crd/`,
//! `go mod download` into the module cache; nothing fetched is committed): their OpenAPI
//! schemas are what a cluster running the operator enforces.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The operator release whose CRDs the objects are checked against.
const OPERATOR_MODULE: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cli(tb: &kk_live::testbed::Testbed, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .envs(&tb.env)
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The module's CRD folder, downloaded through the Go module proxy when not cached yet.
fn operator_crds(dir: &Path) -> Option<PathBuf> {
    let out = Command::new("go")
        .args(["mod", "download", "-json", OPERATOR_MODULE])
        .current_dir(dir)
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other => {
            let why = format!("`go mod download {OPERATOR_MODULE}` failed: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIP monitoring testbed: {why}");
            return None;
        }
    };
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(PathBuf::from(info["Dir"].as_str().unwrap()).join("example/prometheus-operator-crd"))
}

fn unique() -> String {
    let mut b = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!("mon{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

/// A Namespace `namespace` and monitoring/ of the fixture that turns it on, rendered there.
fn monitoring_file(dir: &Path, namespace: &str) -> PathBuf {
    let path = repo().join("fixtures/specs/secrets-manager-arm.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut cluster = kk_spec::parse_spec(&text, "secrets-manager-arm")
        .unwrap()
        .spec;
    cluster.spec.karpenter.namespace = namespace.to_owned();
    let mut bundle = kk_render::Bundle::default();
    kk_render::monitoring::render(&cluster, &mut bundle).unwrap();
    let mut out = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n");
    for file in [
        "monitoring/rules.yaml",
        "monitoring/controllers.yaml",
        "monitoring/dashboard.yaml",
    ] {
        out.push_str("---\n");
        out.push_str(&bundle.files[file]);
    }
    let path = dir.join("monitoring.yaml");
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn the_rendered_monitoring_objects_pass_the_operators_crds_on_a_real_apiserver() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_live::testbed::require(&repo(), "monitoring objects") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(crds) = operator_crds(dir.path()) else {
        return;
    };
    let kubeconfig = tb.kubeconfig.to_str().unwrap().to_owned();
    for kind in ["prometheusrules", "podmonitors", "servicemonitors"] {
        let file = crds.join(format!("monitoring.coreos.com_{kind}.yaml"));
        let out = cli(
            &tb,
            &["apply", "--kubeconfig", &kubeconfig, file.to_str().unwrap()],
        );
        assert!(out.status.success(), "installing {kind}: {}", text(&out));
    }
    let namespace = unique();
    let file = monitoring_file(dir.path(), &namespace);
    let file = file.to_str().unwrap();
    // The new kinds are served once the CRDs are Established: retry a while.
    let mut last = None;
    for _ in 0..30 {
        let out = cli(&tb, &["apply", "--kubeconfig", &kubeconfig, file]);
        if out.status.success() {
            last = None;
            break;
        }
        last = Some(text(&out));
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert!(last.is_none(), "apply {file}: {}", last.unwrap_or_default());
    // The apiserver really validates them: an alert whose `for` is not a Prometheus duration
    // is refused at the field.
    let rendered = std::fs::read_to_string(file).unwrap();
    let bad = rendered.replacen("for: 1m", "for: one minute", 1);
    assert_ne!(bad, rendered);
    let bad_file = dir.path().join("bad.yaml");
    std::fs::write(&bad_file, bad).unwrap();
    let out = cli(
        &tb,
        &[
            "apply",
            "--dry-run=server",
            "--kubeconfig",
            &kubeconfig,
            bad_file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("for"), "{}", text(&out));
}

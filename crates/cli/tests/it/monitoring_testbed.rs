//! The rendered `monitoring/` objects (PrometheusRule, PodMonitor) against the Prometheus
//! Operator's own CRDs on the testbed's real apiserver. The CRDs come from the Go module
//! `github.com/prometheus-operator/prometheus-operator` (`example/prometheus-operator-crd/`,
//! `go mod download` into the module cache; nothing fetched is committed): their OpenAPI
//! schemas are what a cluster running the operator enforces.

use std::path::{Path, PathBuf};

use crate::crd_testbed::{apply_once_served, cli, go_module_dir, install_crds, text, unique};

/// The operator release whose CRDs the objects are checked against.
const OPERATOR_MODULE: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
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
    let Some(crds) = go_module_dir(
        OPERATOR_MODULE,
        "example/prometheus-operator-crd",
        "monitoring testbed",
        dir.path(),
    ) else {
        return;
    };
    let kubeconfig = tb.kubeconfig.to_str().unwrap().to_owned();
    install_crds(
        &tb,
        &["prometheusrules", "podmonitors", "servicemonitors"]
            .map(|kind| crds.join(format!("monitoring.coreos.com_{kind}.yaml"))),
    );
    let namespace = unique("mon");
    let file = monitoring_file(dir.path(), &namespace);
    let file = file.to_str().unwrap();
    apply_once_served(&tb, &[], file);
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

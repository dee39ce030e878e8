//! The rendered `monitoring/` objects (PrometheusRule, PodMonitor) against the Prometheus
//! Operator's own CRDs on the testbed's real apiserver. The CRDs come from the Go module
//! `github.com/prometheus-operator/prometheus-operator` (`example/prometheus-operator-crd/`,
//! `go mod download` into the module cache; nothing fetched is committed): their OpenAPI
//! schemas are what a cluster running the operator enforces. Also the Karpenter chart's own
//! ServiceMonitor, which the bundle's values turn on: `helm template` of the chart in the
//! provider's Go module (helm from testbed/tools/helm) with those values.

use std::path::{Path, PathBuf};

use kk_testkit::repo;

use crate::cli;
use crate::crd_testbed::{apply_once_served, go_module_dir, install_crds, text, unique};

/// The operator release whose CRDs the objects are checked against.
const OPERATOR_MODULE: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";

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
    let Some(tb) = kk_testkit::testbed::require(&repo(), "monitoring objects") else {
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

/// The Karpenter release the bundle installs: its chart is read from the provider's Go module.
const KARPENTER_MODULE: &str = "github.com/aws/karpenter-provider-aws@v1.15.2";

/// helm, built by `testbed/lab build-helm` (a wrapper module in testbed/tools/helm, cached).
pub(crate) fn helm(test: &str) -> Option<PathBuf> {
    let out = std::process::Command::new(repo().join("testbed/lab"))
        .arg("build-helm")
        .output()
        .expect("testbed/lab runs");
    if !out.status.success() {
        let why = format!(
            "testbed/lab build-helm failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIP {test}: {why}");
        return None;
    }
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("bin/helm"))
}

/// `helm template karpenter CHART --namespace NS EXTRA -f VALUES`: the manifests, or a panic
/// with helm's error.
fn helm_template(
    helm: &std::path::Path,
    chart: &std::path::Path,
    namespace: &str,
    extra: &[&str],
    values: &std::path::Path,
) -> String {
    let out = std::process::Command::new(helm)
        .args(["template", "karpenter"])
        .arg(chart)
        .args(["--namespace", namespace])
        .args(extra)
        .arg("-f")
        .arg(values)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_karpenter_charts_service_monitor_with_our_values_passes_the_operators_crd() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "Karpenter's ServiceMonitor") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let test = "Karpenter's ServiceMonitor";
    let Some(helm) = helm(test) else { return };
    let Some(chart) = go_module_dir(KARPENTER_MODULE, "charts/karpenter", test, dir.path()) else {
        return;
    };
    let Some(crds) = go_module_dir(
        OPERATOR_MODULE,
        "example/prometheus-operator-crd",
        test,
        dir.path(),
    ) else {
        return;
    };
    install_crds(
        &tb,
        &[crds.join("monitoring.coreos.com_servicemonitors.yaml")],
    );

    // The bundle's values for a cluster that runs the operator (monitoring on).
    let bundle = dir.path().join("bundle");
    let spec = repo().join("fixtures/specs/secrets-manager-arm.yaml");
    let out = cli(
        &tb,
        &[
            "render",
            spec.to_str().unwrap(),
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let values = bundle.join("karpenter/values.yaml");
    assert!(
        std::fs::read_to_string(&values)
            .unwrap()
            .contains("serviceMonitor:")
    );

    // helm template as an API that serves monitoring.coreos.com/v1 (the chart's own condition).
    let namespace = unique("kmon");
    let rendered = helm_template(
        &helm,
        &chart,
        &namespace,
        &["--api-versions", "monitoring.coreos.com/v1"],
        &values,
    );
    let monitor = rendered
        .split("\n---")
        .find(|doc| doc.contains("\nkind: ServiceMonitor"))
        .unwrap_or_else(|| {
            panic!("the chart rendered no ServiceMonitor with our values:\n{rendered}")
        });
    assert!(
        monitor.contains("release: kube-prometheus-stack"),
        "our labels: {monitor}"
    );
    let file = dir.path().join("servicemonitor.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\n{}\n",
            monitor.trim_start_matches('\n')
        ),
    )
    .unwrap();
    apply_once_served(&tb, &[], file.to_str().unwrap());
}

/// `karpenter.featureGates` reaches the controller as the chart maps it: `helm template` of the
/// pinned chart with the bundle's values sets FEATURE_GATES and AWS_FEATURE_GATES with the
/// spec's gates on and every other gate at the chart's default.
#[test]
fn the_karpenter_chart_turns_the_specs_feature_gates_into_the_controllers_env() {
    let test = "Karpenter's feature gates";
    let Some(tb) = kk_testkit::testbed::require(&repo(), test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(helm) = helm(test) else { return };
    let Some(chart) = go_module_dir(KARPENTER_MODULE, "charts/karpenter", test, dir.path()) else {
        return;
    };
    let gated = std::fs::read_to_string(repo().join("fixtures/specs/secrets-manager-arm.yaml"))
        .unwrap()
        .replace(
            "    featureGates: {nodeOverlay: true}\n",
            "    featureGates: {nodeOverlay: true, spotToSpotConsolidation: true, nodeClassCEL: true, reservedCapacity: false}\n",
        );
    assert!(
        gated.contains("spotToSpotConsolidation"),
        "the fixture's featureGates line moved"
    );
    let spec = repo()
        .join("fixtures/specs")
        .join(format!("gates-{}.yaml", std::process::id()));
    std::fs::write(&spec, gated).unwrap();
    let bundle = dir.path().join("bundle");
    let out = cli(
        &tb,
        &[
            "render",
            spec.to_str().unwrap(),
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_file(&spec);
    assert!(out.status.success(), "{}", text(&out));
    let rendered = helm_template(
        &helm,
        &chart,
        "karpenter",
        &[],
        &bundle.join("karpenter/values.yaml"),
    );
    let env = |name: &str| {
        let at = rendered
            .find(&format!("name: {name}\n"))
            .unwrap_or_else(|| panic!("no {name} in the chart's Deployment"));
        rendered[at..]
            .lines()
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let core = env("FEATURE_GATES");
    for want in [
        "SpotToSpotConsolidation=true",
        "ReservedCapacity=false",
        // Not named in the spec: on, because the example's GPU pools run the health agent.
        "NodeRepair=true",
        "StaticCapacity=false",
        "NodeOverlay=true",
    ] {
        assert!(core.contains(want), "{want} not in {core}");
    }
    assert!(
        env("AWS_FEATURE_GATES").contains("NodeClassCEL=true"),
        "{}",
        env("AWS_FEATURE_GATES")
    );
}

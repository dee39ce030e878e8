//! `apply` refuses a GPU Operator upgrade NVIDIA does not support (skipping a release line, or
//! going back) before it changes anything, on the testbed's real apiserver with real Helm.
//! Stand-in: the installed release is a one-ConfigMap chart named `gpu-operator` at the
//! version under test, because NVIDIA's chart cannot be fetched here; `apply` reads only the
//! release's chart name and version, which Helm records the same way for either.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kk_testkit::repo;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Installs or upgrades the stand-in `gpu-operator` release at chart `version`.
fn stand_in(helm: &Path, kubeconfig: &Path, dir: &Path, version: &str) {
    let chart = dir.join(format!("chart-{version}"));
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: gpu-operator\nversion: {version}\n"),
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gpu-operator-stand-in\ndata:\n  version: {{ .Chart.Version | quote }}\n",
    )
    .unwrap();
    let out = Command::new(helm)
        .args(["upgrade", "--install", "gpu-operator"])
        .arg(&chart)
        .args(["--namespace", "gpu-operator", "--create-namespace"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

fn installed_chart(helm: &Path, kubeconfig: &Path) -> String {
    let out = Command::new(helm)
        .args(["list", "--namespace", "gpu-operator", "-o", "json"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    list[0]["chart"].as_str().unwrap_or_default().to_owned()
}

/// The example under the GPU Operator, pinned to `pin` when given.
fn spec(dir: &Path, pin: Option<&str>) -> PathBuf {
    let mut stack = "devicePluginVersion: v0.20.0\n    stack: operator".to_owned();
    if let Some(pin) = pin {
        stack.push_str(&format!("\n    operatorVersion: {pin}"));
    }
    let path = dir.join(format!("spec-{}.yaml", pin.unwrap_or("default")));
    std::fs::write(
        &path,
        kk_spec::EXAMPLE.replace("devicePluginVersion: v0.20.0", &stack),
    )
    .unwrap();
    path
}

fn apply(helm: &Path, kubeconfig: &Path, spec: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("apply")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--mgmt-kubeconfig")
        .arg(kubeconfig)
        .args(["--skip-aws", "--dry-run=server"])
        .arg(spec)
        .env("KK_HELM", helm)
        .output()
        .unwrap()
}

#[test]
fn apply_refuses_a_gpu_operator_upgrade_that_skips_a_release_line_or_goes_back() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "gpu operator upgrade path") else {
        return;
    };
    let Some(helm) = crate::monitoring_testbed::helm("gpu operator upgrade path") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = tb.kubeconfig.as_path();

    // Two lines at once: 25.10 -> 26.7 (the default) is refused, with the path to take.
    stand_in(&helm, kubeconfig, dir.path(), "v25.10.1");
    let out = apply(&helm, kubeconfig, &spec(dir.path(), None));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("the cluster runs chart v25.10.1, the bundle installs v26.7.0")
            && said.contains("v26.3.3, v26.7.0")
            && said.contains("nothing applied"),
        "{said}"
    );
    assert!(
        !said.contains("helm upgrade"),
        "refused before Helm ran: {said}"
    );
    assert_eq!(installed_chart(&helm, kubeconfig), "gpu-operator-v25.10.1");

    // The next line passes the check and goes on to the dry runs and Helm (which cannot reach
    // the charts' repositories here, so the run fails there: after the check, not because of
    // it). Kubean's namespace exists in the management cluster, as where Kubean runs.
    let namespace = dir.path().join("kubean-system.yaml");
    std::fs::write(
        &namespace,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: kubean-system}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("apply")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(&namespace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = apply(&helm, kubeconfig, &spec(dir.path(), Some("v26.3.3")));
    let said = text(&out);
    assert!(!said.contains("release line"), "{said}");
    assert!(said.contains("helm upgrade --install"), "{said}");

    // Back: from 26.7 to a 26.3 pin is refused (NVIDIA supports no downgrade).
    stand_in(&helm, kubeconfig, dir.path(), "v26.7.0");
    let out = apply(&helm, kubeconfig, &spec(dir.path(), Some("v26.3.3")));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("downgrade"), "{}", text(&out));
    assert_eq!(installed_chart(&helm, kubeconfig), "gpu-operator-v26.7.0");

    let _ = Command::new(&helm)
        .args(["uninstall", "gpu-operator", "--namespace", "gpu-operator"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output();
}

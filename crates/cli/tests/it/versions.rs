//! `versions`, `images` and `validate`'s staleness warnings, as a user runs them.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs")
        .join(rel)
}

fn run(args: &[&str]) -> Output {
    // The day the support windows are judged on (2026-12-07), pinned.
    bin()
        .args(args)
        .env("SOURCE_DATE_EPOCH", "1796601600")
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The example with stale pins: Karpenter 1.14.1 (1.14.3 known), CCM v1.35.0 (lacks the
/// nil-State fix; v1.35.3 known), device plugin v0.17.0.
fn stale_spec(dir: &std::path::Path) -> PathBuf {
    let text = kk_spec_example()
        .replace("version: 1.15.2 ", "version: 1.14.1 ")
        .replace(
            "devicePluginVersion: v0.20.0",
            "devicePluginVersion: v0.17.0",
        )
        .replacen(
            "\n  controller:",
            "\n  images:\n    cloud-controller-manager: {tag: v1.35.0}\n  controller:",
            1,
        );
    let path = dir.join("stale.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn kk_spec_example() -> String {
    String::from_utf8(run(&["init"]).stdout).unwrap()
}

#[test]
fn versions_prints_the_table_and_the_matrix() {
    let value = json(&run(&["versions", "-o", "json"]));
    let components = value["components"].as_array().unwrap();
    let karpenter = components
        .iter()
        .find(|c| c["name"] == "karpenter")
        .unwrap();
    assert_eq!(karpenter["default"], "1.15.2");
    // The GPU Operator's lines carry NVIDIA's standing, in JSON and in the text view.
    let operator = components
        .iter()
        .find(|c| c["name"] == "nvidia-gpu-operator")
        .unwrap();
    let standing: Vec<(&str, &str)> = operator["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["version"].as_str().unwrap(),
                r["support"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        standing,
        [
            ("v25.10.1", "endOfSupport"),
            ("v26.3.3", "deprecated"),
            ("v26.7.0", "supported")
        ]
    );
    let text = String::from_utf8(run(&["versions"]).stdout).unwrap();
    assert!(
        text.contains("v25.10.1     end of support") && text.contains("v26.7.0      supported"),
        "{text}"
    );
    assert!(
        karpenter["releases"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["version"] == "1.15.2")
    );
    let digest_release = karpenter["releases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["version"] == "1.14.1")
        .unwrap();
    assert!(
        digest_release["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(
        digest_release["digestSource"]
            .as_str()
            .unwrap()
            .contains("values.yaml")
    );
    let row = value["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kubernetes"] == "1.35")
        .unwrap();
    assert_eq!(row["cloudControllerManager"], "v1.35.3");
    // Support windows, on the pinned day (2026-12-07).
    assert_eq!(row["support"]["endOfLife"], "2027-02-28", "{row}");
    assert_eq!(
        row["support"]["standing"], "supported; maintenance from 2026-12-28",
        "{row}"
    );
    let old = value["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kubernetes"] == "1.34")
        .unwrap();
    assert_eq!(
        old["support"]["standing"], "end of life since 2026-10-27",
        "{old}"
    );
    assert!(
        row["karpenter"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "1.14.3")
    );
    assert!(
        row["kubean"][0].as_str().unwrap().starts_with("v0.37.0"),
        "{row}"
    );
    let text = String::from_utf8(run(&["versions"]).stdout).unwrap();
    assert!(
        text.contains("cloud-controller-manager") && text.contains("v1.36.2"),
        "{text}"
    );
}

#[test]
fn versions_with_a_spec_says_which_pins_are_stale() {
    let dir = tempfile::tempdir().unwrap();
    let spec = stale_spec(dir.path());
    let value = json(&run(&["versions", spec.to_str().unwrap(), "-o", "json"]));
    assert_eq!(
        value["matrix"].as_array().unwrap().len(),
        1,
        "only the spec's minor"
    );
    assert_eq!(value["matrix"][0]["kubernetes"], "1.35");
    let pins = value["spec"]["pins"].as_array().unwrap();
    let pin = |c: &str| pins.iter().find(|p| p["component"] == c).unwrap().clone();
    assert_eq!(
        pin("cloud-controller-manager")["status"],
        "stale: v1.35.3 is the newest known patch"
    );
    assert_eq!(
        pin("karpenter")["status"],
        "stale: 1.14.3 is the newest known patch"
    );
    assert_eq!(pin("karpenter")["newestKnown"], "1.15.2");
    assert_eq!(
        pin("nvidia-device-plugin")["status"],
        "stale: v0.17.4 is the newest known patch"
    );
}

#[test]
fn validate_warns_at_the_stale_pin_and_refuses_a_ccm_of_another_minor() {
    let dir = tempfile::tempdir().unwrap();
    let spec = stale_spec(dir.path());
    let out = run(&["validate", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = std::fs::read_to_string(&spec)
        .unwrap()
        .lines()
        .position(|l| l.contains("tag: v1.35.0"))
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!(
            "warning: {}:{line}:37: spec.images.cloud-controller-manager.tag: cloud-controller-manager v1.35.0 is older than v1.35.3",
            spec.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("lacks the nil-State fix"), "{stderr}");
    // A CCM release line of another minor, an unsupported Kubernetes minor: refused, located.
    let out = run(&[
        "validate",
        fixture("invalid/image-overrides.yaml").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("image-overrides.yaml:46:37: spec.images.cloud-controller-manager.tag: cloud-controller-manager v1.35.3 serves Kubernetes 1.35 only"),
        "{stderr}"
    );
    let out = run(&[
        "validate",
        fixture("invalid/type-outside-family.yaml")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("10:22: spec.kubernetesVersion: Kubernetes 1.27 is outside what Karpenter 1.15.2 supports (1.29–1.36)")
    );
}

#[test]
fn images_lists_every_image_with_its_digest_or_how_to_pin_it() {
    let dir = tempfile::tempdir().unwrap();
    let example = dir.path().join("example.yaml");
    std::fs::write(&example, kk_spec_example()).unwrap();
    let list = json(&run(&["images", example.to_str().unwrap(), "-o", "json"]));
    let list = list.as_array().unwrap();
    let refs: Vec<&str> = list
        .iter()
        .map(|i| i["reference"].as_str().unwrap())
        .collect();
    for want in [
        "ghcr.io/kubean-io/spray-job:v0.37.0",
        "registry.k8s.io/provider-aws/cloud-controller-manager:v1.35.3",
        "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.64.0",
        "public.ecr.aws/csi-components/csi-provisioner:v6.3.0-eksbuild.4",
        "public.ecr.aws/karpenter/controller:1.15.2",
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
        "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
    ] {
        assert!(refs.contains(&want), "{want} not in {refs:?}");
    }
    // Our controller is pinned by digest; the others say how to pin.
    let controller = list
        .iter()
        .find(|i| i["key"] == "kubean-karpenter")
        .unwrap();
    assert!(
        controller["reference"]
            .as_str()
            .unwrap()
            .contains("@sha256:")
    );
    assert!(controller.get("pin").is_none());
    let ccm = list
        .iter()
        .find(|i| i["key"] == "cloud-controller-manager")
        .unwrap();
    assert!(
        ccm["pin"]
            .as_str()
            .unwrap()
            .starts_with("set images.cloud-controller-manager.digest"),
        "{ccm}"
    );
    let text = String::from_utf8(run(&["images", example.to_str().unwrap()]).stdout).unwrap();
    assert!(
        text.contains("tag-only  registry.k8s.io/provider-aws/cloud-controller-manager:v1.35.3"),
        "{text}"
    );

    // A mirror and a digest: references move under the mirror, the digest rides along.
    let digest = format!("sha256:{}", "cd".repeat(32));
    let text = kk_spec_example().replacen(
        "\n  controller:",
        &format!(
            "\n  registry: {{mirror: registry.internal:5000}}\n  images:\n    cloud-controller-manager: {{digest: {digest}}}\n  controller:"
        ),
        1,
    );
    let mirrored = dir.path().join("mirrored.yaml");
    std::fs::write(&mirrored, text).unwrap();
    let list = json(&run(&["images", mirrored.to_str().unwrap(), "-o", "json"]));
    for image in list.as_array().unwrap() {
        assert!(
            image["reference"]
                .as_str()
                .unwrap()
                .starts_with("registry.internal:5000/"),
            "{image}"
        );
    }
    assert!(list.as_array().unwrap().iter().any(|i| i["reference"]
        == format!(
            "registry.internal:5000/provider-aws/cloud-controller-manager:v1.35.3@{digest}"
        )));
}

/// `gpu.operatorVersion`: a pin on a line NVIDIA no longer supports is a located warning with
/// the one-line-at-a-time path; a release render knows no values of, or a pin without the
/// operator, is a located error.
#[test]
fn validate_warns_at_an_unsupported_gpu_operator_pin_and_refuses_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, extra: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            kk_spec::EXAMPLE.replace(
                "devicePluginVersion: v0.20.0",
                &format!("devicePluginVersion: v0.20.0{extra}"),
            ),
        )
        .unwrap();
        path
    };
    let line = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .position(|l| l.contains("operatorVersion"))
            .unwrap()
            + 1
    };
    let old = write(
        "old.yaml",
        "\n    stack: operator\n    operatorVersion: v25.10.1",
    );
    let out = run(&["validate", old.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: {}:{}:22: spec.gpu.operatorVersion: GPU Operator v25.10.1: NVIDIA lists its line as end of support",
            old.display(),
            line(&old)
        )) && stderr.contains("v25.10.1 -> v26.3.3 -> v26.7.0"),
        "{stderr}"
    );
    let unknown = write(
        "unknown.yaml",
        "\n    stack: operator\n    operatorVersion: v24.9.2",
    );
    let out = run(&["validate", unknown.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:{}:22: spec.gpu.operatorVersion: \"v24.9.2\" is not a GPU Operator release",
            unknown.display(),
            line(&unknown)
        )),
        "{stderr}"
    );
    let bare = write("bare.yaml", "\n    operatorVersion: v26.7.0");
    let out = run(&["validate", bare.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only read under stack: operator"),
        "{out:?}"
    );
}

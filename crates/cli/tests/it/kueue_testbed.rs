//! The rendered Kueue objects (`kueue/`) against Kueue's own CRDs on the testbed's real
//! apiserver. The CRDs come from the Go module `sigs.k8s.io/kueue` at the version render
//! targets (`go mod download`, into the module cache; nothing fetched is committed): their
//! OpenAPI schemas and CEL rules are what a cluster running Kueue enforces.

use std::path::{Path, PathBuf};

use kk_testkit::repo;

use crate::cli;
use crate::crd_testbed::{apply_once_served, go_module_dir, install_crds, text, unique};

/// Renders the example with its training pool and queue namespace renamed to `n`.
fn kueue_file(dir: &Path, n: &str) -> PathBuf {
    let text = kk_spec::EXAMPLE
        .replace("training-llm", &format!("tr-{n}"))
        .replace("ml-training", &format!("ml-{n}"));
    let cluster = kk_spec::parse_spec(&text, "example").unwrap().spec;
    let ca = kk_render::inline_ca_pem(&cluster).unwrap().unwrap();
    let bundle = kk_render::render(&cluster, &ca).unwrap();
    let path = dir.join("kueue.yaml");
    std::fs::write(&path, &bundle.files[&format!("kueue/tr-{n}.yaml")]).unwrap();
    path
}

#[test]
fn the_rendered_queue_objects_pass_kueues_crds_on_a_real_apiserver() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_testkit::testbed::require(&repo(), "kueue objects") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let module = format!("sigs.k8s.io/kueue@{}", kk_render::kueue::KUEUE_VERSION);
    let Some(crds) = go_module_dir(
        &module,
        "config/components/crd/bases",
        "kueue testbed",
        dir.path(),
    ) else {
        return;
    };
    let kubeconfig = tb.kubeconfig.to_str().unwrap().to_owned();
    install_crds(
        &tb,
        &["resourceflavors", "clusterqueues", "localqueues"]
            .map(|kind| crds.join(format!("kueue.x-k8s.io_{kind}.yaml"))),
    );
    let n = unique("q");
    let file = kueue_file(dir.path(), &n);
    let file = file.to_str().unwrap();
    apply_once_served(&tb, &["--dry-run=server"], file);
    let out = cli(&tb, &["apply", "--kubeconfig", &kubeconfig, file]);
    assert!(out.status.success(), "{}", text(&out));
    // The apiserver really validates them: a flavor with nine taints (Kueue allows eight) is
    // refused, and the dry run says so at the field.
    let rendered = std::fs::read_to_string(file).unwrap();
    let taint = "  - key: nvidia.com/gpu\n    value: training\n    effect: NoSchedule\n";
    let bad = rendered
        .replacen(
            &format!("nodeTaints:\n{taint}"),
            &format!("nodeTaints:\n{}", taint.repeat(9)),
            1,
        )
        .replacen(&format!("tr-{n}"), &format!("tr-{n}-bad"), 2);
    assert!(bad.contains(&taint.repeat(9)), "{rendered}");
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
    assert!(text(&out).contains("nodeTaints"), "{}", text(&out));
}

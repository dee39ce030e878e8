//! The rendered Kueue objects (`kueue/`) against Kueue's own CRDs on the testbed's real
//! apiserver. The CRDs come from the Go module `sigs.k8s.io/kueue` at the version render
//! targets (`go mod download`, into the module cache; nothing fetched is committed): their
//! OpenAPI schemas and CEL rules are what a cluster running Kueue enforces.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
fn kueue_crds(dir: &Path) -> Option<PathBuf> {
    let module = format!("sigs.k8s.io/kueue@{}", kk_render::kueue::KUEUE_VERSION);
    let out = Command::new("go")
        .args(["mod", "download", "-json", &module])
        .current_dir(dir)
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other => {
            let why = format!("`go mod download {module}` failed: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIP kueue testbed: {why}");
            return None;
        }
    };
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(PathBuf::from(info["Dir"].as_str().unwrap()).join("config/components/crd/bases"))
}

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

fn unique() -> String {
    let mut b = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!("q{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

#[test]
fn the_rendered_queue_objects_pass_kueues_crds_on_a_real_apiserver() {
    let _turn = crate::testbed_apply_turn();
    let Some(tb) = kk_live::testbed::require(&repo(), "kueue objects") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(crds) = kueue_crds(dir.path()) else {
        return;
    };
    let kubeconfig = tb.kubeconfig.to_str().unwrap().to_owned();
    for kind in ["resourceflavors", "clusterqueues", "localqueues"] {
        let file = crds.join(format!("kueue.x-k8s.io_{kind}.yaml"));
        let out = cli(
            &tb,
            &["apply", "--kubeconfig", &kubeconfig, file.to_str().unwrap()],
        );
        assert!(out.status.success(), "installing {kind}: {}", text(&out));
    }
    let n = unique();
    let file = kueue_file(dir.path(), &n);
    let file = file.to_str().unwrap();
    // The new kinds are served once the CRDs are Established: retry the dry run a while.
    let mut last = None;
    for _ in 0..30 {
        let out = cli(
            &tb,
            &[
                "apply",
                "--dry-run=server",
                "--kubeconfig",
                &kubeconfig,
                file,
            ],
        );
        if out.status.success() {
            last = None;
            break;
        }
        last = Some(text(&out));
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert!(
        last.is_none(),
        "dry run of {file}: {}",
        last.unwrap_or_default()
    );
    let out = cli(&tb, &["apply", "--kubeconfig", &kubeconfig, file]);
    assert!(out.status.success(), "{}", text(&out));
    // The apiserver really validates them: a flavor with nine taints (Kueue allows eight) is
    // refused, and    // the dry run says so at the field.
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

//! `ami pin` edits a spec in place: a commented spec comes back byte for byte except the
//! pinned value; a bad pool or release is a located error (exit 2) and the file is untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs")
        .join(rel)
}

fn pin(spec: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(["ami", "pin"])
        .arg(spec)
        .args(args)
        .output()
        .unwrap()
}

/// The iam fixture with comments, odd spacing, quotes and non-ASCII text around the pins.
fn commented_spec(dir: &Path) -> (PathBuf, String) {
    let text = std::fs::read_to_string(fixture("iam-eks.yaml"))
        .unwrap()
        .replace(
            "      ami: {ssmRelease: 1.35.4-20260827}",
            "      # The CPU release — pinned on purpose (seed 002: \"Pin, and upgrade deliberately\").\n      ami:\n        ssmRelease: \"1.35.4-20260827\"   # 1.35.4-20260827, see `ami list`\n",
        )
        .replace(
            "      ami: {alias: al2023@v20260827}",
            "      ami: { alias: al2023@v20260827 }  # the GPU pool's pin ✓",
        );
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, &text).unwrap();
    (path, text)
}

#[test]
fn a_release_pin_changes_only_the_pinned_value() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = commented_spec(dir.path());
    let out = pin(&path, &["--pool", "eks-gpu", "--release", "v20260806"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        after,
        before.replacen("al2023@v20260827 }", "al2023@v20260806 }", 1),
        "every other byte kept"
    );
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("-      ami: { alias: al2023@v20260827 }  # the GPU pool's pin ✓"),
        "{diff}"
    );
    assert!(
        diff.contains("+      ami: { alias: al2023@v20260806 }  # the GPU pool's pin ✓"),
        "{diff}"
    );
    assert_eq!(
        diff.lines()
            .filter(|l| l.starts_with(['+', '-']) && !l.starts_with("+++") && !l.starts_with("---"))
            .count(),
        2
    );

    // A quoted ssmRelease keeps its quotes and its comment.
    let out = pin(&path, &["--pool", "eks-general", "--release", "v20260806"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        again,
        after.replacen("\"1.35.4-20260827\"   #", "\"1.35.4-20260806\"   #", 1)
    );

    // An id pin.
    let out = pin(
        &path,
        &["--pool", "kubeadm-general", "--id", "ami-0fedcba9876543210"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        again.replacen("ami-0123456789abcdef0", "ami-0fedcba9876543210", 1)
    );
}

#[test]
fn dry_run_prints_the_diff_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = commented_spec(dir.path());
    let out = pin(
        &path,
        &["--pool", "eks-gpu", "--release", "v20260806", "--dry-run"],
    );
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("+      ami: { alias: al2023@v20260806 }")
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn bad_pools_and_releases_are_located_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = commented_spec(dir.path());
    let file = path.display().to_string();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--pool", "nope", "--release", "v20260806"],
            ": spec.pools: no pool named \"nope\" (pools: eks-general, eks-gpu, kubeadm-general)",
        ),
        (
            &["--pool", "eks-gpu", "--release", "v2026"],
            ": spec.pools[1].ami.alias: release v2026 is not an AL2023 release date",
        ),
        (
            &["--pool", "kubeadm-general", "--release", "v20260806"],
            ": spec.pools[2].ami.id: pool kubeadm-general pins a custom image by id",
        ),
        (
            &["--pool", "eks-gpu", "--id", "ami-0fedcba9876543210"],
            ": spec.pools[1].ami.alias: pool eks-gpu pins an EKS-optimized release by alias",
        ),
    ];
    for (args, want) in cases {
        let out = pin(&path, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // file:line:col: field: message
        let located = stderr
            .lines()
            .find(|l| l.contains(want))
            .unwrap_or_else(|| panic!("{args:?}: want {want:?} in {stderr}"));
        let rest = located.split_once(&file).unwrap().1;
        let mut parts = rest.trim_start_matches(':').split(':');
        assert!(parts.next().unwrap().parse::<usize>().is_ok(), "{located}");
        assert!(parts.next().unwrap().parse::<usize>().is_ok(), "{located}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before, "{args:?}");
        assert!(out.stdout.is_empty());
    }
}

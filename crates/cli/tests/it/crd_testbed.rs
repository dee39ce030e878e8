//! What the tests that check rendered objects against another project's CRDs on the testbed
//! share: the CRDs from that project's Go module (`go mod download`, into the module cache;
//! nothing fetched is committed), installed with the CLI, and an apply retried until the
//! apiserver serves the new kinds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kk_testkit::testbed::Testbed;

use crate::cli;

pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `sub` inside the Go module `module` (`path@version`), downloaded through the Go module
/// proxy when not cached yet; `None` (skipped, said loudly) when that fails, a failure under
/// CI=true.
pub fn go_module_dir(module: &str, sub: &str, test: &str, work: &Path) -> Option<PathBuf> {
    // Karpenter v1.15.2's go.mod asks for go 1.26.11, the toolchain the lab builds with.
    let out = Command::new("go")
        .env("GOTOOLCHAIN", "go1.26.11")
        .args(["mod", "download", "-json", module])
        .current_dir(work)
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other => {
            let why = format!("`go mod download {module}` failed: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIP {test}: {why}");
            return None;
        }
    };
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(PathBuf::from(info["Dir"].as_str().unwrap()).join(sub))
}

/// Applies each CRD file; panics naming the one refused.
pub fn install_crds(tb: &Testbed, files: &[PathBuf]) {
    let kubeconfig = tb.kubeconfig.to_str().unwrap();
    for file in files {
        let out = cli(
            tb,
            &["apply", "--kubeconfig", kubeconfig, file.to_str().unwrap()],
        );
        assert!(
            out.status.success(),
            "installing {}: {}",
            file.display(),
            text(&out)
        );
    }
}

/// `apply [extra] FILE`, retried for up to 30 s: the new kinds are served only once their
/// CRDs are Established. Panics with the last refusal.
pub fn apply_once_served(tb: &Testbed, extra: &[&str], file: &str) {
    let kubeconfig = tb.kubeconfig.to_str().unwrap();
    let mut args = vec!["apply"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--kubeconfig", kubeconfig, file]);
    let mut last = String::new();
    for _ in 0..30 {
        let out = cli(tb, &args);
        if out.status.success() {
            return;
        }
        last = text(&out);
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    panic!("{args:?}: {last}");
}

/// A name no earlier run used: `prefix` and six hex digits.
pub fn unique(prefix: &str) -> String {
    let mut b = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!("{prefix}{:02x}{:02x}{:02x}", b[0], b[1], b[2])
}

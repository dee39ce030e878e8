//! What the oracle benches share: the repository root and the Go oracle binary.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The oracle binary: `$KK_ORACLE` (`none` for no oracle), else what
/// `testbed/karpenter-oracle/build` prints; `None`, said on stderr under `bench`'s name, when
/// the build fails.
pub fn oracle(bench: &str) -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KK_ORACLE") {
        return (p != "none").then(|| PathBuf::from(p));
    }
    let out = Command::new(root().join("testbed/karpenter-oracle/build"))
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "{bench}: testbed/karpenter-oracle/build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

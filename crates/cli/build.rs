//! Stamps the binary with the git commit, the build date and the compiler, for `--version`
//! and `version -o json`.
//!
//! The build date is `SOURCE_DATE_EPOCH` when set (reproducible builds set it to the commit
//! date), else the commit date, so the same commit builds the same bytes. Outside a git
//! checkout (a source tarball) every value falls back to "unknown": this script never fails
//! the build.

// The calendar arithmetic kk-sim's disruption clock uses; the file depends on nothing.
#[allow(dead_code)]
#[path = "../model/src/civil_date.rs"]
mod civil_date;

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=GIT_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../model/src/civil_date.rs");
    watch_git_head(&manifest_dir);

    let commit = git(&manifest_dir, &["rev-parse", "HEAD"]).unwrap_or_else(unknown);
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .or_else(|| {
            git(&manifest_dir, &["log", "-1", "--format=%ct"])?
                .parse()
                .ok()
        });
    let build_date = epoch.map(civil_date::rfc3339_utc).unwrap_or_else(unknown);
    let rustc = std::env::var_os("RUSTC")
        .and_then(|rustc| Command::new(rustc).arg("--version").output().ok())
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(unknown);

    println!("cargo:rustc-env=KK_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KK_BUILD_DATE={build_date}");
    println!("cargo:rustc-env=KK_RUSTC_VERSION={rustc}");
}

fn unknown() -> String {
    "unknown".to_owned()
}

/// Runs git in `dir`; `None` when git is missing, fails, or prints nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// Reruns this script when HEAD moves: a commit, a checkout, a branch update (worktrees keep
/// HEAD in their own git dir and branches in the common one).
fn watch_git_head(dir: &Path) {
    let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    let git_dir = PathBuf::from(git_dir);
    println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
    let common = git(dir, &["rev-parse", "--git-common-dir"])
        .map(|c| {
            let c = PathBuf::from(c);
            if c.is_absolute() { c } else { dir.join(c) }
        })
        .unwrap_or_else(|| git_dir.clone());
    if let Some(reference) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        for base in [&git_dir, &common] {
            let path = base.join(&reference);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let packed = common.join("packed-refs");
    if packed.exists() {
        println!("cargo:rerun-if-changed={}", packed.display());
    }
}

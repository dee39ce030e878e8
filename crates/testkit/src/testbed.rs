//! The local testbed (`testbed/up`) for integration tests.
//!
//! Tests that need it call [`require`]: with CI=true a missing testbed fails the test;
//! locally the test is skipped with one loud line naming the command that starts it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Testbed {
    pub kubeconfig: PathBuf,
    pub env: BTreeMap<String, String>,
}

impl Testbed {
    /// The admin's client (the testbed's kubeconfig), with kube's default timeouts.
    pub async fn admin(&self) -> kube::Client {
        crate::clients::admin(&self.kubeconfig).await
    }
}

fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches(['"', '\'']).to_owned()))
        .collect()
}

/// The testbed's env file, from `$KK_TESTBED_ENV` or `<repo>/.testbed/env`.
pub fn find(repo_root: &Path) -> Option<Testbed> {
    let path = std::env::var_os("KK_TESTBED_ENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root.join(".testbed/env"));
    let env = parse_env(&std::fs::read_to_string(path).ok()?);
    let kubeconfig = PathBuf::from(env.get("KUBECONFIG")?);
    kubeconfig.is_file().then_some(Testbed { kubeconfig, env })
}

/// The testbed, or `None` after printing why the test is skipped; panics under CI=true.
pub fn require(repo_root: &Path, test: &str) -> Option<Testbed> {
    match find(repo_root) {
        Some(t) => Some(t),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: the testbed is not running and CI=true (start it with testbed/up)")
        }
        None => {
            eprintln!(
                "SKIP {test}: no testbed; start it with `testbed/up` (CI=true makes this a failure)"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_file_is_its_export_lines_unquoted() {
        let env = parse_env(
            "# testbed/up\nexport KUBECONFIG=\"/tmp/tb/kubeconfig\"\n  export AWS_REGION='us-east-1'\nexport EMPTY=\nNOT_EXPORTED=1\n",
        );
        assert_eq!(env["KUBECONFIG"], "/tmp/tb/kubeconfig");
        assert_eq!(env["AWS_REGION"], "us-east-1");
        assert_eq!(env["EMPTY"], "");
        assert_eq!(env.len(), 3);
    }
}

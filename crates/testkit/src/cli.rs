//! The `kubean-karpenter` binary, run as the tests run it.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Command, Output};

use crate::testbed::Testbed;

/// The binary at a path, with the environment and the trailing arguments every run gets.
///
/// Built from `env!("CARGO_BIN_EXE_kubean-karpenter")`: cargo sets that only when it compiles
/// the cli crate's own test binaries, so the kit cannot name the binary itself.
#[derive(Debug, Clone)]
pub struct Cli {
    bin: PathBuf,
    env: Vec<(OsString, OsString)>,
    trailing: Vec<OsString>,
}

impl Cli {
    /// The binary at `bin`, with the test's own environment.
    pub fn new(bin: impl Into<PathBuf>) -> Cli {
        Cli {
            bin: bin.into(),
            env: Vec::new(),
            trailing: Vec::new(),
        }
    }

    /// With the testbed's environment: its `KUBECONFIG`, moto's endpoint, the AWS test keys.
    pub fn testbed(self, tb: &Testbed) -> Cli {
        self.envs(&tb.env)
    }

    /// With these environment variables too (later ones win).
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Cli
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.env.extend(
            vars.into_iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())),
        );
        self
    }

    /// `--kubeconfig PATH` after each run's own arguments.
    pub fn kubeconfig(mut self, path: impl AsRef<OsStr>) -> Cli {
        self.trailing.push("--kubeconfig".into());
        self.trailing.push(path.as_ref().to_owned());
        self
    }

    /// The command for one run with `args`, to adjust before running it (stdin, more env).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .args(&self.trailing);
        command
    }

    /// Runs it with `args` and waits, whatever its exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_run_has_the_testbeds_env_then_its_own_and_the_kubeconfig_flag_last() {
        let tb = Testbed {
            kubeconfig: "/tb/kubeconfig".into(),
            env: BTreeMap::from([("KUBECONFIG".into(), "/tb/kubeconfig".into())]),
        };
        let cli = Cli::new("/bin/kk")
            .testbed(&tb)
            .envs([("KK_HELM", "/fake/helm")])
            .kubeconfig(&tb.kubeconfig);
        let command = cli.command(&["apply", "spec.yaml"]);
        assert_eq!(command.get_program(), "/bin/kk");
        let args: Vec<&OsStr> = command.get_args().collect();
        assert_eq!(
            args,
            ["apply", "spec.yaml", "--kubeconfig", "/tb/kubeconfig"]
        );
        let env: BTreeMap<&OsStr, Option<&OsStr>> = command.get_envs().collect();
        assert_eq!(
            env,
            BTreeMap::from([
                (OsStr::new("KK_HELM"), Some(OsStr::new("/fake/helm"))),
                (OsStr::new("KUBECONFIG"), Some(OsStr::new("/tb/kubeconfig"))),
            ])
        );
    }
}

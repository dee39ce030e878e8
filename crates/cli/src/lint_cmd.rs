//! `kubean-karpenter lint`: the file-system side of kk-lint. Walks directories, reads files
//! and stdin within limits, renders ElasticCluster specs in memory, finds the config file,
//! prints the report and picks the exit code (0 clean, 1 findings at or above --fail-on,
//! 2 usage or input error).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kk_lint::config::CONFIG_FILE_NAME;
use kk_lint::output::Format;
use kk_lint::{Config, Input, Severity};

use crate::{Failure, sources};

#[derive(clap::Args)]
pub struct LintArgs {
    /// Files, directories (every *.yaml and *.yml below them, sorted) or - for standard
    /// input. An ElasticCluster spec is rendered in memory and its bundle is linted.
    #[arg(value_name = "PATH", required_unless_present_any = ["explain", "list_rules"])]
    paths: Vec<String>,
    /// Output format.
    #[arg(long, default_value = "human", value_parser = ["human", "json", "sarif"])]
    format: String,
    /// Exit 1 when a finding is at least this severe.
    #[arg(long, default_value = "warning", value_parser = ["error", "warning", "info"])]
    fail_on: String,
    /// Config file (default: .kubean-karpenter-lint.yaml in the current directory or a parent).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the documentation of a rule (code or name) and exit.
    #[arg(long, value_name = "CODE", conflicts_with = "list_rules")]
    explain: Option<String>,
    /// List every rule and exit.
    #[arg(long)]
    list_rules: bool,
}

pub fn lint(args: LintArgs) -> Result<ExitCode, Failure> {
    let mut stdout = std::io::stdout().lock();
    if let Some(code) = &args.explain {
        let rule = kk_lint::registry::find(code).ok_or_else(|| {
            Failure::msg(format!("unknown rule {code:?} (see lint --list-rules)"))
        })?;
        stdout.write_all(kk_lint::docs::explain(rule).as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.list_rules {
        for rule in kk_lint::RULES {
            let m = rule.meta();
            writeln!(
                stdout,
                "{}  {:<8} {:<36} {}",
                m.code, m.severity, m.name, m.summary
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let format: Format = args.format.parse().map_err(Failure::msg)?;
    let fail_on: Severity = args.fail_on.parse().map_err(Failure::msg)?;
    let config = load_config(args.config.as_deref())?;
    let mut inputs = Vec::new();
    for path in &args.paths {
        for input in read_path(path)? {
            if !inputs.iter().any(|i: &Input| i.name == input.name) {
                inputs.push(input);
            }
        }
    }
    let report = kk_lint::lint(&inputs, &config).map_err(Failure::from)?;
    stdout.write_all(kk_lint::output::render(&report, format).as_bytes())?;
    Ok(if report.fails(fail_on) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--config FILE`, else the nearest `.kubean-karpenter-lint.yaml` upwards, else defaults.
fn load_config(explicit: Option<&Path>) -> Result<Config, Failure> {
    let path = match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => std::env::current_dir().ok().and_then(|dir| {
            dir.ancestors()
                .map(|d| d.join(CONFIG_FILE_NAME))
                .find(|p| p.is_file())
        }),
    };
    let Some(path) = path else {
        return Ok(Config::default());
    };
    let name = path.display().to_string();
    let text = sources::read_text(&path, &name)?;
    Config::parse(&text, &name).map_err(Failure::from)
}

/// The inputs one PATH argument stands for: a spec becomes the YAML files of its rendered
/// bundle (`<spec>#<bundle path>`); anything else is linted as it is.
fn read_path(arg: &str) -> Result<Vec<Input>, Failure> {
    let mut inputs = Vec::new();
    for source in sources::read_arg(arg)?.sources {
        if source.spec.is_some() {
            for (name, text) in sources::rendered_yaml(&source)? {
                inputs.push(Input::rendered(name, text, &source.name));
            }
        } else {
            inputs.push(Input::new(source.name, source.text));
        }
    }
    Ok(inputs)
}

//! `kubean-karpenter lint`: the file-system side of kk-lint. Walks directories, reads files
//! and stdin within limits, renders ElasticCluster specs in memory, finds the config file,
//! prints the report and picks the exit code (0 clean, 1 findings at or above --fail-on,
//! 2 usage or input error).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kk_lint::config::CONFIG_FILE_NAME;
use kk_lint::input::{MAX_FILE_BYTES, too_big};
use kk_lint::output::Format;
use kk_lint::{Config, Input, Severity};
use kk_model::yaml::{LoadLimits, load_documents};

use crate::{Failure, files, load_text};

/// Directory levels followed below a PATH; deeper trees are refused, not truncated.
const MAX_DIR_DEPTH: usize = 32;

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
        let rule = kk_lint::registry::find(code)
            .ok_or_else(|| Failure(format!("unknown rule {code:?} (see lint --list-rules)")))?;
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
    let format: Format = args.format.parse().map_err(Failure)?;
    let fail_on: Severity = args.fail_on.parse().map_err(Failure)?;
    let config = load_config(args.config.as_deref())?;
    let mut inputs = Vec::new();
    for path in &args.paths {
        for input in read_path(path)? {
            if !inputs.iter().any(|i: &Input| i.name == input.name) {
                inputs.push(input);
            }
        }
    }
    let report = kk_lint::lint(&inputs, &config).map_err(|e| Failure(e.to_string()))?;
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
    let bytes = read_limited(&path, &name)?;
    let text = String::from_utf8(bytes).map_err(|_| Failure(format!("{name}: not UTF-8 text")))?;
    Config::parse(&text, &name).map_err(|e| Failure(e.to_string()))
}

/// The inputs one PATH argument stands for.
fn read_path(arg: &str) -> Result<Vec<Input>, Failure> {
    if arg == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure(format!("<stdin>: {e}")))?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(Failure(format!("<stdin>: {}", too_big(bytes.len()))));
        }
        let input = Input::from_bytes("<stdin>", bytes).map_err(|e| Failure(e.to_string()))?;
        return expand_spec(input, Path::new("."));
    }
    let path = Path::new(arg);
    let meta = std::fs::metadata(path).map_err(|e| Failure(format!("{arg}: {e}")))?;
    let files = if meta.is_dir() {
        let mut found = Vec::new();
        walk(path, 0, &mut found)?;
        found
    } else {
        vec![path.to_path_buf()]
    };
    let mut inputs = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let bytes = read_limited(&file, &name)?;
        let input = Input::from_bytes(name, bytes).map_err(|e| Failure(e.to_string()))?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        inputs.extend(expand_spec(input, &base)?);
    }
    Ok(inputs)
}

/// Every *.yaml / *.yml below `dir`, sorted, hidden entries and symlinked directories skipped.
fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), Failure> {
    if depth > MAX_DIR_DEPTH {
        return Err(Failure(format!(
            "{}: more than {MAX_DIR_DEPTH} directory levels",
            dir.display()
        )));
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Failure(format!("{}: {e}", dir.display())))?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if (kind.is_file() || (kind.is_symlink() && path.is_file()))
            && path.extension().is_some_and(|x| x == "yaml" || x == "yml")
        {
            out.push(path);
        }
    }
    Ok(())
}

/// Reads at most the size limit, so a huge file or a device never fills memory.
fn read_limited(path: &Path, name: &str) -> Result<Vec<u8>, Failure> {
    let file = std::fs::File::open(path).map_err(|e| Failure(format!("{name}: {e}")))?;
    if let Ok(meta) = file.metadata()
        && meta.len() > MAX_FILE_BYTES as u64
    {
        return Err(Failure(format!("{name}: {}", too_big(meta.len() as usize))));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure(format!("{name}: {e}")))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(Failure(format!("{name}: {}", too_big(bytes.len()))));
    }
    Ok(bytes)
}

/// A spec becomes the YAML files of its rendered bundle (`<spec>#<bundle path>`); anything
/// else is linted as it is.
fn expand_spec(input: Input, base_dir: &Path) -> Result<Vec<Input>, Failure> {
    if !is_spec(&input.text) {
        return Ok(vec![input]);
    }
    let loaded = load_text(&input.text, &input.name)?;
    let bundle = files::render_spec(&loaded, base_dir)?;
    Ok(bundle
        .files
        .iter()
        .filter(|(path, _)| path.ends_with(".yaml") || path.ends_with(".yml"))
        .map(|(path, text)| {
            Input::rendered(format!("{}#{path}", input.name), text.clone(), &input.name)
        })
        .collect())
}

/// Whether the text holds an ElasticCluster document. Unparseable text is not a spec here;
/// the linter reports it.
fn is_spec(text: &str) -> bool {
    if !text.contains("ElasticCluster") {
        return false;
    }
    let limits = LoadLimits {
        max_bytes: MAX_FILE_BYTES,
        max_depth: kk_lint::input::MAX_DEPTH,
        max_nodes: kk_lint::input::MAX_FILE_VALUES,
    };
    load_documents(text, limits).is_ok_and(|docs| {
        docs.iter()
            .any(|d| d.value.get("kind").and_then(|k| k.as_str()) == Some("ElasticCluster"))
    })
}

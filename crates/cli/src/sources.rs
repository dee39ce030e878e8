//! The one way files come in, for lint, plan, apply and the spec commands: a PATH argument is
//! `-` (standard input), a file, or a directory walked for `*.yaml` / `*.yml`. Every file is
//! read once, within the size limit, as UTF-8; a file holding an ElasticCluster is parsed
//! once, here, and carried as a [`LoadedSpec`].
//!
//! The walk: sorted by name, hidden entries (`.git`, `.kubean-karpenter-*`) skipped, symlinked
//! directories not followed (no loops, nothing outside the tree), symlinked files read, at
//! most [`MAX_DIR_DEPTH`] levels.

use std::io::Read;
use std::path::{Path, PathBuf};

use kk_model::yaml::{LoadLimits, load_documents};
use kk_spec::{LoadedSpec, SpecError, spec_from_documents};

use crate::Failure;

/// Largest file (or standard input) read: the linter's limit, for every command.
pub const MAX_FILE_BYTES: usize = kk_lint::input::MAX_FILE_BYTES;
/// Deepest directory walked.
pub const MAX_DIR_DEPTH: usize = 32;

/// One file as read: its name for messages, its text and, when it is a spec, the spec.
#[derive(Debug, Clone)]
pub struct NamedSource {
    /// The path as reached from the argument, or `<stdin>`.
    pub name: String,
    /// The path relative to the directory argument (the file name for a file argument).
    pub rel: String,
    pub text: String,
    /// The directory a spec's relative paths (CA file, kubeconfig) resolve against.
    pub base_dir: PathBuf,
    /// The ElasticCluster this file holds, parsed and validated; `None` for other YAML.
    pub spec: Option<LoadedSpec>,
}

/// What one PATH argument stands for.
#[derive(Debug, Clone)]
pub struct PathArg {
    /// A directory with an ORDER.md: a rendered bundle.
    pub bundle: bool,
    pub sources: Vec<NamedSource>,
}

/// Reads one PATH argument.
pub fn read_arg(arg: &str) -> Result<PathArg, Failure> {
    if arg == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::msg(format!("<stdin>: {e}")))?;
        let source = source("<stdin>", "<stdin>", bytes, PathBuf::from("."))?;
        return Ok(PathArg {
            bundle: false,
            sources: vec![source],
        });
    }
    let path = Path::new(arg);
    let meta = std::fs::metadata(path).map_err(|e| Failure::msg(format!("{arg}: {e}")))?;
    let (files, bundle) = if meta.is_dir() {
        let mut found = Vec::new();
        walk(path, 0, &mut found)?;
        (found, path.join("ORDER.md").is_file())
    } else {
        (vec![path.to_path_buf()], false)
    };
    let mut sources = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let rel = if meta.is_dir() {
            file.strip_prefix(path).unwrap_or(&file)
        } else {
            file.file_name().map_or(file.as_path(), Path::new)
        };
        let rel = rel.to_string_lossy().into_owned();
        let bytes = read_limited(&file, &name)?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        sources.push(source(&name, &rel, bytes, base)?);
    }
    Ok(PathArg { bundle, sources })
}

/// The spec a PATH argument (a file or `-`) holds; every problem in it, located, when it is
/// not a valid spec.
pub fn read_spec(arg: &str) -> Result<(LoadedSpec, PathBuf), Failure> {
    let read = read_arg(arg)?;
    let [source] = <[NamedSource; 1]>::try_from(read.sources)
        .map_err(|_| Failure::msg(format!("{arg}: expected one spec file, not a directory")))?;
    match source.spec {
        Some(spec) => Ok((spec, source.base_dir)),
        // Not recognisably a spec: parse it as one anyway, for located errors.
        None => match kk_spec::parse_spec(&source.text, &source.name) {
            Ok(spec) => Ok((priced(spec)?, source.base_dir)),
            Err(errors) => Err(spec_failure(&errors, &source.name)),
        },
    }
}

fn source(
    name: &str,
    rel: &str,
    bytes: Vec<u8>,
    base_dir: PathBuf,
) -> Result<NamedSource, Failure> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(Failure::msg(format!(
            "{name}: {}",
            kk_lint::input::too_big(bytes.len())
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        Failure::msg(format!(
            "{name}: not UTF-8 text (invalid byte at offset {}), not YAML",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let spec = detect_spec(&text, name)?;
    Ok(NamedSource {
        name: name.to_owned(),
        rel: rel.to_owned(),
        text,
        base_dir,
        spec,
    })
}

/// The spec in `text` when one of its documents is an ElasticCluster (parsed once, here);
/// text that does not load as YAML is not a spec here (the command reports it).
fn detect_spec(text: &str, name: &str) -> Result<Option<LoadedSpec>, Failure> {
    if !text.contains("ElasticCluster") {
        return Ok(None);
    }
    let limits = LoadLimits {
        max_bytes: MAX_FILE_BYTES,
        max_depth: kk_lint::input::MAX_DEPTH,
        max_nodes: kk_lint::input::MAX_FILE_VALUES,
        ..LoadLimits::default()
    };
    let Ok(docs) = load_documents(text, limits) else {
        return Ok(None);
    };
    if !docs
        .iter()
        .any(|d| d.value.get("kind").and_then(|k| k.as_str()) == Some("ElasticCluster"))
    {
        return Ok(None);
    }
    let loaded = spec_from_documents(docs, name).map_err(|errors| spec_failure(&errors, name))?;
    priced(loaded).map(Some)
}

/// A valid spec whose budgets its prices can pay for (`crate::budget`), else every budget
/// problem, located as kk-spec's are.
fn priced(loaded: LoadedSpec) -> Result<LoadedSpec, Failure> {
    let errors: Vec<SpecError> = crate::budget::spec_problems(&loaded.spec)
        .into_iter()
        .map(|(path, message)| {
            SpecError::new(&loaded.file, Some(loaded.document.pos(&path)), message)
                .at_field(path.to_string())
        })
        .collect();
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(spec_failure(&errors, &loaded.file))
    }
}

/// The YAML files of a spec's rendered bundle, named `<spec>#<bundle path>`.
pub fn rendered_yaml(source: &NamedSource) -> Result<Vec<(String, String)>, Failure> {
    let Some(loaded) = &source.spec else {
        return Ok(Vec::new());
    };
    let bundle = crate::files::render_spec(loaded, &source.base_dir)?;
    Ok(bundle
        .files
        .into_iter()
        .filter(|(path, _)| path.ends_with(".yaml") || path.ends_with(".yml"))
        .map(|(path, text)| (format!("{}#{path}", source.name), text))
        .collect())
}

/// Every problem of a spec, one `error:` line each, and a count.
pub fn spec_failure(errors: &[SpecError], file: &str) -> Failure {
    problems(errors, &format!("in {file}; nothing written"))
}

/// Located problems, one `error:` line each, then `N problem(s) <tail>`.
pub fn problems(errors: &[kk_model::LocatedError], tail: &str) -> Failure {
    let count = errors.len();
    let mut message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\nerror: ");
    message.push_str(&format!(
        "\n{count} problem{} {tail}",
        if count == 1 { "" } else { "s" }
    ));
    Failure::msg(message)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), Failure> {
    if depth > MAX_DIR_DEPTH {
        return Err(Failure::msg(format!(
            "{}: more than {MAX_DIR_DEPTH} directory levels",
            dir.display()
        )));
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Failure::msg(format!("{}: {e}", dir.display())))?
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

/// One file's text (a config file, say), within the size limit, as UTF-8.
pub fn read_text(path: &Path, name: &str) -> Result<String, Failure> {
    String::from_utf8(read_limited(path, name)?)
        .map_err(|_| Failure::msg(format!("{name}: not UTF-8 text")))
}

/// Reads at most the size limit, so a huge file or a device never fills memory.
fn read_limited(path: &Path, name: &str) -> Result<Vec<u8>, Failure> {
    let file = std::fs::File::open(path).map_err(|e| Failure::msg(format!("{name}: {e}")))?;
    if let Ok(meta) = file.metadata()
        && meta.len() > MAX_FILE_BYTES as u64
    {
        return Err(Failure::msg(format!(
            "{name}: {}",
            kk_lint::input::too_big(meta.len() as usize)
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::msg(format!("{name}: {e}")))?;
    Ok(bytes)
}

/// The spec's warnings (valid, but probably not meant), and those of the day (a Kubernetes
/// minor past its end of life), one `warning:` line each on stderr; how many.
pub fn print_warnings(loaded: &LoadedSpec) -> usize {
    let today = kk_spec::kubernetes_support::today();
    let mut all = loaded.warnings.clone();
    all.extend(loaded.dated_warnings(&today));
    all.sort_by_key(|w| w.pos);
    for warning in &all {
        eprintln!("warning: {warning}");
    }
    all.len()
}

/// Reads a spec from a path or `-`; returns it with the directory relative paths resolve against.
pub fn load_spec(arg: &str) -> Result<(LoadedSpec, PathBuf), Failure> {
    read_spec(arg)
}

/// A spec from text (the built-in example).
pub fn load_text(text: &str, file: &str) -> Result<LoadedSpec, Failure> {
    priced(kk_spec::parse_spec(text, file).map_err(|errors| spec_failure(&errors, file))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok<T>(r: Result<T, Failure>) -> T {
        r.unwrap_or_else(|e| panic!("{}", e.text()))
    }

    fn err<T>(r: Result<T, Failure>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.text(),
        }
    }

    #[test]
    fn a_directory_is_walked_once_sorted_without_hidden_entries_or_symlinked_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/.hidden")).unwrap();
        std::fs::write(root.join("b/z.yaml"), "kind: ConfigMap\n").unwrap();
        std::fs::write(root.join("a.yml"), "kind: ConfigMap\n").unwrap();
        std::fs::write(root.join("b/.hidden/x.yaml"), "kind: ConfigMap\n").unwrap();
        std::fs::write(root.join(".x.yaml"), "kind: ConfigMap\n").unwrap();
        std::fs::write(root.join("notes.txt"), "not yaml\n").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(root, root.join("loop")).unwrap();
        let read = ok(read_arg(&root.display().to_string()));
        let rels: Vec<&str> = read.sources.iter().map(|s| s.rel.as_str()).collect();
        assert_eq!(rels, ["a.yml", "b/z.yaml"]);
        assert!(!read.bundle);
        assert!(read.sources.iter().all(|s| s.spec.is_none()));
    }

    #[test]
    fn a_spec_is_parsed_on_reading_and_a_bad_one_is_refused_with_its_errors() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("cluster.yaml");
        std::fs::write(&good, kk_spec::EXAMPLE).unwrap();
        let read = ok(read_arg(&good.display().to_string()));
        let spec = read.sources[0]
            .spec
            .as_ref()
            .expect("the example is a spec");
        assert_eq!(spec.file, good.display().to_string());
        assert_eq!(read.sources[0].base_dir, dir.path());

        let bad = dir.path().join("bad.yaml");
        std::fs::write(
            &bad,
            kk_spec::EXAMPLE.replacen("kubernetesVersion:", "kubernetesVersion: x\n  old:", 1),
        )
        .unwrap();
        let e = err(read_arg(&bad.display().to_string()));
        assert!(e.contains("bad.yaml:"), "{e}");
        assert!(e.contains("nothing written"), "{e}");
    }

    #[test]
    fn oversized_and_binary_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_FILE_BYTES as u64 + 1)
            .unwrap();
        let e = err(read_arg(&big.display().to_string()));
        assert!(e.contains("over the limit"), "{e}");
        let bin = dir.path().join("bin.yaml");
        std::fs::write(&bin, [0x7f, b'E', 0xff]).unwrap();
        let e = err(read_arg(&bin.display().to_string()));
        assert!(e.starts_with(&bin.display().to_string()), "{e}");
        assert!(e.contains("not UTF-8"), "{e}");
    }
}

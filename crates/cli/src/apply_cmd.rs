//! `apply`: ordered server-side apply of a spec's bundle, a rendered bundle directory or
//! manifest files, after a server-side dry run of every object.

use std::io::Read;
use std::path::Path;

use kk_live::{ApplyError, ApplyOptions, ClientOptions};
use kk_model::yaml::{LoadLimits, load_documents};
use kk_render::Bundle;
use serde_json::Value;

use crate::Failure;

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// ElasticCluster spec (rendered in memory), bundle directory (applied in ORDER.md's
    /// order), manifest file or directory, or - for standard input.
    #[arg(required = true)]
    paths: Vec<String>,
    /// `server`: the apiserver validates everything (schemas, CEL rules, admission) and
    /// persists nothing. `none`: apply for real.
    #[arg(long, value_parser = ["none", "server"], default_value = "none")]
    dry_run: String,
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    context: Option<String>,
    #[arg(long, default_value = "kubean-karpenter")]
    field_manager: String,
    /// Take over fields another field manager owns.
    #[arg(long)]
    force_conflicts: bool,
    /// Output: text, or json (one object per applied manifest).
    #[arg(short = 'o', long = "output", value_parser = ["text", "json"], default_value = "text")]
    output: String,
}

fn read_manifests(text: &str, source: &str, out: &mut Vec<(String, Value)>) -> Result<(), Failure> {
    let docs = load_documents(text, LoadLimits::default())
        .map_err(|e| Failure(format!("{source}:{e}")))?;
    out.extend(docs.into_iter().map(|d| (source.to_owned(), d.value)));
    Ok(())
}

fn yaml_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), Failure> {
    let entries = std::fs::read_dir(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(|e| Failure(format!("{}: {e}", dir.display())))?
            .path();
        if path.is_dir() {
            yaml_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(path);
        }
    }
    Ok(())
}

/// Everything to apply, in order.
fn collect(paths: &[String]) -> Result<Vec<(String, Value)>, Failure> {
    let mut objects = Vec::new();
    for arg in paths {
        if arg == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            read_manifests(&text, "<stdin>", &mut objects)?;
            continue;
        }
        let path = Path::new(arg);
        if path.is_dir() {
            let mut files = Vec::new();
            yaml_files(path, &mut files)?;
            files.sort();
            if path.join("ORDER.md").is_file() {
                // A rendered bundle: its own apply order, Helm values left out.
                let mut bundle = Bundle::default();
                for file in files {
                    let rel = file
                        .strip_prefix(path)
                        .unwrap_or(&file)
                        .to_string_lossy()
                        .to_string();
                    let text = std::fs::read_to_string(&file)
                        .map_err(|e| Failure(format!("{}: {e}", file.display())))?;
                    bundle.files.insert(rel, text);
                }
                for (rel, value) in bundle.manifests() {
                    objects.push((format!("{arg}/{rel}"), value));
                }
            } else {
                for file in files {
                    let text = std::fs::read_to_string(&file)
                        .map_err(|e| Failure(format!("{}: {e}", file.display())))?;
                    read_manifests(&text, &file.display().to_string(), &mut objects)?;
                }
            }
            continue;
        }
        let text = std::fs::read_to_string(path).map_err(|e| Failure(format!("{arg}: {e}")))?;
        if text.contains("kind: ElasticCluster") {
            let (loaded, base) = crate::load_spec(arg)?;
            let bundle = crate::files::render_spec(&loaded, &base)?;
            for (rel, value) in bundle.manifests() {
                objects.push((format!("{arg}#{rel}"), value));
            }
        } else {
            read_manifests(&text, arg, &mut objects)?;
        }
    }
    Ok(objects)
}

pub fn run(args: ApplyArgs) -> Result<std::process::ExitCode, Failure> {
    let objects = collect(&args.paths)?;
    if objects.is_empty() {
        return Err(Failure("nothing to apply".into()));
    }
    let options = ApplyOptions {
        dry_run: args.dry_run == "server",
        field_manager: args.field_manager.clone(),
        force_conflicts: args.force_conflicts,
        ..Default::default()
    };
    let client_options = ClientOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let verb = if options.dry_run {
        "accepted (server dry run)"
    } else {
        "applied"
    };
    eprintln!(
        "checking {} objects with a server-side dry run",
        objects.len()
    );
    let result = runtime.block_on(async {
        let client = kk_live::make_client(&client_options)
            .await
            .map_err(|e| Failure(e.to_string()))?;
        Ok::<_, Failure>(kk_live::apply_all(&client, &objects, &options).await)
    })?;
    match result {
        Ok(applied) => {
            if args.output == "json" {
                let list: Vec<Value> = applied
                    .iter()
                    .map(|a| serde_json::json!({"source": a.source, "kind": a.kind, "name": a.name, "namespace": a.namespace, "result": verb}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for a in &applied {
                    let ns = a
                        .namespace
                        .as_deref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default();
                    println!("{ns}{}/{} {verb}", a.kind, a.name);
                }
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(ApplyError::Refused(refusals)) => {
            let mut message = String::new();
            for r in &refusals {
                message.push_str(&format!("{r}\nerror: "));
            }
            message.push_str(&format!(
                "{} object(s) refused by the apiserver; nothing applied",
                refusals.len()
            ));
            Err(Failure(message))
        }
        Err(other) => Err(Failure(other.to_string())),
    }
}

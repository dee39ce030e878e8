//! `completion SHELL` and `man DIR`: shell completions and one man page per command, generated
//! from the clap definitions so they cannot drift from `--help`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::Failure;
use crate::version_cmd::{BUILD_DATE, VERSION};

#[derive(clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for: bash, zsh, fish (also elvish, powershell).
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Directory to write the pages to (created if missing): kubean-karpenter.1 and one
    /// kubean-karpenter-<command>.1 per command, e.g. kubean-karpenter-plan.1,
    /// kubean-karpenter-token-create.1.
    dir: PathBuf,
}

/// Prints the completion script to standard output: `source <(kubean-karpenter completion bash)`.
pub fn completion(args: CompletionArgs) -> Result<ExitCode, Failure> {
    let script = completion_script(args.shell);
    std::io::stdout().write_all(script.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn completion_script(shell: Shell) -> String {
    let mut command = crate::command::Cli::command();
    let name = command.get_name().to_owned();
    let mut bytes = Vec::new();
    clap_complete::generate(shell, &mut command, &name, &mut bytes);
    let script = String::from_utf8_lossy(&bytes).into_owned();
    if shell == Shell::Bash {
        // clap_complete 4.6.12's bash script names its states two ways for a hyphenated
        // binary: the word loop sets `kubean__karpenter__subcmd__plan`, the case arms test
        // `kubean__subcmd__karpenter__subcmd__plan`, so nothing past the first word ever
        // completes (clap-rs/clap issue 6421, open). Spell the arms the loop's way; once
        // upstream is fixed the wrong spelling is absent and this does nothing.
        script.replace(&name.replace('-', "__subcmd__"), &name.replace('-', "__"))
    } else {
        script
    }
}

pub fn man(args: ManArgs) -> Result<ExitCode, Failure> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| Failure::msg(format!("{}: {e}", args.dir.display())))?;
    let mut command = crate::command::Cli::command().disable_help_subcommand(true);
    command.build();
    let mut written = Vec::new();
    write_pages(&command, &args.dir, &mut written)?;
    eprintln!(
        "wrote {} man pages to {} (read one with `man -l {}`)",
        written.len(),
        args.dir.display(),
        args.dir.join("kubean-karpenter-plan.1").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the page of `command` and, depth first, of every visible subcommand. The date is
/// the build date, so the same commit writes the same bytes.
fn write_pages(
    command: &clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), Failure> {
    let date = BUILD_DATE.get(..10).unwrap_or(BUILD_DATE);
    let page = clap_mangen::Man::new(command.clone())
        .date(date)
        .source(format!("kubean-karpenter {VERSION}"))
        .manual("kubean-karpenter manual");
    let path = dir.join(page.get_filename());
    let mut bytes = Vec::new();
    page.render(&mut bytes)?;
    std::fs::write(&path, bytes).map_err(|e| Failure::msg(format!("{}: {e}", path.display())))?;
    written.push(path);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

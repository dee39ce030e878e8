//! `kubean-karpenter`: the command line. Arguments are parsed here, files are read and
//! written here; everything else is the pure crates.
//!
//! Owns argument parsing, reading and writing files, output formats and exit codes. Must not
//! hold domain logic; no crate depends on it.
//!
//! Exit codes: 0 success, 1 findings, 2 usage or input error.
//!
//! `command.rs` is the command line's shape (every command and the module that runs it), one
//! `*_cmd.rs` (or folder) per command; `flags.rs` the flag groups several share (`KubeFlags`,
//! `MgmtFlags`, `-o`'s `OutputFormat` and its printer) and the one precedence rule for reaching a
//! cluster; `sources.rs` reading inputs and specs; `files.rs` writing bundles and reports.

/// mimalloc, not glibc's malloc: a large plan or disruption pass frees hundreds of thousands
/// of small blocks, and glibc spent about half of a 5,000-node pass merging them afterwards.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod ami_cmd;
mod ami_pin_cmd;
mod apply_cmd;
mod budget;
mod catalog_cmd;
mod command;
mod completion_cmd;
mod controller_cmd;
mod doctor_cmd;
mod failure;
mod files;
mod flags;
mod init_cmd;
mod kubean_cmd;
mod kubeconfig_cmd;
mod lint_cmd;
mod plan;
mod render_cmd;
mod report;
mod sources;
mod token_cmd;
mod top;
mod upgrade_cmd;
mod validate_cmd;
mod verify_cmd;
mod version_cmd;
mod versions_cmd;

use std::process::ExitCode;

use clap::Parser;

use failure::Failure;

fn main() -> ExitCode {
    let cli = command::Cli::parse();
    match command::run(cli) {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

pub(crate) use sources::load_spec;

//! `validate`: every problem of a spec at its file:line:col (exit 2), its warnings (exit 0).

use std::process::ExitCode;

use crate::Failure;
use crate::sources::{load_spec, print_warnings};

#[derive(clap::Args)]
pub struct ValidateArgs {
    /// The spec file, or - for standard input.
    spec: String,
}

pub fn run(args: ValidateArgs) -> Result<ExitCode, Failure> {
    let (loaded, _) = load_spec(&args.spec)?;
    let warnings = print_warnings(&loaded);
    let pools = loaded.spec.spec.pools.len();
    println!(
        "{}: ElasticCluster {} is valid ({pools} pool{}{})",
        loaded.file,
        loaded.spec.metadata.name,
        if pools == 1 { "" } else { "s" },
        match warnings {
            0 => String::new(),
            1 => ", 1 warning".into(),
            n => format!(", {n} warnings"),
        }
    );
    Ok(ExitCode::SUCCESS)
}

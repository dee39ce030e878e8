//! `--version` and `version -o text|json|yaml`: the crate version, the git commit and the
//! build date build.rs stamped into the binary ("unknown" when built outside a git checkout).

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use crate::Failure;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("KK_GIT_COMMIT");
pub const BUILD_DATE: &str = env!("KK_BUILD_DATE");
pub const RUSTC: &str = env!("KK_RUSTC_VERSION");

/// What `-V` and `--version` print after the program name: one line, greppable.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KK_GIT_COMMIT"),
    ", built ",
    env!("KK_BUILD_DATE"),
    ")"
);

#[derive(clap::Args)]
pub struct VersionArgs {
    /// Output: text (one line, as --version), json or yaml (an object with version, commit,
    /// buildDate, rustc and the default component versions).
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

pub fn run(args: VersionArgs) -> Result<ExitCode, Failure> {
    let info = json!({
        "version": VERSION,
        "commit": COMMIT,
        "buildDate": BUILD_DATE,
        "rustc": RUSTC,
        // What render pins when a spec does not say (the versions table; `versions` has more).
        "components": kk_spec::versions::table()
            .components
            .iter()
            .map(|c| {
                let newest = c.newest().map(|r| r.version.clone());
                (c.name.clone(), json!({ "default": c.default, "newestKnown": newest }))
            })
            .collect::<serde_json::Map<_, _>>(),
    });
    if args.output.is_structured() {
        crate::flags::print_structured(&info, args.output)?;
    } else {
        std::io::stdout().write_all(format!("kubean-karpenter {VERSION_LINE}\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

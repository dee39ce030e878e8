//! `render`: a spec (or the built-in example) into a bundle directory, written whole or not at
//! all, or its manifests to standard output in apply order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kk_spec::{EXAMPLE, EXAMPLE_FILE};

use crate::Failure;
use crate::files;
use crate::sources::{load_spec, load_text, print_warnings};

#[derive(clap::Args)]
pub struct RenderArgs {
    /// The spec file, or - for standard input. Omit with --example.
    #[arg(required_unless_present = "example", conflicts_with = "example")]
    spec: Option<String>,
    /// Render the built-in example spec (the one `init` prints).
    #[arg(long)]
    example: bool,
    /// Output directory (replaced as a whole, never half-written), or - to print the
    /// Kubernetes manifests to standard output in apply order.
    #[arg(short = 'o', long = "output", default_value = "bundle")]
    output: String,
    /// Replace an existing output directory.
    #[arg(long)]
    force: bool,
}

pub fn run(args: RenderArgs) -> Result<ExitCode, Failure> {
    let (loaded, base_dir) = if args.example {
        (load_text(EXAMPLE, EXAMPLE_FILE)?, PathBuf::from("."))
    } else {
        load_spec(args.spec.as_deref().unwrap_or("-"))?
    };
    print_warnings(&loaded);
    let bundle = files::render_spec(&loaded, &base_dir)?;
    if args.output == "-" {
        let mut out = std::io::stdout().lock();
        for (i, (path, object)) in bundle.manifests().iter().enumerate() {
            if i > 0 {
                writeln!(out, "---")?;
            }
            writeln!(out, "# Source: {path}")?;
            out.write_all(serde_saphyr::to_string(object)?.as_bytes())?;
        }
    } else {
        let dir = Path::new(&args.output);
        files::write_bundle_atomically(dir, &bundle, args.force)?;
        eprintln!(
            "wrote {} files to {} (read {}/ORDER.md for the apply order)",
            bundle.files.len(),
            dir.display(),
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

//! `ami pin SPEC --pool P --release vDATE | --id ami-…`: edit the spec file in place at the
//! pinned value (kk_spec::pin), print the diff, and replace the file atomically.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use kk_spec::pin::{PinTarget, pin_ami};

use crate::Failure;

#[derive(clap::Args)]
pub struct PinArgs {
    /// The spec file to edit in place.
    spec: String,
    /// The pool whose AMI to pin.
    #[arg(long)]
    pool: String,
    /// An AL2023 release date (`v20260827`), for a pool pinned by `alias` or `ssmRelease`.
    #[arg(long, conflicts_with = "id", required_unless_present = "id")]
    release: Option<String>,
    /// An AMI id, for a pool pinned by `id` (a custom image).
    #[arg(long)]
    id: Option<String>,
    /// Print the diff only; leave the file as it is.
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: PinArgs) -> Result<ExitCode, Failure> {
    let target = match (&args.release, &args.id) {
        (Some(release), _) => {
            PinTarget::Release(release.strip_prefix('v').unwrap_or(release).to_owned())
        }
        (None, Some(id)) => PinTarget::Id(id.clone()),
        (None, None) => return Err(Failure::msg("give --release vDATE or --id ami-…".into())),
    };
    let path = Path::new(&args.spec);
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::msg(format!("{}: {e}", args.spec)))?;
    let pinned = pin_ami(&text, &args.spec, &args.pool, &target).map_err(|errors| {
        crate::sources::problems(&errors, &format!("in {}; nothing written", args.spec))
    })?;
    let mut out = std::io::stdout().lock();
    if !pinned.changed() {
        writeln!(
            out,
            "{}:{}: {}: already {}; nothing to change",
            args.spec, pinned.pos, pinned.field, pinned.new
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let diff = similar::TextDiff::from_lines(&text, &pinned.text);
    write!(
        out,
        "{}",
        diff.unified_diff()
            .context_radius(2)
            .header(&format!("a/{}", args.spec), &format!("b/{}", args.spec))
    )?;
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    write_in_place(path, &pinned.text)?;
    eprintln!(
        "{}:{}: {}: {} -> {} (render and apply to roll the pool; every node of it drifts)",
        args.spec, pinned.pos, pinned.field, pinned.old, pinned.new
    );
    Ok(ExitCode::SUCCESS)
}

/// Replaces `path` with `text` through a sibling temporary file and a rename, keeping the
/// file's permissions: a reader sees the old file or the new one, never half of one.
fn write_in_place(path: &Path, text: &str) -> Result<(), Failure> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let permissions = std::fs::metadata(path)?.permissions();
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(text.as_bytes())?;
    file.as_file().sync_all()?;
    std::fs::set_permissions(file.path(), permissions)?;
    file.persist(path)
        .map_err(|e| Failure::msg(format!("{}: {}", path.display(), e.error)))?;
    Ok(())
}

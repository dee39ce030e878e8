//! File-system edges: resolving the CA bundle, writing a bundle all-or-nothing, and writing a
//! report page whole or not at all.

use std::path::{Path, PathBuf};

use base64::Engine;
use kk_render::Bundle;
use kk_spec::LoadedSpec;

use crate::Failure;

/// The CA PEM named by `spec.caBundle`, with errors pointing at the field.
pub fn resolve_ca(loaded: &LoadedSpec, base_dir: &Path) -> Result<Vec<u8>, Failure> {
    let ca = &loaded.spec.spec.ca_bundle;
    let at = |field: &str| {
        let path = kk_model::FieldPath::parse(&format!("spec.caBundle.{field}"));
        format!(
            "{}:{}: spec.caBundle.{field}",
            loaded.file,
            loaded.document.pos(&path)
        )
    };
    // Certificates only, whichever source: the bundle is copied into Karpenter's values and
    // every node's userData, so a private key beside the certificate would reach them all. The
    // error names the block's type and line, never its content.
    let certificates_only =
        |pem: Vec<u8>, field: &str, origin: &str| match std::str::from_utf8(&pem)
            .map_err(|_| kk_spec::ca::CaError::NotText)
            .and_then(kk_spec::ca::certificate_blocks)
        {
            Ok(_) => Ok(pem),
            Err(e) => Err(Failure::msg(format!("{}: {origin}{e}", at(field)))),
        };
    if let Some(b64) = &ca.base64 {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| Failure::msg(format!("{}: not base64: {e}", at("base64"))))?;
        return certificates_only(pem, "base64", "the decoded PEM, ");
    }
    if let Some(file) = &ca.file {
        let path = base_dir.join(expand_home(file));
        let pem = std::fs::read(&path).map_err(|e| {
            Failure::msg(format!(
                "{}: cannot read {}: {e}",
                at("file"),
                path.display()
            ))
        })?;
        return certificates_only(pem, "file", &format!("{}, ", path.display()));
    }
    if let Some(kc) = &ca.kubeconfig {
        let path = base_dir.join(expand_home(&kc.path));
        let pem = ca_from_kubeconfig(&path, kc.cluster.as_deref())
            .map_err(|e| Failure::msg(format!("{}: {}: {e}", at("kubeconfig"), path.display())))?;
        return certificates_only(
            pem,
            "kubeconfig",
            &format!("{}: the cluster's CA, ", path.display()),
        );
    }
    Err(Failure::msg(format!(
        "{}:{}: spec.caBundle: not set (stage 1): once Kubean has built the cluster, \
         `kubean-karpenter kubeconfig` fetches its kubeconfig for caBundle.kubeconfig",
        loaded.file, loaded.document.start
    )))
}

/// The bundle of a loaded spec, its CA resolved like `render` does; errors name the spec file.
/// Without `spec.caBundle` this is stage 1 of the two-stage flow: only `kubean/` (and an ORDER.md
/// saying how to reach stage 2), announced on stderr.
pub fn render_spec(loaded: &LoadedSpec, base_dir: &Path) -> Result<Bundle, Failure> {
    if kk_render::is_stage1(&loaded.spec) {
        eprintln!(
            "{}: stage 1: spec.caBundle is not set (the cluster CA exists only once Kubean has built the control plane), so only kubean/ is rendered; ORDER.md says how to reach stage 2",
            loaded.file
        );
        return kk_render::render_stage1(&loaded.spec)
            .map_err(|e| Failure::msg(format!("{}: {e}", loaded.file)));
    }
    let ca_pem = resolve_ca(loaded, base_dir)?;
    kk_render::render(&loaded.spec, &ca_pem)
        .map_err(|e| Failure::msg(format!("{}: {e}", loaded.file)))
}

fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// `certificate-authority-data` (or the file `certificate-authority` names) of one
/// kubeconfig cluster: the named one, else the current context's (`kk_spec::ca::kubeconfig_ca`).
pub fn ca_from_kubeconfig(path: &Path, cluster: Option<&str>) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    match kk_spec::ca::kubeconfig_ca(&text, cluster)? {
        kk_spec::ca::KubeconfigCa::Data(pem) => Ok(pem),
        kk_spec::ca::KubeconfigCa::File(file) => {
            let ca_path = path.parent().unwrap_or(Path::new(".")).join(file);
            std::fs::read(&ca_path).map_err(|e| format!("{}: {e}", ca_path.display()))
        }
    }
}

/// A report to share (`plan --html`, `upgrade plan --html`), written whole or not at all: a
/// temporary file beside it, then renamed; readable by others, like the table on stdout.
pub fn write_report(path: &Path, page: &str) -> Result<(), Failure> {
    use std::io::Write;
    let name = path.display();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| Failure::msg(format!("{name}: {e}")))?;
    tmp.write_all(page.as_bytes())
        .map_err(|e| Failure::msg(format!("{name}: {e}")))?;
    // NamedTempFile creates it 0600.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(|e| Failure::msg(format!("{name}: {e}")))?;
    tmp.persist(path)
        .map_err(|e| Failure::msg(format!("{name}: {}", e.error)))?;
    Ok(())
}

fn private_dirs(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(content)
}

/// Whether a bundle path names a file below the bundle directory: relative, and made of plain
/// names only (no `..`, no root, no `.`), so joining it to the directory cannot leave it.
fn stays_inside(rel: &str) -> bool {
    use std::path::Component;
    let path = Path::new(rel);
    !rel.is_empty()
        && !rel.contains('\\')
        && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Writes every file into a fresh sibling directory, then swaps it into place, so a
/// failure leaves either the old bundle or the new one, never a mix.
pub fn write_bundle_atomically(dir: &Path, bundle: &Bundle, force: bool) -> Result<(), Failure> {
    if dir.exists() && !force {
        return Err(Failure::msg(format!(
            "{} exists; pass --force to replace it",
            dir.display()
        )));
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .map_err(|e| Failure::msg(format!("{}: {e}", parent.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".kubean-karpenter-")
        .tempdir_in(&parent)
        .map_err(|e| Failure::msg(format!("{}: {e}", parent.display())))?;
    // The bundle may hold a bootstrap token (static mode's userData): its directories are
    // 0700 and its files 0600, whatever the umask.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Failure::msg(format!("{}: {e}", staging.path().display())))?;
    }
    if let Some(rel) = bundle.files.keys().find(|rel| !stays_inside(rel)) {
        return Err(Failure::msg(format!(
            "bundle file {rel:?} would be written outside {}: refusing to write the bundle",
            dir.display()
        )));
    }
    for (rel, content) in &bundle.files {
        let path = staging.path().join(rel);
        if let Some(p) = path.parent() {
            private_dirs(p).map_err(|e| Failure::msg(format!("{}: {e}", p.display())))?;
        }
        write_private(&path, content.as_bytes())
            .map_err(|e| Failure::msg(format!("{}: {e}", path.display())))?;
    }
    let staged = staging.keep();
    if dir.exists() {
        let old = parent.join(format!(".kubean-karpenter-old-{}", std::process::id()));
        std::fs::rename(dir, &old).map_err(|e| Failure::msg(format!("{}: {e}", dir.display())))?;
        if let Err(e) = std::fs::rename(&staged, dir) {
            // Put the old bundle back rather than leave nothing.
            let _ = std::fs::rename(&old, dir);
            let _ = std::fs::remove_dir_all(&staged);
            return Err(Failure::msg(format!("{}: {e}", dir.display())));
        }
        let _ = std::fs::remove_dir_all(&old);
    } else if let Err(e) = std::fs::rename(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(Failure::msg(format!("{}: {e}", dir.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attack: a bundle whose file names climb out of the output directory (as a namespace
    /// `../../x` once did through `namespaces/<namespace>.yaml`). Nothing may be written at all.
    #[test]
    fn a_bundle_path_that_leaves_the_bundle_is_refused_and_nothing_is_written() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out").join("bundle");
        let absolute = root.path().join("escaped.yaml").display().to_string();
        for escape in [
            "namespaces/../../../escaped.yaml",
            "../escaped.yaml",
            absolute.as_str(),
            "./ok/../../escaped.yaml",
            "",
        ] {
            let mut bundle = Bundle::default();
            bundle.files.insert("ORDER.md".into(), "x".into());
            bundle.files.insert(escape.into(), "pwned".into());
            let error = write_bundle_atomically(&out, &bundle, true).unwrap_err();
            assert!(
                error.text().contains("outside"),
                "{escape}: {}",
                error.text()
            );
            assert!(!out.exists(), "{escape}: the bundle was written");
            assert!(!root.path().join("escaped.yaml").exists());
            assert!(!root.path().join("out/escaped.yaml").exists());
        }
        let mut bundle = Bundle::default();
        bundle
            .files
            .insert("namespaces/karpenter.yaml".into(), "x".into());
        assert!(write_bundle_atomically(&out, &bundle, true).is_ok());
        assert!(out.join("namespaces/karpenter.yaml").exists());
    }
}

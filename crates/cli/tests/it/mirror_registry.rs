//! An air-gapped mirror for real: a registry on loopback (Debian's `docker-registry`, the
//! distribution registry), stand-in images built here (one small OCI image per image the bundle
//! pulls, each with different bytes) copied into it with `skopeo copy` under the references
//! `kubean-karpenter images` prints for a spec with `registry.mirror`, then every image reference
//! the rendered bundle names (manifests, Karpenter's and the EBS CSI chart's values, Kubean's
//! ClusterOperation) must resolve there — by digest where the spec pins one, to those bytes.
//!
//! Needs `skopeo` and `docker-registry` (Debian packages, .ci/setup-tools installs them):
//! skipped with a loud SKIP line without them, a failure when CI=true.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn tools_or_skip(test: &str) -> bool {
    let missing: Vec<&str> = ["skopeo", "docker-registry"]
        .into_iter()
        .filter(|t| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {missing:?} missing and CI=true (bash .ci/setup-tools installs them)");
    }
    eprintln!("SKIP {test}: {missing:?} missing (apt-get install skopeo docker-registry)");
    false
}

fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// Writes `bytes` as a blob of the OCI layout; returns its descriptor fields.
fn blob(layout: &Path, bytes: &[u8]) -> (String, usize) {
    let tmp = layout.join("blob.tmp");
    std::fs::write(&tmp, bytes).unwrap();
    let hex = sha256_hex(&tmp);
    std::fs::rename(&tmp, layout.join("blobs/sha256").join(&hex)).unwrap();
    (format!("sha256:{hex}"), bytes.len())
}

/// A one-layer linux/amd64 OCI image whose only file names `what`; returns the layout and the
/// manifest digest.
fn stand_in(dir: &Path, what: &str) -> (PathBuf, String) {
    let layout = dir.join(what.replace('/', "_"));
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let content = dir.join(format!("{}.content", what.replace('/', "_")));
    std::fs::create_dir_all(&content).unwrap();
    std::fs::write(content.join("stand-in"), format!("{what}\n")).unwrap();
    let tar = dir.join(format!("{}.tar", what.replace('/', "_")));
    let status = Command::new("tar")
        .args([
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
        ])
        .arg(&content)
        .arg("-cf")
        .arg(&tar)
        .arg("stand-in")
        .status()
        .unwrap();
    assert!(status.success());
    let (layer, layer_size) = blob(&layout, &std::fs::read(&tar).unwrap());
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": { "Entrypoint": ["/stand-in"] },
        "rootfs": { "type": "layers", "diff_ids": [layer] },
    });
    let (config, config_size) = blob(&layout, config.to_string().as_bytes());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size },
        "layers": [{ "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": layer_size }],
    });
    let (manifest, manifest_size) = blob(&layout, manifest.to_string().as_bytes());
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest, "size": manifest_size,
            "annotations": { "org.opencontainers.image.ref.name": "stand-in" },
        }],
    });
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    (layout, manifest)
}

struct Registry {
    child: Child,
    addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry(dir: &Path) -> Registry {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: {addr}}}\n",
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let registry = Registry { child, addr };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&registry.addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "docker-registry did not listen on {}",
            registry.addr
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    registry
}

fn skopeo(args: &[&str]) -> String {
    let out = Command::new("skopeo").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `repo:tag@digest` → `repo@digest` (containers/image takes one or the other).
fn inspectable(reference: &str) -> String {
    match reference.split_once('@') {
        Some((name, digest)) => {
            let last = name.rfind('/').map_or(0, |i| i + 1);
            let repo = match name[last..].find(':') {
                Some(colon) => &name[..last + colon],
                None => name,
            };
            format!("{repo}@{digest}")
        }
        None => reference.to_owned(),
    }
}

fn collect_images(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(image)) = m.get("image") {
                out.push(image.clone());
            }
            // Helm values: {repository, tag[, digest]} as the charts assemble them.
            if let (Some(Value::String(repo)), Some(Value::String(tag))) =
                (m.get("repository"), m.get("tag"))
            {
                match m
                    .get("digest")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                {
                    Some(d) => out.push(format!("{repo}:{tag}@{d}")),
                    None => out.push(format!("{repo}:{tag}")),
                }
            }
            m.values().for_each(|v| collect_images(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_images(v, out)),
        _ => {}
    }
}

#[test]
fn a_mirrored_bundle_resolves_every_image_in_a_loopback_registry() {
    if !tools_or_skip("a_mirrored_bundle_resolves_every_image_in_a_loopback_registry") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let registry = start_registry(dir.path());
    let example = String::from_utf8(bin().arg("init").output().unwrap().stdout).unwrap();
    let with_mirror = |extra: &str| {
        example.replacen(
            "\n  controller:",
            &format!(
                "\n  registry: {{mirror: \"{}\"}}\n{extra}  controller:",
                registry.addr
            ),
            1,
        )
    };
    let spec = dir.path().join("cluster.yaml");
    std::fs::write(&spec, with_mirror("")).unwrap();
    let images = bin()
        .args(["images", spec.to_str().unwrap(), "-o", "json"])
        .output()
        .unwrap();
    assert!(images.status.success(), "{images:?}");
    let images: Vec<Value> = serde_json::from_slice(&images.stdout).unwrap();
    assert!(images.len() >= 14, "{images:?}");

    // Mirror: one stand-in per image, copied under the tag `images` names (our controller has
    // no tag, only its digest: copied by digest, which --preserve-digests keeps).
    let mut digests = std::collections::BTreeMap::new();
    for image in &images {
        let key = image["key"].as_str().unwrap();
        let (layout, digest) = stand_in(dir.path(), key);
        let repository = image["repository"].as_str().unwrap();
        let tag = image["tag"].as_str().unwrap();
        let destination = if tag.is_empty() {
            format!("docker://{repository}:stand-in")
        } else {
            format!("docker://{repository}:{tag}")
        };
        skopeo(&[
            "copy",
            "--quiet",
            "--preserve-digests",
            "--dest-tls-verify=false",
            &format!("oci:{}:stand-in", layout.display()),
            &destination,
        ]);
        digests.insert(key.to_owned(), digest);
    }

    // The spec pins the CCM and our controller by the digests the mirror now serves.
    let ccm = &digests["cloud-controller-manager"];
    let controller = &digests["kubean-karpenter"];
    let pinned = with_mirror(&format!(
        "  images:\n    cloud-controller-manager: {{digest: \"{ccm}\"}}\n"
    ))
    .replace(
        "digest: sha256:0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0",
        &format!("digest: {controller}"),
    );
    std::fs::write(&spec, pinned).unwrap();
    let bundle = dir.path().join("bundle");
    let render = bin()
        .args(["render", spec.to_str().unwrap(), "-o"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(render.status.success(), "{render:?}");

    let mut references = Vec::new();
    for entry in walk(&bundle) {
        if entry.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&entry).unwrap();
            for doc in kk_model_free_yaml(&text) {
                collect_images(&doc, &mut references);
            }
        }
    }
    references.sort();
    references.dedup();
    assert!(references.len() >= 12, "{references:?}");
    let mut by_digest = 0;
    for reference in &references {
        assert!(
            reference.starts_with(&format!("{}/", registry.addr)),
            "{reference}"
        );
        let served = skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--format",
            "{{.Digest}}",
            &format!("docker://{}", inspectable(reference)),
        ]);
        if let Some((_, digest)) = reference.split_once('@') {
            assert_eq!(served.trim(), digest, "{reference}");
            by_digest += 1;
        }
    }
    assert!(
        references
            .iter()
            .any(|r| r.ends_with(&format!("cloud-controller-manager:v1.35.3@{ccm}"))),
        "{references:?}"
    );
    assert!(
        references
            .iter()
            .any(|r| r.ends_with(&format!("@{controller}")))
    );
    assert!(by_digest >= 2, "{references:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The rendered YAML as JSON values, through the binary's own `--help`-free path: serde_saphyr.
fn kk_model_free_yaml(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .collect()
}

//! `spec.caBundle` holds certificates only (issue 47 item 5): the bundle is re-encoded into
//! Karpenter's values and every IAM pool's nodeadm userData, so a CA private key pasted beside
//! the certificate would reach every node. The attack tests hand the binary such a bundle, with
//! a throwaway key openssl makes for the test, in each source form and each key encoding.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs")
        .join(rel)
}

/// A fresh key in the encoding whose PEM label is `label`.
fn throwaway_key(label: &str) -> String {
    let args: &[&str] = match label {
        "PRIVATE KEY" => &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ],
        "EC PRIVATE KEY" => &["ecparam", "-name", "prime256v1", "-genkey", "-noout"],
        "RSA PRIVATE KEY" => &["genrsa", "-traditional", "1024"],
        other => panic!("no recipe for {other}"),
    };
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl makes the throwaway key");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pem = String::from_utf8(out.stdout).unwrap();
    assert!(
        pem.starts_with(&format!("-----BEGIN {label}-----")),
        "{pem}"
    );
    pem
}

/// Pieces of the key that must appear nowhere: each body line of its PEM, and 40 characters of
/// its body as they sit in the base64 of the whole bundle (`caBundle.base64`).
fn key_traces(key: &str, bundle: &str) -> Vec<String> {
    let mut traces: Vec<String> = key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .map(str::to_owned)
        .collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(bundle);
    let body_at = bundle.len() - key.len() + key.find('\n').unwrap() + 1;
    // The first whole 3-byte group inside the key's body.
    let from = (body_at / 3 + 1) * 4;
    traces.push(b64[from..from + 40].to_owned());
    traces
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_refused(out: &Output, what: &str, wants: &[&str], traces: &[String]) {
    let text = output_text(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {text}");
    for want in wants {
        assert!(text.contains(want), "{what}: wanted {want:?} in {text}");
    }
    for trace in traces {
        assert!(
            !text.contains(trace.as_str()),
            "{what}: the key leaked: {text}"
        );
    }
}

/// The fixture spec in `dir`, its `caBundle` replaced by `ca_bundle` (YAML lines).
fn spec_with(dir: &Path, fixture_name: &str, ca_bundle: &str) -> PathBuf {
    let text = std::fs::read_to_string(fixture(fixture_name)).unwrap();
    let edited = text.replace("    file: pki/ca.crt\n", ca_bundle);
    assert_ne!(edited, text, "{fixture_name} has no caBundle.file line");
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, edited).unwrap();
    spec
}

/// Attack rows "caBundle carries the CA's private key" (file and base64 forms, three key
/// encodings, a kubeadm and an IAM-join spec): validate and render exit 2 with the spec's
/// file:line, the field, the bundle's line and the block's type, write nothing, and print no
/// part of the key.
#[test]
fn a_ca_bundle_with_a_private_key_is_refused_at_the_field_and_the_key_is_never_shown() {
    let ca = std::fs::read_to_string(fixture("pki/ca.crt")).unwrap();
    let ca_lines = ca.lines().count();
    for label in ["PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"] {
        let key = throwaway_key(label);
        let bundle = format!("{ca}{key}");
        let traces = key_traces(&key, &bundle);
        for fixture_name in ["static-minimal.yaml", "iam-eks.yaml"] {
            // caBundle.file: the spec names a PEM file holding certificate and key.
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("ca-and-key.pem"), &bundle).unwrap();
            let spec = spec_with(dir.path(), fixture_name, "    file: ca-and-key.pem\n");
            let out = dir.path().join("b");
            let render = bin()
                .arg("render")
                .arg(&spec)
                .arg("-o")
                .arg(&out)
                .output()
                .unwrap();
            let block_line = format!("ca-and-key.pem, line {}: a {label} PEM block", ca_lines + 1);
            assert_refused(
                &render,
                &format!("render, file, {label}, {fixture_name}"),
                &[
                    "spec.yaml:12:",
                    ": spec.caBundle.file: ",
                    block_line.as_str(),
                    "CERTIFICATE blocks only",
                ],
                &traces,
            );
            assert!(!out.exists(), "nothing is written");

            // caBundle.base64: the same bundle inline; validation already refuses it.
            let b64 = base64::engine::general_purpose::STANDARD.encode(&bundle);
            let spec = spec_with(dir.path(), fixture_name, &format!("    base64: {b64}\n"));
            let block_line = format!("line {}: a {label} PEM block", ca_lines + 1);
            for command in ["validate", "render"] {
                let mut run = bin();
                run.arg(command).arg(&spec);
                if command == "render" {
                    run.arg("-o").arg(&out);
                }
                assert_refused(
                    &run.output().unwrap(),
                    &format!("{command}, base64, {label}, {fixture_name}"),
                    &[
                        "spec.yaml:12:",
                        ": spec.caBundle.base64: ",
                        block_line.as_str(),
                    ],
                    &traces,
                );
                assert!(!out.exists(), "nothing is written");
            }
        }
    }
}

/// Every base64 token of 40 characters or more in `text`, decoded where it decodes.
fn decoded_tokens(text: &str) -> Vec<Vec<u8>> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "+/=".contains(c)))
        .filter(|t| t.len() >= 40)
        .filter_map(|t| base64::engine::general_purpose::STANDARD.decode(t).ok())
        .collect()
}

/// Policy check (reads rendered text, performs no attack): no bundle rendered from the
/// fixtures carries "PRIVATE KEY", neither as text nor inside any base64 value (Karpenter's
/// `clusterCABundle`, nodeadm's `certificateAuthority`, userData). The iam-eks fixture renders
/// nodeadm userData; its serving-certificate key is the operator's, never the bundle's.
#[test]
fn policy_check_no_rendered_bundle_carries_a_private_key() {
    for fixture_name in [
        "static-minimal.yaml",
        "iam-eks.yaml",
        "secrets-manager-arm.yaml",
        "gpu-operator.yaml",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b");
        let render = bin()
            .arg("render")
            .arg(fixture(fixture_name))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(render.status.success(), "{}", output_text(&render));
        let mut decoded = 0;
        for path in crate::partition::files(&out) {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains("PRIVATE KEY"), "{}", path.display());
            for bytes in decoded_tokens(&text) {
                decoded += 1;
                let inner = String::from_utf8_lossy(&bytes);
                assert!(!inner.contains("PRIVATE KEY"), "{}", path.display());
                // userData is often base64 of text that itself holds base64 (the CA).
                for nested in decoded_tokens(&inner) {
                    assert!(
                        !String::from_utf8_lossy(&nested).contains("PRIVATE KEY"),
                        "{}",
                        path.display()
                    );
                }
            }
        }
        assert!(
            decoded > 0,
            "{fixture_name}: the CA bundle was found and read"
        );
    }
}

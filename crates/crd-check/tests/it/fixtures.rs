//! The seed manifests and Kubean's own examples validate clean; each invalid fixture produces the
//! violations its `# expect:` lines name (kind, exact path, message substring taken from the CRD).

use std::fs;
use std::path::{Path, PathBuf};

use kk_crd_check::{CheckError, Violation, ViolationKind, validate};
use serde_json::Value;

fn fixtures(sub: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(sub);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

fn documents(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap();
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn listing(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  [{}] {v}", v.kind))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn valid_fixtures_validate_clean() {
    let files = fixtures("valid");
    assert!(
        files.len() >= 5,
        "expected the five seed manifests, got {files:?}"
    );
    for file in files {
        for doc in documents(&file) {
            let violations = validate(&doc).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert!(
                violations.is_empty(),
                "{} should be valid:\n{}",
                file.display(),
                listing(&violations)
            );
        }
    }
}

fn shared_dir() -> PathBuf {
    match std::env::var_os("KK_SHARED_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    }
}

#[test]
fn kubean_upstream_examples_validate_clean() {
    let dir = shared_dir().join("examples/kubean");
    let mut checked = Vec::new();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    for file in files {
        for doc in documents(&file) {
            match validate(&doc) {
                Ok(violations) => {
                    assert!(
                        violations.is_empty(),
                        "{} ({}) should be valid:\n{}",
                        file.display(),
                        doc["kind"],
                        listing(&violations)
                    );
                    checked.push(format!("{}/{}", doc["kind"], doc["metadata"]["name"]));
                }
                // ConfigMaps and Secrets ride along in the same files.
                Err(CheckError::UnknownKind { api_version, .. }) => assert_eq!(api_version, "v1"),
                Err(e) => panic!("{}: {e}", file.display()),
            }
        }
    }
    // Cluster-with-sshAuthRef, mirror Cluster + ClusterOperation, AllInOne's Cluster + ClusterOperation,
    // scale ClusterOperation.
    assert!(
        checked.len() >= 6,
        "too few Kubean objects checked: {checked:?}"
    );
}

/// `# expect: <kind> | <path> | <message substring>`.
struct Expect {
    kind: ViolationKind,
    path: String,
    message: String,
}

fn expectations(path: &Path) -> Vec<Expect> {
    let text = fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect:"))
        .map(|rest| {
            let parts: Vec<&str> = rest.split(" | ").map(str::trim).collect();
            assert_eq!(
                parts.len(),
                3,
                "{}: malformed expect line {rest:?}",
                path.display()
            );
            let kind = match parts[0] {
                "schema" => ViolationKind::Schema,
                "cel" => ViolationKind::Cel,
                "unknown-field" => ViolationKind::UnknownField,
                other => panic!("{}: unknown kind {other}", path.display()),
            };
            Expect {
                kind,
                path: parts[1].to_owned(),
                message: parts[2].to_owned(),
            }
        })
        .collect()
}

#[test]
fn invalid_fixtures_report_the_expected_violations() {
    let files = fixtures("invalid");
    assert!(
        files.len() >= 8,
        "expected at least 8 invalid fixtures, got {}",
        files.len()
    );
    for file in files {
        let expects = expectations(&file);
        assert!(
            !expects.is_empty(),
            "{} has no `# expect:` line",
            file.display()
        );
        let docs = documents(&file);
        assert_eq!(docs.len(), 1, "{}: one object per fixture", file.display());
        let violations = validate(&docs[0]).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for e in &expects {
            let found = violations
                .iter()
                .any(|v| v.kind == e.kind && v.path == e.path && v.message.contains(&e.message));
            assert!(
                found,
                "{}: no {} violation at {:?} containing {:?}; got:\n{}",
                file.display(),
                e.kind,
                e.path,
                e.message,
                listing(&violations)
            );
        }
    }
}

#[test]
fn display_shows_path_and_the_crd_message_verbatim() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/invalid/ec2nodeclass-role-and-instance-profile.yaml");
    let violations = validate(&documents(&file)[0]).unwrap();
    let shown: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        ["spec: Invalid value: must specify exactly one of ['role', 'instanceProfile']"]
    );
}

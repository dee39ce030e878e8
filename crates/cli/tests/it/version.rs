//! `--version` and `version -o json|yaml` carry the commit and build date build.rs stamped in.

use std::process::Command;

use kk_sim::disrupt::clock::format_time;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn stdout(args: &[&str]) -> String {
    let out = bin().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .env("TZ", "UTC")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// The commit and date a build of this checkout must carry: HEAD, and SOURCE_DATE_EPOCH (as
/// this test was compiled with, like the binary) or else the commit date as git formats it.
fn expected() -> (String, String) {
    let Some(commit) = git(&["rev-parse", "HEAD"]) else {
        return ("unknown".into(), "unknown".into());
    };
    let date = match option_env!("SOURCE_DATE_EPOCH") {
        Some(epoch) => format_time(epoch.trim().parse().unwrap()),
        None => git(&[
            "log",
            "-1",
            "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
            "--format=%cd",
        ])
        .unwrap(),
    };
    (commit, date)
}

#[test]
fn version_flag_prints_version_commit_and_build_date() {
    let (commit, date) = expected();
    let want = format!(
        "kubean-karpenter {} (commit {commit}, built {date})\n",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(stdout(&["--version"]), want);
    assert_eq!(stdout(&["-V"]), want);
    assert_eq!(
        stdout(&["version"]),
        want,
        "`version` says what --version says"
    );
    if commit != "unknown" {
        assert_eq!(commit.len(), 40, "{commit}");
        assert!(commit.bytes().all(|b| b.is_ascii_hexdigit()), "{commit}");
    }
}

#[test]
fn version_json_is_an_object_with_version_commit_build_date_rustc_and_components() {
    let (commit, date) = expected();
    let value: serde_json::Value = serde_json::from_str(&stdout(&["version", "-o", "json"]))
        .expect("version -o json prints JSON");
    let object = value.as_object().expect("an object");
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["version", "commit", "buildDate", "rustc", "components"]
    );
    // The versions table's defaults (crates/spec/src/versions.yaml), one source for all.
    let components = &object["components"];
    assert_eq!(
        components["karpenter"],
        serde_json::json!({ "default": "1.15.2", "newestKnown": "1.15.2" })
    );
    assert_eq!(components["nvidia-device-plugin"]["default"], "v0.20.0");
    assert_eq!(components["aws-ebs-csi-driver"]["default"], "2.64.0");
    assert_eq!(
        components["cloud-controller-manager"]["default"],
        serde_json::Value::Null
    );
    assert_eq!(object["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(object["commit"], commit.as_str());
    assert_eq!(object["buildDate"], date.as_str());
    let rustc = object["rustc"].as_str().unwrap();
    assert!(rustc.starts_with("rustc 1."), "{rustc}");

    let yaml: serde_json::Value = serde_saphyr::from_str(&stdout(&["version", "-o", "yaml"]))
        .expect("version -o yaml prints YAML");
    assert_eq!(yaml, value, "YAML and JSON carry the same object");
}

#[test]
fn version_rejects_an_unknown_output_format() {
    let out = bin().args(["version", "-o", "xml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("xml"));
}

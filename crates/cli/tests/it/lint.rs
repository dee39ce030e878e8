//! `kubean-karpenter lint` as a user runs it: exit codes 0/1/2, formats, stdin, directories,
//! specs rendered in memory, config files and inline suppressions, hostile input.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Runs `lint` in `dir` (so no config file of the repository is picked up by accident).
fn lint_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .arg("lint")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const GPU_POOL_UNTAINTED: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g6]}
  limits:
    nvidia.com/gpu: \"4\"
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets:
      - nodes: \"1\"
";

#[test]
fn every_spec_fixture_and_the_example_lint_clean() {
    let dir = tempfile::tempdir().unwrap();
    let example = dir.path().join("example.yaml");
    let init = bin().arg("init").output().unwrap();
    fs::write(&example, init.stdout).unwrap();
    let mut specs = vec![example];
    for entry in fs::read_dir(repo("fixtures/specs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            specs.push(path);
        }
    }
    for spec in specs {
        let expected = expected_codes(&fs::read_to_string(&spec).unwrap());
        assert_only_expected(dir.path(), &spec, &expected);
    }
}

/// Codes a spec declares with `# expect-lint: KK009[, KK0NN] [-- why]` lines: findings it is
/// meant to draw (static join mode puts a token in userData on purpose).
fn expected_codes(spec_text: &str) -> BTreeSet<String> {
    spec_text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("# expect-lint:"))
        .flat_map(|rest| {
            rest.split(|c: char| c.is_whitespace() || c == ',')
                .filter(|t| !t.is_empty())
                .take_while(|t| t.starts_with("KK"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every declared code fires, nothing else does (at any severity), and the exit code follows
/// the findings' severities.
fn assert_only_expected(dir: &Path, spec: &Path, expected: &BTreeSet<String>) {
    let out = lint_in(dir, &[spec.to_str().unwrap(), "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", spec.display(), text(&out.stderr)));
    let diagnostics = json["diagnostics"].as_array().unwrap();
    // Information (KK030 on a capacity-block pool: the choice it made and its cost) is no
    // problem: it counts only where the spec declares it.
    let fired: BTreeSet<String> = diagnostics
        .iter()
        .filter_map(|d| d["code"].as_str().map(str::to_owned))
        .filter(|code| {
            expected.contains(code)
                || diagnostics
                    .iter()
                    .any(|d| d["code"] == code.as_str() && d["severity"] != "info")
        })
        .collect();
    assert_eq!(
        &fired,
        expected,
        "{}: `# expect-lint:` declares {expected:?}; got:\n{}",
        spec.display(),
        text(&out.stdout)
    );
    let fails = diagnostics
        .iter()
        .any(|d| matches!(d["severity"].as_str(), Some("warning" | "error")));
    assert_eq!(
        out.status.code(),
        Some(i32::from(fails)),
        "{}",
        spec.display()
    );
}

#[test]
fn findings_exit_1_and_fail_on_raises_the_bar() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("pool.yaml"), GPU_POOL_UNTAINTED).unwrap();
    let out = lint_in(dir.path(), &["pool.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("warning[KK002]: NodePool/gpu:"), "{stdout}");
    assert!(stdout.contains("--> pool.yaml:7:5"), "{stdout}");
    assert!(stdout.contains("7 |     spec:"), "{stdout}");
    // A warning is below --fail-on error.
    let out = lint_in(dir.path(), &["pool.yaml", "--fail-on", "error"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn json_and_sarif_formats() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("pool.yaml"), GPU_POOL_UNTAINTED).unwrap();
    let out = lint_in(dir.path(), &["pool.yaml", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["summary"]["warnings"], 1);
    let d = &json["diagnostics"][0];
    assert_eq!(
        (
            d["code"].as_str(),
            d["file"].as_str(),
            d["line"].as_u64(),
            d["column"].as_u64()
        ),
        (Some("KK002"), Some("pool.yaml"), Some(7), Some(5))
    );
    assert_eq!(d["object"], "NodePool/gpu");

    let out = lint_in(dir.path(), &["pool.yaml", "--format", "sarif"]);
    assert_eq!(out.status.code(), Some(1));
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    let run = &sarif["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "kubean-karpenter");
    let result = &run["results"][0];
    assert_eq!(result["ruleId"], "KK002");
    assert_eq!(result["level"], "warning");
    let index = result["ruleIndex"].as_u64().unwrap() as usize;
    assert_eq!(run["tool"]["driver"]["rules"][index]["id"], "KK002");
    let location = &result["locations"][0]["physicalLocation"];
    assert_eq!(location["artifactLocation"]["uri"], "pool.yaml");
    assert_eq!(location["region"]["startLine"], 7);
}

#[test]
fn stdin_and_directories() {
    let mut child = bin()
        .args(["lint", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(GPU_POOL_UNTAINTED.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("--> <stdin>:7:5"));

    // A rendered bundle directory: recursive, sorted, clean.
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    let render = bin()
        .args(["render", "--example", "-o"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(render.status.success());
    let out = lint_in(dir.path(), &["bundle"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // Clean but for notices: the upstream images whose digest cannot be known here are pinned
    // by tag only (KK026, info; `images` lists them), and the training pool's capacity blocks
    // fall back to on-demand (KK030, info). The example keeps the instance profile, with
    // Karpenter and the rotator on the host network: no KK024.
    let report = text(&out.stdout);
    assert!(report.contains("info[KK026]"), "{report}");
    assert!(report.contains("info[KK030]"), "{report}");
    for line in report.lines().filter(|l| l.contains("KK0")) {
        assert!(
            ["info[KK026]", "info[KK030]"]
                .iter()
                .any(|code| line.contains(code)),
            "unexpected finding: {line}\n{report}"
        );
    }
}

#[test]
fn a_spec_is_linted_through_its_rendered_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let init = bin().arg("init").output().unwrap();
    // Switch to static join mode: KK009 (a literal token in userData) points into the rendered
    // bundle. (An @latest alias no longer validates: EKS-optimized AMIs have no kubeadm.)
    let spec = text(&init.stdout);
    assert!(
        spec.contains("    mode: ssm")
            && spec.contains("    storeName: /kubean-karpenter/demo/join"),
        "the example changed"
    );
    let spec = spec
        .replacen(
            "    mode: ssm",
            "    mode: static\n    allowInsecureStatic: true",
            1,
        )
        .replacen(
            "    storeName: /kubean-karpenter/demo/join",
            "    token: abcdef.0123456789abcdef",
            1,
        );
    fs::write(dir.path().join("spec.yaml"), spec).unwrap();
    let out = lint_in(dir.path(), &["spec.yaml", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files: Vec<&str> = json["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "KK009")
        .filter_map(|d| d["file"].as_str())
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("spec.yaml#nodeclasses/")),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn config_file_and_inline_comments_disable_rules() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("pool.yaml"), GPU_POOL_UNTAINTED).unwrap();
    fs::write(
        dir.path().join(".kubean-karpenter-lint.yaml"),
        "disable: [KK002]\n",
    )
    .unwrap();
    let out = lint_in(dir.path(), &["pool.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    let other = dir.path().join("other.yaml");
    fs::write(&other, "disable: [KK777]\n").unwrap();
    let out = lint_in(dir.path(), &["pool.yaml", "--config", "other.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown rule"));
    fs::remove_file(dir.path().join(".kubean-karpenter-lint.yaml")).unwrap();

    for (name, body) in [
        (
            "object.yaml",
            format!("# kubean-karpenter-lint: disable=KK002\n{GPU_POOL_UNTAINTED}"),
        ),
        (
            "line.yaml",
            GPU_POOL_UNTAINTED.replace(
                "    spec:\n      nodeClassRef",
                "    spec: # kubean-karpenter-lint: disable=KK002\n      nodeClassRef",
            ),
        ),
        (
            "file.yaml",
            format!("# kubean-karpenter-lint: disable-file=KK002\n---\n{GPU_POOL_UNTAINTED}"),
        ),
    ] {
        fs::write(dir.path().join(name), body).unwrap();
        let out = lint_in(dir.path(), &[name]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stdout));
        assert!(text(&out.stdout).contains("1 suppressed"), "{name}");
    }
}

#[test]
fn explain_and_list_rules() {
    let out = bin().args(["lint", "--explain", "KK007"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = text(&out.stdout);
    for section in ["## What", "## Why", "## Example", "## Fix"] {
        assert!(page.contains(section), "{page}");
    }
    let out = bin().args(["lint", "--explain", "KK999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin().args(["lint", "--list-rules"]).output().unwrap();
    assert!(text(&out.stdout).contains("KK000  error    crd-schema"));
}

#[test]
fn usage_and_hostile_input_exit_2_with_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("broken.yaml", b"kind: [unclosed\n".to_vec()),
        (
            "binary.yaml",
            vec![0x7f, b'E', b'L', b'F', 0, 0, 0xff, 0x01],
        ),
        ("prose.yaml", b"Hello, this is not a manifest.\n".to_vec()),
        (
            "deep.yaml",
            format!("a: {}1{}\n", "[".repeat(50_000), "]".repeat(50_000)).into_bytes(),
        ),
        ("bomb.yaml", {
            let mut t = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
            for i in 1..15 {
                let p = i - 1;
                t.push_str(&format!(
                    "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
                ));
            }
            t.into_bytes()
        }),
    ];
    for (name, bytes) in cases {
        fs::write(dir.path().join(name), bytes).unwrap();
        let out = lint_in(dir.path(), &[name]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{name}: one error line, got {stderr}"
        );
        assert!(
            stderr.starts_with(&format!("error: {name}")),
            "{name}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
    }

    // 50 MB: refused from its size, before it is read.
    let big = dir.path().join("big.yaml");
    let file = fs::File::create(&big).unwrap();
    file.set_len(50 * 1024 * 1024).unwrap();
    let out = lint_in(dir.path(), &["big.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("over the limit"),
        "{}",
        text(&out.stderr)
    );

    let out = lint_in(dir.path(), &["missing.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = lint_in(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = lint_in(dir.path(), &["x.yaml", "--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
}

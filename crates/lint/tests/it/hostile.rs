//! Input that is not what we lint ends in one clear error, fast, with bounded memory, and never
//! a panic: not YAML, binary, an alias bomb, deep nesting, a 50 MB file.

use std::time::{Duration, Instant};

use kk_lint::{Config, Input, LoadError};

fn lint_text(text: String) -> Result<kk_lint::Report, LoadError> {
    kk_lint::lint(&[Input::new("hostile.yaml", text)], &Config::default())
}

/// Lints `text`, expecting one error that names the file and one of `needles`, within seconds.
fn refused(text: String, what: &str, needles: &[&str]) {
    let started = Instant::now();
    let err = lint_text(text).expect_err(what).to_string();
    let elapsed = started.elapsed();
    assert!(
        needles.iter().any(|n| err.contains(n)),
        "{what}: expected an error mentioning one of {needles:?}, got {err}"
    );
    assert!(err.starts_with("hostile.yaml"), "{err}");
    assert!(!err.contains('\n'), "{what}: one line, got {err}");
    // Generous: this catches a hang or a blow-up, not a slow debug build on a busy machine.
    assert!(
        elapsed < Duration::from_secs(60),
        "{what}: took {elapsed:?}"
    );
}

#[test]
fn not_yaml() {
    refused(
        "apiVersion: v1\nkind: [unclosed\n  - : :\n".into(),
        "broken YAML",
        &["hostile.yaml:"],
    );
    refused(
        "This is a README, not a manifest.\n".into(),
        "prose",
        &["not a mapping"],
    );
}

#[test]
fn binary_bytes() {
    let mut bytes = b"apiVersion: v1\n".to_vec();
    bytes.extend([0u8, 0xff, 0xfe, 0x01, 0x02]);
    let err = Input::from_bytes("hostile.yaml", bytes).unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
    let err = Input::from_bytes("hostile.yaml", vec![0xc3, 0x28, b'a']).unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
    // Control characters that are valid UTF-8 reach the YAML parser, which refuses them.
    refused(
        "a: \u{1}\u{2}\u{8}\n".into(),
        "control characters",
        &["hostile.yaml:"],
    );
}

#[test]
fn alias_bomb() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..15 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    refused(text, "alias bomb", &["alias expansion"]);
}

#[test]
fn alias_bomb_inside_an_embedded_inventory() {
    let mut inner = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        inner.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let indented: String = inner.lines().map(|l| format!("    {l}\n")).collect();
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: h}}\ndata:\n  hosts.yml: |\n{indented}"
    );
    refused(text, "embedded alias bomb", &["alias expansion"]);
}

#[test]
fn deep_nesting() {
    let depth = 100_000;
    // The parser's own recursion guard or the loader's depth limit, whichever trips first.
    let limits = ["nesting deeper", "recursion limit"];
    refused(
        format!("a: {}1{}\n", "[".repeat(depth), "]".repeat(depth)),
        "deep flow nesting",
        &limits,
    );
    let mut block = String::new();
    for i in 0..200 {
        block.push_str(&" ".repeat(i));
        block.push_str("k:\n");
    }
    refused(block, "deep block nesting", &limits);
}

#[test]
fn fifty_megabytes() {
    let line = "- key: value-value-value-value\n";
    let text = line.repeat(50 * 1024 * 1024 / line.len() + 1);
    assert!(text.len() > 50 * 1024 * 1024);
    refused(text.clone(), "50 MB text", &["over the limit"]);
    let err = Input::from_bytes("hostile.yaml", text.into_bytes()).unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
}

#[test]
fn too_many_values_in_one_file() {
    // Under the byte limit, but more values than one file may hold (the run's total is
    // covered by a unit test in input.rs).
    let doc = "---\n".to_owned() + &"- [a, b, c, d, e, f, g, h]\n".repeat(20);
    let text = doc.repeat(1_500);
    assert!(text.len() < kk_lint::input::MAX_FILE_BYTES);
    refused(text, "270,000 values", &["more than 200000 values"]);
}

//! What we render must lint clean: the bundle of the built-in example and of every spec in
//! fixtures/specs/ yields no finding at warning or above. A finding here is a rule bug or a
//! render bug; the failure message says which object and rule.
//!
//! A spec that is meant to draw findings says so in a comment line
//! `# expect-lint: KK009[, KK0NN] [-- why]` (static join mode puts a token in userData on
//! purpose): each code listed must fire on its bundle, and no other code may.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use base64::Engine;
use kk_lint::{Config, Input, Severity};
use kk_model::yaml::{LoadLimits, load_documents};
use kk_spec::{EXAMPLE, EXAMPLE_FILE, LoadedSpec, parse_spec};

fn specs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs")
}

/// The CA the spec names (inline, a PEM file, or a kubeconfig's certificate-authority-data).
fn ca_pem(loaded: &LoadedSpec, base: &Path) -> Vec<u8> {
    if let Some(pem) = kk_render::inline_ca_pem(&loaded.spec) {
        return pem.unwrap();
    }
    let ca = &loaded.spec.spec.ca_bundle;
    if let Some(file) = &ca.file {
        return fs::read(base.join(file)).unwrap();
    }
    let kc = ca.kubeconfig.as_ref().expect("a CA source");
    let text = fs::read_to_string(base.join(&kc.path)).unwrap();
    let docs = load_documents(&text, LoadLimits::default()).unwrap();
    let clusters = docs[0].value["clusters"].as_array().unwrap();
    let entry = clusters
        .iter()
        .find(|c| kc.cluster.as_deref().is_none_or(|n| c["name"] == n))
        .unwrap();
    let data = entry["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .unwrap()
}

fn bundle_inputs(text: &str, file: &str, base: &Path) -> Vec<Input> {
    let loaded = parse_spec(text, file).unwrap_or_else(|e| panic!("{file}: {e:?}"));
    let bundle = kk_render::render(&loaded.spec, &ca_pem(&loaded, base)).unwrap();
    bundle
        .files
        .iter()
        .filter(|(p, _)| p.ends_with(".yaml"))
        .map(|(p, t)| Input::rendered(format!("{file}#{p}"), t.clone(), file))
        .collect()
}

/// The codes a spec declares with `# expect-lint: KK009, KK015 -- why` lines.
fn expected_codes(spec_text: &str) -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    for rest in spec_text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("# expect-lint:"))
    {
        let listed: Vec<&str> = rest
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .take_while(|t| t.starts_with("KK"))
            .collect();
        assert!(!listed.is_empty(), "`# expect-lint:{rest}` lists no code");
        for code in listed {
            assert!(
                kk_lint::registry::find(code).is_some(),
                "`# expect-lint:` names {code}, which is no rule"
            );
            codes.insert(code.to_owned());
        }
    }
    codes
}

fn assert_clean(inputs: &[Input], what: &str, expected: &BTreeSet<String>) {
    let report = kk_lint::lint(inputs, &Config::default()).unwrap_or_else(|e| panic!("{e}"));
    for code in expected {
        assert!(
            report.diagnostics.iter().any(|d| d.code == code),
            "{what} declares `# expect-lint: {code}`, but {code} did not fire on its bundle"
        );
    }
    let findings: Vec<String> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity >= Severity::Warning && !expected.contains(d.code))
        .map(|d| {
            format!(
                "  {}:{} {} {}: {}",
                d.file, d.pos, d.code, d.object, d.message
            )
        })
        .collect();
    assert!(
        findings.is_empty(),
        "the rendered bundle of {what} should lint clean (expected only {expected:?}):\n{}",
        findings.join("\n")
    );
    assert!(
        report.objects > 10,
        "{what}: only {} objects",
        report.objects
    );
}

#[test]
fn the_example_bundle_lints_clean() {
    let inputs = bundle_inputs(EXAMPLE, EXAMPLE_FILE, Path::new("."));
    assert_clean(&inputs, EXAMPLE_FILE, &expected_codes(EXAMPLE));
}

#[test]
fn every_spec_fixture_bundle_lints_clean() {
    let mut specs: Vec<PathBuf> = fs::read_dir(specs_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 3, "{specs:?}");
    for spec in specs {
        let text = fs::read_to_string(&spec).unwrap();
        let name = spec.display().to_string();
        let expected = expected_codes(&text);
        assert_clean(&bundle_inputs(&text, &name, &specs_dir()), &name, &expected);
    }
}

//! Every rule has `fixtures/lint/<CODE>/fail.yaml` and `pass.yaml`. `fail.yaml` starts with
//! `# expect: <CODE> <line>:<col> <message substring>` lines naming exactly the findings of
//! that code; `pass.yaml` yields none of that code. A new rule is picked up from the registry,
//! so adding one needs no change here.

use std::fs;
use std::path::{Path, PathBuf};

use kk_lint::{Config, Diagnostic, Input, RULES, docs};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/lint")
}

struct Expect {
    code: String,
    line: usize,
    col: usize,
    substring: String,
}

fn expectations(text: &str) -> Vec<Expect> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(|rest| {
            let mut parts = rest.splitn(3, ' ');
            let code = parts.next().unwrap_or_default().to_owned();
            let at = parts.next().unwrap_or_default();
            let (line, col) = at
                .split_once(':')
                .and_then(|(l, c)| Some((l.parse().ok()?, c.parse().ok()?)))
                // Unparseable (a placeholder while writing a fixture): fails and lists the truth.
                .unwrap_or((0, 0));
            Expect {
                code,
                line,
                col,
                substring: parts.next().unwrap_or_default().trim().to_owned(),
            }
        })
        .collect()
}

fn lint_file(path: &Path) -> Vec<Diagnostic> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.display().to_string();
    kk_lint::lint(&[Input::new(name, text)], &Config::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .diagnostics
}

fn listing(diagnostics: &[&Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| {
            format!(
                "  # expect: {} {}:{} {}",
                d.code, d.pos.line, d.pos.col, d.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_rule_fails_its_fail_fixture_exactly_and_passes_its_pass_fixture() {
    let mut problems = Vec::new();
    for rule in RULES {
        let code = rule.code();
        let dir = fixtures_dir().join(code);
        let fail = dir.join("fail.yaml");
        let pass = dir.join("pass.yaml");
        if !fail.is_file() || !pass.is_file() {
            problems.push(format!("{code}: missing {} or pass.yaml", fail.display()));
            continue;
        }

        let expected = expectations(&fs::read_to_string(&fail).unwrap());
        if expected.is_empty() {
            problems.push(format!("{code}: fail.yaml has no `# expect:` lines"));
        }
        if let Some(other) = expected.iter().find(|e| e.code != code) {
            problems.push(format!("{code}: fail.yaml expects code {}", other.code));
        }
        let found = lint_file(&fail);
        let got: Vec<&Diagnostic> = found.iter().filter(|d| d.code == code).collect();
        let matches = got.len() == expected.len()
            && got.iter().zip(&expected).all(|(d, e)| {
                d.pos.line == e.line && d.pos.col == e.col && d.message.contains(&e.substring)
            });
        if !matches {
            problems.push(format!(
                "{code}: fail.yaml findings differ from its expect lines; got:\n{}",
                listing(&got)
            ));
        }

        let found = lint_file(&pass);
        let got: Vec<&Diagnostic> = found.iter().filter(|d| d.code == code).collect();
        if !got.is_empty() {
            problems.push(format!(
                "{code}: pass.yaml should yield no {code}; got:\n{}",
                listing(&got)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_rule_is_documented_and_unique() {
    let mut codes = std::collections::BTreeSet::new();
    let mut names = std::collections::BTreeSet::new();
    for rule in RULES {
        let m = rule.meta();
        assert!(
            m.code.len() == 5
                && m.code.starts_with("KK")
                && m.code[2..].chars().all(|c| c.is_ascii_digit()),
            "{}: codes are KK and three digits",
            m.code
        );
        assert!(
            m.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{}: name {:?} is not kebab-case",
            m.code,
            m.name
        );
        assert!(codes.insert(m.code), "{}: duplicate code", m.code);
        assert!(
            names.insert(m.name),
            "{}: duplicate name {}",
            m.code,
            m.name
        );
        assert!(
            !m.summary.is_empty() && !m.summary.ends_with('.'),
            "{}: summary must be one sentence without a trailing period",
            m.code
        );
        if let Err(e) = docs::check_doc(m.doc) {
            panic!("{}: DOC {e}", m.code);
        }
        let page = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/rules")
            .join(format!("{}.md", m.code));
        assert!(page.is_file(), "{}: {} missing", m.code, page.display());
        let index = fs::read_to_string(page.with_file_name("README.md")).unwrap_or_default();
        assert!(
            index.contains(&format!("[{}]({}.md)", m.code, m.code)),
            "{}: not listed in docs/rules/README.md",
            m.code
        );
    }
}

#[test]
fn no_fixture_directory_without_a_rule() {
    for entry in fs::read_dir(fixtures_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            kk_lint::registry::find(&name).is_some(),
            "fixtures/lint/{name} belongs to no registered rule"
        );
    }
}

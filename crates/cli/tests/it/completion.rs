//! `completion bash|zsh|fish` and `man DIR`: generated from the clap definitions, checked by
//! the shells and groff that read them.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn stdout(args: &[&str]) -> String {
    let out = bin().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The commands `--help` lists under "Commands:" for `path` (the help pseudo-command left out):
/// read from the help text, not from the code that generates the pages.
fn commands(path: &[&str]) -> Vec<String> {
    let mut args: Vec<&str> = path.to_vec();
    args.push("--help");
    let help = stdout(&args);
    let Some(section) = help.split("\nCommands:\n").nth(1) else {
        return Vec::new();
    };
    section
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command path, depth first: [], [init], ..., [token], [token, create], ...
fn command_paths() -> Vec<Vec<String>> {
    fn walk(path: Vec<String>, all: &mut Vec<Vec<String>>) {
        let refs: Vec<&str> = path.iter().map(String::as_str).collect();
        let children = commands(&refs);
        all.push(path.clone());
        for child in children {
            let mut next = path.clone();
            next.push(child);
            walk(next, all);
        }
    }
    let mut all = Vec::new();
    walk(Vec::new(), &mut all);
    all
}

#[test]
fn every_shell_gets_a_script_naming_every_command() {
    let paths = command_paths();
    assert!(paths.len() > 15, "{paths:?}");
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&["completion", shell]);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for path in &paths {
            if let Some(name) = path.last() {
                assert!(script.contains(name.as_str()), "{shell} lacks {name}");
            }
        }
    }
}

#[test]
fn the_bash_script_parses_and_completes_past_the_first_word() {
    let script = stdout(&["completion", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubean-karpenter.bash");
    std::fs::write(&file, &script).unwrap();
    let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(syntax.status.success(), "bash -n: {syntax:?}");

    // What bash's programmable completion does on TAB: COMP_WORDS/COMP_CWORD set, the
    // function called with (command, word being completed, previous word).
    let complete = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let n = words.len() - 1;
        let prev = if n > 0 { words[n - 1] } else { "" };
        let probe = format!(
            "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={n}\n\
             _kubean__karpenter kubean-karpenter '{}' '{prev}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            quoted.join(" "),
            words[n],
        );
        let out = Command::new("bash").arg("-c").arg(probe).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(complete(&["kubean-karpenter", "pl"]), ["plan"]);
    // Past the first word: clap_complete 4.6.12 completes nothing here for a hyphenated binary
    // (clap-rs/clap issue 6421); our fix-up must keep these working.
    let token = complete(&["kubean-karpenter", "token", ""]);
    for sub in ["create", "list", "revoke"] {
        assert!(token.iter().any(|w| w == sub), "token <TAB>: {token:?}");
    }
    assert_eq!(
        complete(&["kubean-karpenter", "plan", "--expl"]),
        ["--explain"]
    );
    let shells = complete(&["kubean-karpenter", "completion", ""]);
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|w| w == shell), "{shells:?}");
    }
    let create = complete(&["kubean-karpenter", "token", "create", "--t"]);
    assert_eq!(create, ["--ttl"]);
}

#[test]
fn the_zsh_and_fish_scripts_parse_where_those_shells_are_installed() {
    for (shell, check) in [("zsh", &["-n"][..]), ("fish", &["--no-execute"][..])] {
        if !have(shell) {
            // .ci/setup-tools installs both: under CI a missing shell is a failure.
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "{shell} not installed and CI=true"
            );
            eprintln!("{shell} not installed: syntax check skipped");
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("completion.{shell}"));
        std::fs::write(&file, stdout(&["completion", shell])).unwrap();
        let out = Command::new(shell).args(check).arg(&file).output().unwrap();
        assert!(out.status.success(), "{shell} {check:?}: {out:?}");
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let out = bin().args(["completion", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn man_writes_one_page_per_command_and_groff_renders_them() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1");
    let out = bin().arg("man").arg(&out_dir).output().unwrap();
    assert!(out.status.success(), "{out:?}");

    let want: BTreeSet<String> = command_paths()
        .iter()
        .map(|path| {
            let mut name = String::from("kubean-karpenter");
            for part in path {
                name.push('-');
                name.push_str(part);
            }
            name + ".1"
        })
        .collect();
    let got: BTreeSet<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(got, want, "one page per command, nothing else");
    assert!(got.contains("kubean-karpenter-plan.1"));
    assert!(got.contains("kubean-karpenter-token-create.1"));

    let (version, date) = {
        let v: serde_json::Value =
            serde_json::from_str(&stdout(&["version", "-o", "json"])).unwrap();
        let date = v["buildDate"].as_str().unwrap().to_owned();
        (v["version"].as_str().unwrap().to_owned(), date)
    };
    let date = date.get(..10).unwrap_or(&date).to_owned();
    for name in &got {
        let page = std::fs::read_to_string(out_dir.join(name)).unwrap();
        let stem = name.trim_end_matches(".1");
        let th = format!(
            ".TH {stem} 1 {date} \"kubean-karpenter {version}\" \"kubean-karpenter manual\"\n"
        );
        assert!(page.contains(&th), "{name}: no `{th}` in\n{page}");
        assert!(page.contains(".SH NAME\n"), "{name}");
        assert!(page.contains(".SH SYNOPSIS\n"), "{name}");
    }

    if !have("groff") {
        eprintln!("groff not installed: only the .TH headers were checked");
        return;
    }
    let plan = render_with_groff(&out_dir.join("kubean-karpenter-plan.1"));
    for expected in [
        "NAME",
        "kubean-karpenter-plan - Simulate Karpenter's scheduler",
        "SYNOPSIS",
        "OPTIONS",
        "--workloads",
        "--explain",
    ] {
        assert!(plan.contains(expected), "no {expected:?} in\n{plan}");
    }
    for name in &got {
        render_with_groff(&out_dir.join(name));
    }
}

/// Renders a page as `man` would, as plain text with its justified spacing collapsed; fails on
/// any groff warning.
fn render_with_groff(page: &Path) -> String {
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-P-cbou"])
        .arg(page)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {out:?}", page.display());
    assert!(
        out.stderr.is_empty(),
        "{}: groff warned: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // groff typesets hyphens as U+2010 in running text and minus signs as U+2212.
    String::from_utf8(out.stdout)
        .unwrap()
        .replace(['\u{2010}', '\u{2212}'], "-")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

//! `docs/rules/` is generated from the rules' `DOC`s and must be current. Regenerate with
//! `KK_UPDATE_DOCS=1 cargo test -p kk-lint --test it docs::`.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

fn rules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/rules")
}

#[test]
fn docs_rules_are_current() {
    let dir = rules_dir();
    let update = std::env::var_os("KK_UPDATE_DOCS").is_some_and(|v| v == "1");
    let generated = kk_lint::docs::generated();
    let wanted: BTreeSet<String> = generated.iter().map(|(name, _)| name.clone()).collect();
    let mut stale = Vec::new();
    if update {
        fs::create_dir_all(&dir).unwrap();
    }
    for (name, text) in &generated {
        let path = dir.join(name);
        if fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if update {
            fs::write(&path, text).unwrap();
        } else {
            stale.push(format!("{name} is out of date"));
        }
    }
    // Pages of rules that no longer exist.
    for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && !wanted.contains(&name) {
            if update {
                fs::remove_file(entry.path()).unwrap();
            } else {
                stale.push(format!("{name} belongs to no rule"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "docs/rules is stale ({}); run KK_UPDATE_DOCS=1 cargo test -p kk-lint --test it docs::",
        stale.join(", ")
    );
}

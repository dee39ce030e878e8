//! Import circles between the source files of each crate: a file that reaches another through
//! `crate::`, `super::` or `self::` paths (items re-exported by a module root count as the file
//! that defines them; test modules and comments do not count), and back. A circle is allowed
//! only where docs/internals/architecture.md lists it under "Import circles left, and why";
//! every other one is a tangle this test refuses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn crates_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `src` by its module path (`mod.rs`, `lib.rs`, `main.rs` are their
/// folder's module).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    out
}

/// The code of a file without comments and without its test module.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The `crate::`/`super::`/`self::` paths in `code`, `use` groups expanded (one level).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .find(|p| code_at(&bytes, i, p) && (i == 0 || !is_ident(bytes[i - 1])));
        let Some(_) = starts else {
            i += 1;
            continue;
        };
        let mut j = i;
        let mut segs: Vec<String> = Vec::new();
        let mut seg = String::new();
        while j < bytes.len() {
            let c = bytes[j];
            if is_ident(c) {
                seg.push(c);
                j += 1;
            } else if code_at(&bytes, j, "::") {
                segs.push(std::mem::take(&mut seg));
                j += 2;
                if j < bytes.len() && bytes[j] == '{' {
                    let end = (j..bytes.len()).find(|&k| bytes[k] == '}').unwrap_or(j);
                    let group: String = bytes[j + 1..end].iter().collect();
                    for item in group.split(',') {
                        let item = item.split(" as ").next().unwrap_or_default().trim();
                        if item.is_empty() || item.contains('{') {
                            continue;
                        }
                        let mut p = segs.clone();
                        p.extend(item.split("::").map(|s| s.trim().to_owned()));
                        out.push(p);
                    }
                    segs.clear();
                    j = end;
                    break;
                }
            } else {
                break;
            }
        }
        if !segs.is_empty() || !seg.is_empty() {
            if !seg.is_empty() {
                segs.push(seg);
            }
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

fn code_at(bytes: &[char], i: usize, text: &str) -> bool {
    text.chars()
        .enumerate()
        .all(|(k, c)| bytes.get(i + k) == Some(&c))
}

/// `pub use a::b::{C, D as E};` / `pub use a::C;` in a module root: item → defining module.
fn reexports(module: &Module, code: &str) -> BTreeMap<String, Module> {
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let rest: String = rest.split_whitespace().collect::<Vec<_>>().join(" ");
        let (head, items): (&str, Vec<&str>) = match rest.split_once("::{") {
            Some((head, group)) => (head, group.trim_end_matches('}').split(',').collect()),
            None => match rest.rsplit_once("::") {
                Some((head, item)) => (head, vec![item]),
                None => continue,
            },
        };
        for item in items {
            let mut words = item.split(" as ");
            let path = words.next().unwrap_or_default().trim();
            let name = words
                .next()
                .unwrap_or_else(|| path.rsplit("::").next().unwrap_or_default())
                .trim();
            if name.is_empty() {
                continue;
            }
            let mut target = module.clone();
            target.extend(
                head.split("::")
                    .chain(
                        path.split("::").collect::<Vec<_>>()[..path.split("::").count() - 1]
                            .iter()
                            .copied(),
                    )
                    .filter(|s| !matches!(*s, "self" | "crate" | ""))
                    .map(str::to_owned),
            );
            out.insert(name.to_owned(), target);
        }
    }
    out
}

/// File → the files of its crate it refers to.
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mods = modules(src);
    let roots: BTreeMap<Module, BTreeMap<String, Module>> = mods
        .iter()
        .filter(|(_, p)| {
            matches!(
                p.file_name().and_then(|f| f.to_str()),
                Some("mod.rs" | "lib.rs" | "main.rs")
            )
        })
        .map(|(m, p)| (m.clone(), reexports(m, &code(p))))
        .collect();
    let longest = |target: &[String]| {
        (0..=target.len())
            .rev()
            .find_map(|j| mods.get(&target[..j]).cloned())
    };
    let mut out = BTreeMap::new();
    for (module, path) in &mods {
        let is_root = matches!(
            path.file_name().and_then(|f| f.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        let base: Module = if is_root {
            module.clone()
        } else {
            module[..module.len() - 1].to_vec()
        };
        let mut to = BTreeSet::new();
        for p in paths(&code(path)) {
            let (mut current, mut rest) = match p[0].as_str() {
                "crate" => (Vec::new(), &p[1..]),
                _ => (base.clone(), &p[..]),
            };
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        current.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            let mut target = current.clone();
            target.extend(rest.iter().cloned());
            let Some(i) = (0..=target.len())
                .rev()
                .find(|&j| mods.contains_key(&target[..j]))
            else {
                continue;
            };
            let mut found = mods[&target[..i]].clone();
            if let Some(item) = target.get(i)
                && let Some(defined) = roots.get(&target[..i]).and_then(|r| r.get(item))
                && let Some(file) = longest(defined)
            {
                found = file;
            }
            if &found != path {
                to.insert(found);
            }
        }
        out.insert(path.clone(), to);
    }
    out
}

/// The groups of files that reach each other (strongly connected, more than one file).
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<BTreeSet<PathBuf>> {
    let reach = |from: &PathBuf| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(v) = stack.pop() {
            for w in graph.get(&v).into_iter().flatten() {
                if seen.insert(w.clone()) {
                    stack.push(w.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&PathBuf, BTreeSet<PathBuf>> =
        graph.keys().map(|v| (v, reach(v))).collect();
    let mut out: Vec<BTreeSet<PathBuf>> = Vec::new();
    for v in graph.keys() {
        let group: BTreeSet<PathBuf> = graph
            .keys()
            .filter(|w| *w == v || (reaches[v].contains(*w) && reaches[*w].contains(v)))
            .cloned()
            .collect();
        if group.len() > 1 && !out.contains(&group) {
            out.push(group);
        }
    }
    out
}

#[test]
fn no_import_circle_between_files_but_the_documented_ones() {
    let doc =
        std::fs::read_to_string(crates_dir().join("../docs/internals/architecture.md")).unwrap();
    let section = doc
        .split("## Import circles left, and why")
        .nth(1)
        .expect("docs/internals/architecture.md has \"## Import circles left, and why\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut found = Vec::new();
    let mut names = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>();
    names.sort();
    for krate in names {
        let src = krate.join("src");
        if !src.is_dir() {
            continue;
        }
        for group in circles(&graph(&src)) {
            let files: Vec<String> = group
                .iter()
                .map(|p| p.strip_prefix(crates_dir()).unwrap().display().to_string())
                .collect();
            found.push(files);
        }
    }
    let undocumented: Vec<&Vec<String>> = found
        .iter()
        .filter(|files| !files.iter().all(|f| section.contains(&format!("`{f}`"))))
        .collect();
    assert!(
        undocumented.is_empty(),
        "import circles that docs/internals/architecture.md does not list: {undocumented:#?}"
    );
}

/// The detector itself: two files that use each other (one through a re-export of its
/// module root) are a circle; a file that only uses the other is not.
#[test]
fn two_files_that_use_each_other_are_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("apply")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod apply;\npub mod doctor;\n").unwrap();
    std::fs::write(
        src.join("apply/mod.rs"),
        "mod aws;\npub use aws::{Writer, policy};\n",
    )
    .unwrap();
    std::fs::write(
        src.join("apply/aws.rs"),
        "use crate::doctor::{Checks, read};\npub struct Writer;\npub fn policy() {}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("doctor.rs"),
        "// crate::apply::policy in a comment does not count\npub struct Checks;\npub fn read() { crate::apply::policy(); }\n#[cfg(test)]\nmod tests { use crate::apply::Writer; }\n",
    )
    .unwrap();
    let found = circles(&graph(&src));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0],
        [src.join("apply/aws.rs"), src.join("doctor.rs")]
            .into_iter()
            .collect()
    );
    std::fs::write(
        src.join("doctor.rs"),
        "pub struct Checks;\npub fn read() {}\n",
    )
    .unwrap();
    assert!(circles(&graph(&src)).is_empty());
}

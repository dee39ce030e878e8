//! docs/internals/architecture.md draws the crate graph twice (a mermaid chart and a text list); both
//! must be the workspace's real `[dependencies]` between its own crates (dev-dependencies do
//! not count), as `cargo metadata` reports them, and each crate's folder must be its package
//! name (`kk-` left off; the binary `kubean-karpenter` lives in `crates/cli`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use kk_testkit::repo;
use serde_json::Value;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The folder (under `crates/`) each workspace package should live in.
fn folder_for(package: &str) -> String {
    match package {
        "kubean-karpenter" => "cli".to_owned(),
        other => other.strip_prefix("kk-").unwrap_or(other).to_owned(),
    }
}

/// Package → its normal dependencies inside the workspace, and package → its folder.
fn metadata() -> (Graph, BTreeMap<String, String>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut graph = Graph::new();
    let mut folders = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap().to_owned();
        let manifest = Path::new(p["manifest_path"].as_str().unwrap());
        let folder = manifest.parent().unwrap().file_name().unwrap();
        folders.insert(name.clone(), folder.to_string_lossy().into_owned());
        let deps = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap())
            .filter(|d| names.contains(d))
            .map(str::to_owned)
            .collect();
        graph.insert(name, deps);
    }
    (graph, folders)
}

/// The fenced block that follows `marker` (its first line) in the page.
fn block<'a>(page: &'a str, marker: &str) -> &'a str {
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} block"));
    let body = &page[start + marker.len()..];
    &body[..body.find("```").unwrap()]
}

/// The mermaid chart: nodes are `id[package<br/>…]`, edges `a --> b`.
fn mermaid(page: &str) -> Graph {
    let text = block(page, "```mermaid\n");
    let mut package_of = BTreeMap::new();
    let mut edges = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some((from, to)) = line.split_once("-->") {
            edges.push((from.trim().to_owned(), to.trim().to_owned()));
        } else if let Some((id, label)) = line.split_once('[') {
            let package = label.split("<br/>").next().unwrap().trim_end_matches(']');
            package_of.insert(id.trim().to_owned(), package.to_owned());
        }
    }
    let mut graph: Graph = package_of
        .values()
        .map(|p| (p.clone(), BTreeSet::new()))
        .collect();
    for (from, to) in edges {
        let (from, to) = (&package_of[&from], &package_of[&to]);
        graph.get_mut(from).unwrap().insert(to.clone());
    }
    graph
}

/// The text list: `folder -> folder, folder` or `folder -> (none)`, by folder name.
fn text_list(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let text = block(
        page,
        "The same as text (each crate, then what it uses):\n\n```\n",
    );
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (crate_, uses) = line.split_once("->").unwrap();
            let uses = uses
                .split(',')
                .map(str::trim)
                .filter(|u| *u != "(none)")
                .map(str::to_owned)
                .collect();
            (crate_.trim().to_owned(), uses)
        })
        .collect()
}

#[test]
fn the_documented_crate_graph_is_the_real_one() {
    let page = std::fs::read_to_string(repo().join("docs/internals/architecture.md")).unwrap();
    let (graph, folders) = metadata();
    assert_eq!(
        mermaid(&page),
        graph,
        "docs/internals/architecture.md mermaid chart"
    );
    let by_folder: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .map(|(p, deps)| {
            let deps = deps.iter().map(|d| folders[d].clone()).collect();
            (folders[p].clone(), deps)
        })
        .collect();
    assert_eq!(
        text_list(&page),
        by_folder,
        "docs/internals/architecture.md text list"
    );
}

#[test]
fn every_crate_folder_is_its_package_name() {
    let (_, folders) = metadata();
    for (package, folder) in folders {
        assert_eq!(folder, folder_for(&package), "{package}");
    }
}

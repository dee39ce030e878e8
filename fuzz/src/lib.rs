//! What each cargo-fuzz target does with one input: the real entry point that reads that kind
//! of user input. Refusals are fine; a panic, hang or blow-up is a bug. The targets in
//! `fuzz_targets/` call these (`store_lines` the one in `live.rs`, which needs kk-live);
//! `crates/cli/tests/it/fuzz_corpus.rs` includes this very file and `live.rs` and replays
//! `fuzz/corpus/<target>/` plus seeded mutations on stable Rust, so the two cannot drift.
//! Only kk crates here: the CLI's tests build it without libFuzzer.

use std::sync::OnceLock;

use kk_catalog::{Catalog, OfferingConfig};
use kk_sim::{LoadOptions, SourceFile};

/// What a target does with one input.
pub type Entry = fn(&[u8]);

/// The targets by name (the `fuzz/corpus/` directories), with their entry.
pub const TARGETS: &[(&str, Entry)] = &[
    ("spec", spec),
    ("manifests", manifests),
    ("plan_scenario", plan_scenario),
    ("disruption_state", disruption_state),
    ("kubeconfig", kubeconfig),
];

/// A spec file: `kk_spec::parse_spec` (YAML, the typed spec, validation, warnings), then
/// `validate` and `warnings` again on what parsed. Non-UTF-8 is skipped (the CLI refuses it
/// before parsing).
pub fn spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(loaded) = kk_spec::parse_spec(text, "fuzz.yaml") {
        let _ = kk_spec::validate(&loaded.spec);
        let _ = kk_spec::warnings(&loaded.spec);
    }
}

/// One `lint` input: `Input::from_bytes` → `kk_lint::lint` (loader, embedded Kubean YAML,
/// every rule) → every output format.
pub fn manifests(data: &[u8]) {
    use kk_lint::output::{self, Format};
    use kk_lint::{Config, Input};
    if let Ok(input) = Input::from_bytes("fuzz.yaml", data.to_vec())
        && let Ok(report) = kk_lint::lint(&[input], &Config::default())
    {
        for format in [Format::Human, Format::Json, Format::Sarif] {
            let _ = output::render(&report, format);
        }
    }
}

/// `plan`'s inputs: the Karpenter oracle's scenario JSON (`kk_sim::scenario::read`) and the
/// same text as `-f` pools, `-w` workloads and `--nodes` files at once (`kk_sim::load`'s
/// readers, against the default EC2 catalog).
pub fn plan_scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = kk_sim::scenario::read(text);
    let file = [SourceFile::new("fuzz.yaml", text)];
    let _ = kk_sim::load_with_catalog(
        &file,
        &file,
        &file,
        &LoadOptions::default(),
        ec2_catalog().clone(),
    );
}

/// `plan --disrupt`'s cluster state: `kk_sim::disrupt::load` of one file; JSON also as the
/// oracle's disruption scenario (`kk_sim::disrupt::scenario::read`).
pub fn disruption_state(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = [SourceFile::new("fuzz.yaml", text)];
    let _ = kk_sim::disrupt::load(&file, &LoadOptions::default(), Some(ec2_catalog().clone()));
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let _ = kk_sim::disrupt::scenario::read(&v);
    }
}

/// A kubeconfig the spec's `ca.kubeconfig` names: `kk_spec::ca::kubeconfig_ca` (the current
/// context's cluster, and a named one), then the CA bundle it holds (`ClusterCa::from_pem`).
pub fn kubeconfig(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for cluster in [None, Some("kubernetes")] {
        if let Ok(kk_spec::ca::KubeconfigCa::Data(pem)) = kk_spec::ca::kubeconfig_ca(text, cluster)
        {
            let _ = kk_spec::ca::ClusterCa::from_pem(&pem);
        }
    }
}

/// The default EC2 catalog (`LoadOptions::default()`'s, the one `plan` and `plan --disrupt`
/// build when no zones or spot fraction are given), built once.
fn ec2_catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog::aws(&OfferingConfig::default()).expect("the EC2 catalog"))
}

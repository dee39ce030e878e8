//! Property tests of the loader and every rule on arbitrary input, the fast CI companion of
//! the cargo-fuzz target `manifests` (`fuzz/`, docs/internals/fuzzing.md): random bytes, YAML-ish
//! text built from Kubernetes vocabulary, and mutated lint fixtures (half-valid objects) go
//! through the same entry as the fuzzer (`Input::from_bytes` → `kk_lint::lint` → every output
//! format). Each case must not panic and must finish within a bound.

use std::fs;
use std::path::Path;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use kk_lint::output::{self, Format};
use kk_lint::{Config, Input};
use proptest::prelude::*;

/// Generous for a debug build on a busy 2-core machine: this catches hangs and blow-ups.
const LIMIT: Duration = Duration::from_secs(20);

/// What the fuzz target does with one input.
fn lint_bytes(bytes: Vec<u8>) {
    let started = Instant::now();
    if let Ok(input) = Input::from_bytes("fuzz.yaml", bytes)
        && let Ok(report) = kk_lint::lint(&[input], &Config::default())
    {
        for format in [Format::Human, Format::Json, Format::Sarif] {
            let _ = output::render(&report, format);
        }
    }
    let elapsed = started.elapsed();
    assert!(elapsed < LIMIT, "one input took {elapsed:?}");
}

/// The lint fixtures: real manifests to mutate.
static FIXTURES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/lint");
    let mut texts = Vec::new();
    let mut dirs: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for d in dirs {
        for name in ["fail.yaml", "pass.yaml"] {
            if let Ok(text) = fs::read_to_string(d.join(name)) {
                texts.push(text);
            }
        }
    }
    assert!(!texts.is_empty(), "no fixtures under {}", dir.display());
    texts
});

const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "spec",
    "template",
    "requirements",
    "key",
    "operator",
    "values",
    "minValues",
    "taints",
    "effect",
    "tolerations",
    "nodeSelector",
    "nodeClassRef",
    "limits",
    "nvidia.com/gpu",
    "resources",
    "containers",
    "image",
    "blockDeviceMappings",
    "ebs",
    "volumeSize",
    "encrypted",
    "rootVolume",
    "deviceName",
    "amiFamily",
    "amiSelectorTerms",
    "alias",
    "userData",
    "data",
    "hosts.yml",
    "group_vars.yml",
    "settings",
    "controller",
    "clusterEndpoint",
    "remove_anonymous_access",
    "supplementary_addresses_in_ssl_keys",
    "affinity",
    "nodeAffinity",
    "nodeSelectorTerms",
    "matchExpressions",
];

const SCALARS: &[&str] = &[
    "karpenter.sh/v1",
    "karpenter.k8s.aws/v1",
    "kubean.io/v1alpha1",
    "v1",
    "apps/v1",
    "batch/v1",
    "NodePool",
    "EC2NodeClass",
    "ConfigMap",
    "Deployment",
    "DaemonSet",
    "CronJob",
    "Pod",
    "Cluster",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "NoSchedule",
    "g6",
    "m6i.lrage",
    "karpenter.k8s.aws/instance-family",
    "node.kubernetes.io/instance-type",
    "20Gi",
    "1",
    "0",
    "-1",
    "true",
    "yes",
    "null",
    "~",
    "\"\"",
    "[]",
    "{}",
    "|",
    ">-",
    "&a",
    "*a",
    "!!str",
    "https://api.x:6443",
    "kubeadm join $EP",
    "\"\\u00e9\"",
    "ünïcödé",
];

/// YAML-ish text: lines of vocabulary keys, scalars, list dashes and indentation.
fn yamlish() -> impl Strategy<Value = String> {
    let line = (
        0usize..8,
        any::<bool>(),
        prop::sample::select(KEYS),
        prop::option::of(prop::sample::select(SCALARS)),
        0u8..12,
    )
        .prop_map(|(indent, dash, key, value, special)| match special {
            0 => "---".to_owned(),
            1 => format!("{}- {}", " ".repeat(indent * 2), value.unwrap_or("x")),
            2 => format!("{}{key}: |", " ".repeat(indent * 2)),
            _ => format!(
                "{}{}{key}:{}",
                " ".repeat(indent * 2),
                if dash { "- " } else { "" },
                value.map(|v| format!(" {v}")).unwrap_or_default()
            ),
        });
    prop::collection::vec(line, 0..60).prop_map(|lines| lines.join("\n") + "\n")
}

/// One edit of a fixture's lines.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize),
    Duplicate(usize),
    Indent(usize, bool),
    Replace(usize, &'static str),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Duplicate),
        (any::<usize>(), any::<bool>()).prop_map(|(i, more)| Edit::Indent(i, more)),
        (any::<usize>(), prop::sample::select(SCALARS)).prop_map(|(i, s)| Edit::Replace(i, s)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

/// A fixture with its lines edited: mostly valid YAML of half-valid objects.
fn mutated() -> impl Strategy<Value = String> {
    (any::<usize>(), prop::collection::vec(edit(), 1..8)).prop_map(|(which, edits)| {
        let text = &FIXTURES[which % FIXTURES.len()];
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        for e in edits {
            if lines.is_empty() {
                break;
            }
            let n = lines.len();
            match e {
                Edit::Delete(i) => {
                    lines.remove(i % n);
                }
                Edit::Duplicate(i) => {
                    let line = lines[i % n].clone();
                    lines.insert(i % n, line);
                }
                Edit::Indent(i, more) => {
                    let line = &mut lines[i % n];
                    if more {
                        line.insert_str(0, "  ");
                    } else if let Some(rest) = line.strip_prefix("  ") {
                        *line = rest.to_owned();
                    }
                }
                Edit::Replace(i, scalar) => {
                    // Replace the value after the first `: `, or the whole line.
                    let line = &mut lines[i % n];
                    match line.find(": ") {
                        Some(at) => line.replace_range(at + 2.., scalar),
                        None => *line = scalar.to_owned(),
                    }
                }
                Edit::Truncate(i) => {
                    let line = &mut lines[i % n];
                    let cut = line
                        .char_indices()
                        .map(|(at, _)| at)
                        .nth(i % (line.chars().count() + 1))
                        .unwrap_or(line.len());
                    line.truncate(cut);
                }
            }
        }
        lines.join("\n") + "\n"
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        lint_bytes(bytes);
    }

    #[test]
    fn random_text_never_panics(text in ".{0,400}") {
        lint_bytes(text.into_bytes());
    }

    #[test]
    fn yamlish_text_never_panics(text in yamlish()) {
        lint_bytes(text.into_bytes());
    }

    #[test]
    fn mutated_fixtures_never_panic(text in mutated()) {
        lint_bytes(text.into_bytes());
    }
}

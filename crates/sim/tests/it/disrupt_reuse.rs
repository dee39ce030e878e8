//! `plan --disrupt` changes the prepared cluster in place after each command (the nodes the
//! command touched) instead of preparing it afresh: every whole run here must decide exactly
//! what the rebuilding run ([`disrupt::run_rebuilding`]) decides, on each scenario of the
//! disruption corpus (`testbed/karpenter-oracle/disrupt/scenarios/`) and on the fixtures.

use std::path::{Path, PathBuf};

use kk_sim::disrupt::{self, Options, clock, scenario};
use kk_sim::{LoadOptions, SourceFile};

use crate::disrupt::whole_run;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Both runs' reports as JSON (`Report` compares floats; the text is what `plan` prints).
fn both(state: &disrupt::ClusterState, opts: &Options) -> (String, String) {
    let reused = disrupt::run(state, opts).expect("runs");
    let rebuilt = disrupt::run_rebuilding(state, opts).expect("runs");
    (
        serde_json::to_string_pretty(&reused).unwrap(),
        serde_json::to_string_pretty(&rebuilt).unwrap(),
    )
}

#[test]
fn whole_runs_on_the_corpus_equal_the_rebuilding_runs() {
    let dir = root().join("testbed/karpenter-oracle/disrupt/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 100, "corpus of {} scenarios", files.len());
    let mut commands = 0;
    for file in &files {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let (state, mut opts) = scenario::read(&v).expect("scenario reads");
        opts.max_rounds = 1000;
        opts.first_pass_candidates = false;
        let (reused, rebuilt) = both(&state, &opts);
        assert_eq!(reused, rebuilt, "{}", file.display());
        commands += reused.matches("\"round\"").count();
    }
    // The corpus must exercise the change: many runs carry out more than one command.
    assert!(commands > files.len(), "{commands} commands in all");
}

#[test]
fn whole_runs_on_the_fixtures_equal_the_rebuilding_runs() {
    let fixtures = root().join("fixtures/disrupt");
    for (name, at) in [
        ("cluster.yaml", "0s"),
        ("cluster.yaml", "2h"),
        ("cluster.yaml", "800h"),
        ("gpu-idle.yaml", "0s"),
        ("gpu-idle.yaml", "3h"),
    ] {
        let text = std::fs::read_to_string(fixtures.join(name)).unwrap();
        let files = [SourceFile::new(name, text)];
        let state = disrupt::load(&files, &LoadOptions::default(), None).expect("state loads");
        let opts = whole_run(state.latest.unwrap() + clock::parse_duration(at).unwrap());
        let (reused, rebuilt) = both(&state, &opts);
        assert_eq!(reused, rebuilt, "{name} at +{at}");
    }
}

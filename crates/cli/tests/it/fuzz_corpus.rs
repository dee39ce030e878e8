//! The cargo-fuzz targets on stable Rust (docs/internals/fuzzing.md): every file of
//! `fuzz/corpus/<target>/` through the very function the target calls (`fuzz/src/lib.rs` and
//! `fuzz/src/live.rs` are included here, not copied), then a short bounded run of seeded
//! mutations of the corpus (byte flips, interesting bytes, truncation, deletion, duplication,
//! splicing two files). A panic is a failure; the message names the input to replay.
//! The long runs (libFuzzer, nightly) happen outside CI.

use std::path::{Path, PathBuf};
use std::time::Instant;

#[path = "../../../../fuzz/src/lib.rs"]
mod targets;

#[path = "../../../../fuzz/src/live.rs"]
mod live;

/// Every target: the library's and the one that needs kk-live.
fn all_targets() -> Vec<(&'static str, targets::Entry)> {
    let mut all = targets::TARGETS.to_vec();
    all.push(("store_lines", live::store_lines));
    all
}

/// Mutated inputs per target: a fixed number, sized so each test stays under about 10 s in a
/// debug build on 2 cores (the lint and plan targets read the embedded catalog and Kubean
/// YAML, so each of their inputs costs more).
fn mutations(target: &str) -> usize {
    match target {
        "manifests" => 50,
        "plan_scenario" => 150,
        "disruption_state" => 100,
        "spec" => 1_000,
        _ => 2_000,
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                bytes,
            )
        })
        .collect();
    files.sort();
    files
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that change how YAML, JSON and `KEY=value` lines read.
const INTERESTING: &[u8] = b":-{}[]\"'#&*!|>%@`,=\n\t 0\\\x00\xff";

/// One input from the corpus: one to four mutations of one file.
fn mutate(rng: &mut Rng, files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut data = files[rng.below(files.len())].1.clone();
    for _ in 0..=rng.below(4) {
        let len = data.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => data.truncate(rng.below(len + 1)),
            3 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(64)).min(len);
                data.drain(start..end);
            }
            4 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(256)).min(len);
                let chunk = data[start..end].to_vec();
                let at = rng.below(len + 1);
                data.splice(at..at, chunk);
            }
            5 => {
                let other = &files[rng.below(files.len())].1;
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            _ => {
                let at = rng.below(len + 1);
                data.insert(at, INTERESTING[rng.below(INTERESTING.len())]);
            }
        }
    }
    data
}

/// Runs `entry` on `data`; on a panic, writes the input under the target directory and fails
/// naming it (replay: `cargo +nightly fuzz run <target> <file>`).
fn run_one(target: &str, entry: targets::Entry, what: &str, data: &[u8]) {
    if std::panic::catch_unwind(|| entry(data)).is_err() {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes");
        std::fs::create_dir_all(&dir).expect("crash dir");
        let path = dir.join(format!("{target}-{}", what.replace('/', "_")));
        std::fs::write(&path, data).expect("crash input");
        panic!("{target}: {what} panicked; input at {}", path.display());
    }
}

#[test]
fn every_target_has_a_corpus() {
    for (target, _) in all_targets() {
        assert!(!corpus(target).is_empty(), "fuzz/corpus/{target} is empty");
    }
    let on_disk: Vec<String> = std::fs::read_dir(corpus_dir(""))
        .expect("fuzz/corpus")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for dir in on_disk {
        assert!(
            all_targets().iter().any(|(t, _)| *t == dir),
            "fuzz/corpus/{dir} belongs to no target"
        );
    }
}

/// Replays the target's corpus, then its fixed number of seeded mutations.
fn replay_and_mutate(target: &str) {
    let started = Instant::now();
    let (_, entry) = all_targets()
        .into_iter()
        .find(|(t, _)| *t == target)
        .expect("a target");
    let files = corpus(target);
    for (name, data) in &files {
        run_one(target, entry, name, data);
    }
    let mut rng = Rng(target.bytes().fold(0x6b6b_5f66_757a_7a00, |h, b| {
        h.rotate_left(7) ^ u64::from(b)
    }));
    for n in 0..mutations(target) {
        let data = mutate(&mut rng, &files);
        run_one(target, entry, &format!("mutation-{n}"), &data);
    }
    eprintln!(
        "{target}: {} corpus files, {} mutations, {:.1?}",
        files.len(),
        mutations(target),
        started.elapsed()
    );
}

#[test]
fn spec() {
    replay_and_mutate("spec");
}

#[test]
fn manifests() {
    replay_and_mutate("manifests");
}

#[test]
fn plan_scenario() {
    replay_and_mutate("plan_scenario");
}

#[test]
fn disruption_state() {
    replay_and_mutate("disruption_state");
}

#[test]
fn store_lines() {
    replay_and_mutate("store_lines");
}

#[test]
fn kubeconfig() {
    replay_and_mutate("kubeconfig");
}

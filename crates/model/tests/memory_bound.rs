//! The attack of issue #47 ("memory bombs still pass"), performed: a 69 KB spec under every
//! loader budget (values, bytes, depth, input size) whose aliases expand to 1.9 million values,
//! each under a path of 58 keys of 1,000 characters. A loader that keeps a copy of each value's
//! path asks for ~110 GB; this one must stay under 256 MB. Then the same values under anchors
//! nested 60 deep, each holding a copy for its aliases.
//!
//! Its own test binary: the counting allocator sees the whole process, so no other test may
//! allocate in it while the peak is measured.

use std::alloc::System;

use cap::Cap;
use kk_model::FieldPath;
use kk_model::yaml::{LoadLimits, Pos, load_documents, load_documents_unlocated};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// The most the process may hold at once while it loads the bomb.
const CEILING: usize = 256 * 1024 * 1024;

const KEYS: usize = 58;
const KEY_LEN: usize = 1_000;
const ITEMS: usize = 1_000;
const ALIASES: usize = 1_900;

/// 58 nested block mappings, keys of 1,000 characters; the innermost value is a flow sequence
/// of an anchored 1,000-item sequence and 1,900 aliases to it, all on the last line.
fn bomb() -> String {
    let mut text = String::new();
    for level in 0..KEYS {
        let key = format!("{level:02}{}", "k".repeat(KEY_LEN - 2));
        text.push_str(&"  ".repeat(level));
        text.push_str(&key);
        text.push(':');
        text.push(if level + 1 == KEYS { ' ' } else { '\n' });
    }
    text.push_str("[&s [");
    text.push_str(&vec!["0"; ITEMS].join(","));
    text.push(']');
    text.push_str(&",*s".repeat(ALIASES));
    text.push_str("]\n");
    text
}

#[test]
fn alias_bombs_under_every_budget_load_in_bounded_memory() {
    let text = bomb();
    let limits = LoadLimits::default();
    // The bomb the issue describes: about 69 KB, under the input limit, and its values (the
    // anchored sequence and each alias's copy of it, the containers above) under the budget.
    let values = KEYS + 1 + (ALIASES + 1) * (ITEMS + 1);
    println!("bomb: {} bytes, {values} values", text.len());
    assert!((60_000..80_000).contains(&text.len()), "{}", text.len());
    assert!(text.len() <= limits.max_bytes);
    assert!(values < limits.max_nodes, "{values}");
    assert!(KEYS + 2 < limits.max_depth);
    // Past four times the ceiling allocation fails and the process aborts ("memory allocation
    // of N bytes failed"): the old loader's ~110 GB never reach the machine.
    ALLOCATOR
        .set_limit(4 * CEILING)
        .expect("little is allocated yet");

    let docs = load_documents(&text, limits).expect("under every budget");
    let leaf = (0..KEYS).fold(FieldPath::root(), |path, level| {
        path.key(&format!("{level:02}{}", "k".repeat(KEY_LEN - 2)))
    });
    let items = kk_model::yaml::get(&docs[0].value, &leaf)
        .and_then(|v| v.as_array())
        .map(Vec::len);
    assert_eq!(items, Some(ALIASES + 1));
    // A value an alias copied is where the alias is written: the last line, its column.
    let last = text.lines().count();
    let alias_col = text.lines().last().unwrap().find("*s").unwrap() + 1;
    assert_eq!(
        docs[0].pos(&leaf.index(1).index(7)),
        Pos {
            line: last,
            col: alias_col
        }
    );
    assert_eq!(docs[0].key_pos(&leaf).line, KEYS);
    drop(docs);
    let located = ALLOCATOR.max_allocated();

    let docs = load_documents_unlocated(&text, limits).expect("under every budget");
    assert_eq!(docs.len(), 1);
    drop(docs);
    let unlocated = ALLOCATOR.max_allocated();

    // The same values under anchors nested 60 deep, each of which kept a copy of what it
    // holds for its aliases (~9 GB): the copies count against the value budget now, and the
    // innermost anchor is refused.
    let mut text = format!("big: &b [{}]\nx: ", vec!["0"; ITEMS].join(","));
    for level in 0..60 {
        text.push_str(&format!("&a{level} ["));
    }
    text.push_str("*b");
    text.push_str(&",*b".repeat(ALIASES - 1));
    text.push_str(&"]".repeat(60));
    text.push('\n');
    println!("nested anchors: {} bytes", text.len());
    for located in [true, false] {
        let read = if located {
            load_documents
        } else {
            load_documents_unlocated
        };
        let err = read(&text, limits).expect_err("over the value budget");
        assert!(
            err.message.contains("values (alias expansion bomb?)"),
            "{err}"
        );
        assert_eq!(err.pos.line, 2);
    }
    let peak = ALLOCATOR.max_allocated();
    println!(
        "peak allocated: {:.1} MB located, {:.1} MB unlocated, {:.1} MB with nested anchors",
        located as f64 / 1e6,
        unlocated as f64 / 1e6,
        peak as f64 / 1e6
    );
    assert!(
        peak <= CEILING,
        "peak {peak} bytes, over the ceiling of {CEILING}"
    );
}

//! Every fixture in fixtures/specs/invalid states, in `# expect:` lines, exactly the
//! errors (line:col, field path, message) the loader must report for it.

use std::path::PathBuf;

use kk_spec::parse_spec;

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn invalid_specs_report_each_problem_at_its_position() {
    let files = fixtures("invalid");
    assert!(
        files.len() >= 10,
        "need at least 10 invalid fixtures, have {}",
        files.len()
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let expected: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(str::to_owned)
            .collect();
        assert!(
            !expected.is_empty(),
            "{}: no # expect: lines",
            path.display()
        );
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let errors = parse_spec(&text, &name).expect_err(&name);
        let actual: Vec<String> = errors
            .iter()
            .map(|e| {
                let shown = e.to_string();
                shown
                    .strip_prefix(&format!("{name}:"))
                    .unwrap_or(&shown)
                    .to_owned()
            })
            .collect();
        assert_eq!(actual, expected, "{name}");
        for e in &errors {
            assert!(
                e.pos.is_some_and(|p| p.line >= 1 && p.col >= 1),
                "{name}: {e} has no position"
            );
        }
    }
}

#[test]
fn valid_fixtures_parse() {
    let files = fixtures("");
    assert!(files.len() >= 3);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        if let Err(errors) = parse_spec(&text, &name) {
            panic!(
                "{}",
                errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

#[test]
fn a_second_document_is_refused() {
    let text = format!("{}---\n{}", kk_spec::EXAMPLE, kk_spec::EXAMPLE);
    let errors = parse_spec(&text, "two.yaml").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .message
            .contains("expected one ElasticCluster document, found 2")
    );
}

#[test]
fn binary_garbage_is_one_error() {
    let text = "\u{0}\u{1}\u{2}binary\u{7f}: [";
    let errors = parse_spec(text, "bin").unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
}

/// A pinned patch older than the versions table's newest of its minor warns (the spec still
/// loads) at the field that pins it, with the fix; current pins warn about nothing.
#[test]
fn stale_patches_warn_at_their_field_and_current_ones_do_not() {
    let loaded = parse_spec(kk_spec::EXAMPLE, "example.yaml").unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let stale = kk_spec::EXAMPLE
        .replace("devicePluginVersion: v0.20.0", "devicePluginVersion: v0.17.0")
        .replace("version: 1.15.2 ", "version: 1.14.1 ")
        .replace(
            "  controller:                     # the join-token",
            "  images:\n    cloud-controller-manager: {tag: v1.35.0}\n  controller:                     # the join-token",
        );
    assert_ne!(stale, kk_spec::EXAMPLE);
    let loaded = parse_spec(&stale, "stale.yaml").unwrap_or_else(|e| panic!("{e:?}"));
    let warnings: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    let line = |needle: &str| {
        stale
            .lines()
            .position(|l| l.contains(needle))
            .map(|i| i + 1)
            .unwrap()
    };
    assert_eq!(
        warnings,
        [
            format!(
                "stale.yaml:{}:14: spec.karpenter.version: karpenter 1.14.1 is older than 1.14.3, the newest known patch of 1.14: set 1.14.3",
                line("version: 1.14.1")
            ),
            format!(
                "stale.yaml:{}:37: spec.images.cloud-controller-manager.tag: cloud-controller-manager v1.35.0 is older than v1.35.3, the newest known patch of 1.35 (v1.35.0: lacks the nil-State fix (#1365)): set v1.35.3",
                line("tag: v1.35.0")
            ),
            format!(
                "stale.yaml:{}:26: spec.gpu.devicePluginVersion: nvidia-device-plugin v0.17.0 is older than v0.17.4, the newest known patch of 0.17: set v0.17.4",
                line("devicePluginVersion")
            ),
        ]
    );
}

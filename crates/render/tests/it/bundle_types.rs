//! Each bundle file knows what it is: manifests keep the objects they were written from, Helm
//! values are never applied, and a bundle read back from disk is typed by content, with no
//! file skipped.

use std::collections::BTreeMap;

use kk_render::{Bundle, FileKind, render};
use kk_spec::{EXAMPLE, parse_spec};

fn example() -> Bundle {
    let cluster = parse_spec(EXAMPLE, "example").unwrap().spec;
    let pem = kk_render::inline_ca_pem(&cluster).unwrap().unwrap();
    render(&cluster, &pem).unwrap()
}

#[test]
fn rendered_files_carry_their_kind_and_objects() {
    let bundle = example();
    assert_eq!(
        bundle.kind("karpenter/values.yaml"),
        Some(FileKind::HelmValues)
    );
    assert_eq!(
        bundle.kind("cloud/ebs-csi-values.yaml"),
        Some(FileKind::HelmValues)
    );
    assert_eq!(bundle.kind("ORDER.md"), Some(FileKind::Document));
    assert_eq!(
        bundle.kind("kubean/3-cluster.yaml"),
        Some(FileKind::Manifest)
    );
    // Every file has a kind; every YAML manifest's objects are the ones its text holds.
    for (path, text) in &bundle.files {
        let kind = bundle
            .kind(path)
            .unwrap_or_else(|| panic!("{path}: no kind"));
        if kind == FileKind::Document {
            continue;
        }
        let parsed: Vec<_> = kk_model::yaml::load_documents(text, Default::default())
            .unwrap()
            .into_iter()
            .map(|d| d.value)
            .collect();
        assert_eq!(bundle.objects(path), parsed.as_slice(), "{path}");
    }
    // Helm values never reach apply.
    let manifests = bundle.manifests();
    assert!(!manifests.is_empty());
    assert!(
        manifests
            .iter()
            .all(|(path, v)| bundle.kind(path) == Some(FileKind::Manifest)
                && v.get("kind").is_some())
    );
}

#[test]
fn a_bundle_read_back_from_files_is_the_rendered_one() {
    let rendered = example();
    let yaml: BTreeMap<String, String> = rendered
        .files
        .iter()
        .filter(|(p, _)| p.ends_with(".yaml"))
        .map(|(p, t)| (p.clone(), t.clone()))
        .collect();
    let read = Bundle::from_files(yaml).unwrap();
    assert_eq!(read.manifests(), rendered.manifests());
    assert_eq!(
        read.kind("karpenter/values.yaml"),
        Some(FileKind::HelmValues)
    );
}

#[test]
fn a_file_that_does_not_parse_or_mixes_kinds_is_an_error_not_skipped() {
    let broken = BTreeMap::from([("cloud/x.yaml".to_owned(), "kind: [unclosed\n".to_owned())]);
    let e = Bundle::from_files(broken).unwrap_err();
    assert!(e.path.starts_with("cloud/x.yaml:"), "{e}");

    let mixed = BTreeMap::from([(
        "gpu/mixed.yaml".to_owned(),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nreplicas: 2\n".to_owned(),
    )]);
    let e = Bundle::from_files(mixed).unwrap_err();
    assert_eq!(e.path, "gpu/mixed.yaml");

    let json = BTreeMap::from([(
        "iam/controller-policy.json".to_owned(),
        "{\n  \"Version\": \"2012-10-17\",\n  \"Statement\": [\n}\n".to_owned(),
    )]);
    let e = Bundle::from_files(json).unwrap_err();
    assert_eq!(e.path, "iam/controller-policy.json:4:1", "{e}");
    assert!(!e.message.contains(" at line "), "{e}");
}

/// apply reads the IAM and interruption documents as the values render wrote them; a bundle
/// read back from files parses each JSON file once, to the same values.
#[test]
fn json_documents_are_kept_as_values() {
    let rendered = example();
    let json: Vec<&String> = rendered
        .files
        .keys()
        .filter(|p| p.ends_with(".json"))
        .collect();
    assert!(json.iter().any(|p| p.as_str() == "iam/node-role.json"));
    let read = Bundle::from_files(rendered.files.clone()).unwrap();
    for path in json {
        let value = rendered.json(path).unwrap_or_else(|| panic!("{path}"));
        let parsed: serde_json::Value = serde_json::from_str(&rendered.files[path]).unwrap();
        assert_eq!(value, &parsed, "{path}");
        assert_eq!(read.json(path), Some(value), "{path}");
    }
    assert_eq!(rendered.json("ORDER.md"), None);
}

/// Render says which cluster each file goes to: Kubean's objects to the management cluster,
/// the rest to the new one. apply routes by this and nothing else.
#[test]
fn each_manifest_names_its_cluster() {
    use kk_render::Target;
    let bundle = example();
    let mut management = 0;
    for (path, object) in bundle.manifests() {
        let kubean = object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("kubean.io/"));
        match Bundle::target(&path) {
            Target::Management => {
                management += 1;
                assert!(path.starts_with("kubean/"), "{path}");
            }
            Target::NewCluster => assert!(!kubean, "{path} holds a Kubean object"),
        }
    }
    assert!(management >= 3, "{management}");
}

/// The Helm releases are typed entries: their values files are in the bundle, and ORDER.md
/// shows exactly the command apply would run.
#[test]
fn helm_releases_are_typed_and_order_md_shows_their_commands() {
    let bundle = example();
    let releases = bundle.helm_releases();
    let names: Vec<&str> = releases.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["aws-ebs-csi-driver", "karpenter"]);
    let order = &bundle.files["ORDER.md"];
    for r in releases {
        assert_eq!(
            bundle.kind(&r.values_file),
            Some(FileKind::HelmValues),
            "{r:?}"
        );
        assert!(order.contains(&r.command_line()), "{}", r.command_line());
    }
    assert_eq!(
        releases[1].version,
        kk_spec::versions::default_version("karpenter")
    );
    let read = Bundle::from_files(bundle.files.clone()).unwrap();
    assert!(
        read.helm_releases().is_empty(),
        "a bundle read back from files names no chart"
    );
}

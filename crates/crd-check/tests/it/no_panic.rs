//! Arbitrary input never panics: random specs for every kind, and valid fixtures with one value
//! replaced by random JSON (so that CEL rules run on odd but schema-valid shapes too).

use std::fs;
use std::path::Path;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Field names the CRDs use, so random objects reach deep into the schemas.
const KEYS: &[&str] = &[
    "spec",
    "template",
    "metadata",
    "labels",
    "requirements",
    "key",
    "operator",
    "values",
    "minValues",
    "disruption",
    "budgets",
    "nodes",
    "schedule",
    "duration",
    "consolidateAfter",
    "limits",
    "cpu",
    "amiSelectorTerms",
    "alias",
    "id",
    "tags",
    "name",
    "role",
    "instanceProfile",
    "amiFamily",
    "blockDeviceMappings",
    "ebs",
    "rootVolume",
    "volumeSize",
    "snapshotID",
    "kubelet",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "kubeReserved",
    "networkInterfaces",
    "deviceIndex",
    "replicas",
    "weight",
    "nodeClassRef",
    "taints",
    "hostsConfRef",
    "preHook",
    "action",
    "x",
];

const WORDS: &[&str] = &[
    "al2023@latest",
    "ubuntu@v1",
    "windows2022@v1",
    "In",
    "Gt",
    "Exists",
    "5m",
    "Never",
    "10%",
    "ami-1",
    "kubernetes.io/hostname",
    "karpenter.sh/x",
    "Custom",
    "WhenEmpty",
    "1",
    "-1",
    "",
    "memory.available",
    "interface",
    "efa-only",
    "@",
    "1Gi",
];

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-z0-9@./%-]{0,10}".prop_map(Value::String),
        prop::sample::select(WORDS).prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..5).prop_map(|kvs| {
                Value::Object(
                    kvs.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

fn kinds() -> Vec<(String, String)> {
    kk_crd_check::known_kinds()
}

fn valid_fixtures() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid");
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| serde_saphyr::from_str(&fs::read_to_string(f).unwrap()).unwrap())
        .collect()
}

/// JSON pointers to every value inside `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(c, p, out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(c, p, out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn random_specs_never_panic(kind in 0usize..7, spec in arb_json(), root_extra in arb_json()) {
        let (api_version, kind) = kinds()[kind % kinds().len()].clone();
        let object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
                            "spec": spec, "extra": root_extra});
        let violations = kk_crd_check::validate(&object);
        prop_assert!(violations.is_ok());
    }

    #[test]
    fn mutated_fixtures_never_panic(which in 0usize..16, at in any::<prop::sample::Index>(), value in arb_json()) {
        let fixtures = valid_fixtures();
        let mut object = fixtures[which % fixtures.len()].clone();
        let mut ptrs = Vec::new();
        pointers(&object, String::new(), &mut ptrs);
        let target = ptrs[at.index(ptrs.len())].clone();
        if let Some(slot) = object.pointer_mut(&target) {
            *slot = value;
        }
        let result = kk_crd_check::validate(&object);
        if target != "/apiVersion" && target != "/kind" {
            prop_assert!(result.is_ok(), "{result:?}");
        }
    }

    #[test]
    fn any_json_is_an_error_or_a_report(value in arb_json()) {
        let _ = kk_crd_check::validate(&value);
    }
}

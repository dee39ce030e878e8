//! ARNs follow `spec.aws.partition` (issue 47 item 11): doctor built its store ARN with
//! `arn:aws:`, which names nothing in `aws-us-gov` or `aws-cn`, so the policy it printed for its
//! own identity granted no read of the store there. Every ARN is now built by `kk_spec::arn`;
//! these tests render and ask doctor for an `aws-us-gov` spec and read every ARN back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const KEY_ARN: &str =
    "arn:aws-us-gov:kms:us-gov-west-1:111122223333:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
const WRITER_ARN: &str = "arn:aws-us-gov:iam::111122223333:role/kubean-karpenter-rotator";

/// The example in GovCloud (West), in `mode`, with a customer-managed store key.
fn gov_example(dir: &Path, mode: &str) -> PathBuf {
    let text = kk_spec::EXAMPLE
        .replace(
            "    region: us-east-1             # <AWS_REGION>\n",
            "    region: us-gov-west-1\n    partition: aws-us-gov\n",
        )
        .replace(
            "    mode: ssm                     # ssm | secrets-manager | static (labs only); ssm keeps the token out of userData\n    storeName: /kubean-karpenter/demo/join\n",
            &format!("    mode: {mode}\n    kms:\n      keyArn: {KEY_ARN}\n      writerArns: [{WRITER_ARN}]\n"),
        );
    assert!(
        text.contains("partition: aws-us-gov") && text.contains(KEY_ARN),
        "the example changed"
    );
    let spec = dir.join(format!("gov-{mode}.yaml"));
    std::fs::write(&spec, text).unwrap();
    spec
}

/// Every `arn:<partition>:` in `text`, as (partition, the ARN up to a delimiter).
fn arns(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("arn:") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| c.is_whitespace() || "\"',]}\\)".contains(c))
            .unwrap_or(tail.len());
        let arn = &tail[..end];
        if let Some(partition) = arn.split(':').nth(1) {
            out.push((partition.to_owned(), arn.to_owned()));
        }
        rest = &tail[4..];
    }
    out
}

/// Every file under `dir` (the ca_bundle tests read rendered bundles with it too).
pub(crate) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_govcloud_bundle_names_only_govcloud_arns() {
    for mode in ["ssm", "secrets-manager"] {
        let dir = tempfile::tempdir().unwrap();
        let spec = gov_example(dir.path(), mode);
        let out = dir.path().join("b");
        ok(&bin()
            .arg("render")
            .arg(&spec)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap());
        let mut found = Vec::new();
        for path in files(&out) {
            let text = std::fs::read_to_string(&path).unwrap();
            for (partition, arn) in arns(&text) {
                assert_eq!(partition, "aws-us-gov", "{}: {arn}", path.display());
                found.push(arn);
            }
        }
        // What the constructors build, each seen at least once.
        let store = if mode == "ssm" {
            "arn:aws-us-gov:ssm:us-gov-west-1:111122223333:parameter/kubean-karpenter/demo/join"
        } else {
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:111122223333:secret:kubean-karpenter/demo/join-??????"
        };
        for want in [
            store,
            "arn:aws-us-gov:iam::111122223333:role/KarpenterNodeRole-demo",
            "arn:aws-us-gov:iam::111122223333:instance-profile/*",
            "arn:aws-us-gov:iam::111122223333:root",
            "arn:aws-us-gov:iam::aws:policy/AmazonSSMManagedInstanceCore",
            "arn:aws-us-gov:sqs:us-gov-west-1:111122223333:demo",
            "arn:aws-us-gov:ssm:us-gov-west-1::parameter/aws/service/*",
            "arn:aws-us-gov:ec2:us-gov-west-1::image/*",
        ] {
            assert!(
                found.iter().any(|a| a == want),
                "{mode}: no {want} in {found:#?}"
            );
        }
    }
}

#[test]
fn doctor_asks_for_the_govcloud_store_arn() {
    for (mode, store) in [
        (
            "ssm",
            "arn:aws-us-gov:ssm:us-gov-west-1:111122223333:parameter/kubean-karpenter/demo/join",
        ),
        (
            "secrets-manager",
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:111122223333:secret:kubean-karpenter/demo/join-??????",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let spec = gov_example(dir.path(), mode);
        let text = ok(&bin()
            .args(["doctor", "--permissions", "-o", "json"])
            .arg(&spec)
            .output()
            .unwrap());
        let both: Value = serde_json::from_str(&text).unwrap();
        let statements = both["iamPolicy"]["Statement"].as_array().unwrap();
        let read = statements
            .iter()
            .find(|s| s["Sid"] == "ReadJoinStore")
            .unwrap_or_else(|| panic!("{mode}: no ReadJoinStore in {text}"));
        assert_eq!(read["Resource"], store, "{mode}");
        for (partition, arn) in arns(&text) {
            assert_eq!(partition, "aws-us-gov", "{mode}: {arn}");
        }
    }
}

//! `ami list|resolve` against the testbed's moto, whose SSM store carries the EKS-optimized AMI
//! public parameters (testbed/moto_seeded.py; the exact set is dumped to $KK_TESTBED_SSM_SEED),
//! and custom images registered in moto's EC2. Then seed 002's AMI workflow with our commands:
//! resolve the recommended release, pin it, and the spec still validates.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};

use kk_testkit::repo;
use serde_json::Value;

use crate::cli;

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The parameters moto serves in the testbed's region, as the testbed dumped them.
fn seed(tb: &kk_testkit::testbed::Testbed) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(&tb.env["KK_TESTBED_SSM_SEED"]).unwrap();
    let all: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_str(&text).unwrap();
    all[&tb.env["AWS_REGION"]].clone()
}

/// (minor, arch, variant) of every flavor the seed has.
fn flavors(seed: &BTreeMap<String, String>) -> BTreeSet<(String, String, String)> {
    seed.keys()
        .filter_map(|k| {
            let rest = k.strip_prefix("/aws/service/eks/optimized-ami/")?;
            let parts: Vec<&str> = rest.split('/').collect();
            Some((parts[0].into(), parts[2].into(), parts[3].into()))
        })
        .collect()
}

#[test]
fn list_and_resolve_match_every_seeded_release() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "ami_testbed") else {
        return;
    };
    let seed = seed(&tb);
    let all = flavors(&seed);
    assert!(all.len() >= 6, "{all:?}");
    for (minor, arch, variant) in &all {
        let base =
            format!("/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/{arch}/{variant}");
        let args = [
            "--kubernetes",
            minor.as_str(),
            "--arch",
            arch.as_str(),
            "--variant",
            variant.as_str(),
            "-o",
            "json",
        ];
        let listed = json_of(&cli(&tb, &[&["ami", "list"][..], &args[..]].concat()));
        let got: Vec<(String, String, bool)> = listed["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["parameter"].as_str().unwrap().to_owned(),
                    r["imageID"].as_str().unwrap().to_owned(),
                    r["recommended"].as_bool().unwrap(),
                )
            })
            .collect();
        let recommended_id = &seed[&format!("{base}/recommended/image_id")];
        let mut want: Vec<(String, String, bool)> = seed
            .iter()
            .filter(|(k, _)| k.starts_with(&base) && !k.contains("/recommended/"))
            .map(|(k, v)| (k.clone(), v.clone(), v == recommended_id))
            .collect();
        want.reverse(); // newest release first
        assert_eq!(got, want, "{base}");

        let resolved = json_of(&cli(&tb, &[&["ami", "resolve"][..], &args[..]].concat()));
        assert_eq!(resolved["imageID"], recommended_id.as_str());
        let release_version = &seed[&format!("{base}/recommended/release_version")];
        assert_eq!(resolved["releaseVersion"], release_version.as_str());
        let date = release_version.rsplit_once('-').unwrap().1;
        assert_eq!(resolved["alias"], format!("al2023@v{date}"));
    }
}

#[test]
fn a_dated_release_resolves_for_rollback_and_an_unknown_one_is_an_error() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "ami_testbed") else {
        return;
    };
    let seed = seed(&tb);
    let old = "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.36-v20260806/image_id";
    let resolved = json_of(&cli(
        &tb,
        &[
            "ami",
            "resolve",
            "--kubernetes",
            "1.36",
            "--variant",
            "nvidia",
            "--release",
            "v20260806",
            "-o",
            "json",
        ],
    ));
    assert_eq!(resolved["imageID"], seed[old].as_str());
    assert_eq!(resolved["recommended"], false);
    assert_eq!(resolved["alias"], "al2023@v20260806");

    let out = cli(
        &tb,
        &[
            "ami",
            "resolve",
            "--kubernetes",
            "1.36",
            "--release",
            "v20990101",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("AWS publishes no parameter /aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.36-v20990101/image_id"), "{stderr}");
    let out = cli(&tb, &["ami", "list", "--kubernetes", "1.99"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("recommended/release_version"));
}

/// Seed 002, step 1, with our commands: resolve the recommended NVIDIA release for the
/// cluster's Kubernetes version and pin it as `al2023@v<date>`.
#[test]
fn seed_002_resolve_then_pin() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "ami_testbed") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("cluster.yaml");
    let text = std::fs::read_to_string(repo().join("fixtures/specs/iam-eks.yaml"))
        .unwrap()
        .replace("al2023@v20260827", "al2023@v20260806");
    std::fs::write(&spec, &text).unwrap();
    let spec_arg = spec.to_str().unwrap();
    // The spec is in eu-west-1; the testbed's moto answers in any region.
    let resolved = json_of(&cli(
        &tb,
        &[
            "ami", "resolve", "--spec", spec_arg, "--pool", "eks-gpu", "-o", "json",
        ],
    ));
    let pool = &resolved["pools"][0];
    assert_eq!(pool["pin"]["alias"], "al2023@v20260806");
    assert_eq!(
        pool["resolved"]["variant"], "nvidia",
        "a GPU pool resolves the NVIDIA variant"
    );
    assert_eq!(pool["resolved"]["kubernetesMinor"], "1.35");
    let alias = pool["suggested"]["alias"].as_str().unwrap().to_owned();
    assert_eq!(alias, "al2023@v20260827");
    let release = alias.split_once('@').unwrap().1;
    let out = cli(
        &tb,
        &[
            "ami",
            "pin",
            spec_arg,
            "--pool",
            "eks-gpu",
            "--release",
            release,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&spec).unwrap(),
        text.replace("al2023@v20260806", "al2023@v20260827")
    );
    let out = cli(&tb, &["validate", spec_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Custom (kubeadm) images: by owner, name pattern and tag, with creation and deprecation dates.
#[test]
fn custom_images_by_owner_name_and_tag() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "ami_testbed") else {
        return;
    };
    let script = "import boto3, json, uuid
ec2 = boto3.client('ec2')
p = 'kk-ami-' + uuid.uuid4().hex[:8]
vpc = ec2.create_vpc(CidrBlock='10.9.0.0/16')['Vpc']['VpcId']
subnet = ec2.create_subnet(VpcId=vpc, CidrBlock='10.9.1.0/24')['Subnet']['SubnetId']
i = ec2.run_instances(ImageId='ami-12c6146b', InstanceType='m6i.large', MinCount=1, MaxCount=1, SubnetId=subnet)['Instances'][0]['InstanceId']
ids = []
for n, role in [('cpu', 'kubeadm'), ('gpu', 'kubeadm'), ('old', 'other')]:
    img = ec2.create_image(InstanceId=i, Name=p + '-' + n, TagSpecifications=[{'ResourceType': 'image', 'Tags': [{'Key': 'role', 'Value': role}, {'Key': 'batch', 'Value': p}]}])['ImageId']
    ids.append(img)
deprecated = False
try:
    ec2.enable_image_deprecation(ImageId=ids[0], DeprecateAt='2027-01-01T00:00:00Z')
    deprecated = True
except Exception:
    pass
ec2.terminate_instances(InstanceIds=[i])
print(json.dumps([p, ids, deprecated]))";
    let out = Command::new("python3")
        .envs(&tb.env)
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let prefix = v[0].as_str().unwrap();
    let ids: Vec<&str> = v[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();

    let by_name = json_of(&cli(
        &tb,
        &[
            "ami",
            "list",
            "--owner",
            "self",
            "--name",
            &format!("{prefix}-*"),
            "-o",
            "json",
        ],
    ));
    let got: BTreeSet<&str> = by_name["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["imageID"].as_str().unwrap())
        .collect();
    assert_eq!(got, ids.iter().copied().collect());
    for image in by_name["images"].as_array().unwrap() {
        assert!(
            !image["creationDate"].as_str().unwrap().is_empty(),
            "{image}"
        );
        assert_eq!(image["tags"]["batch"], prefix);
    }
    if v[2].as_bool().unwrap() {
        let first = by_name["images"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["imageID"] == ids[0])
            .unwrap();
        assert!(
            first["deprecationTime"]
                .as_str()
                .unwrap()
                .starts_with("2027-01-01"),
            "{first}"
        );
    } else {
        eprintln!("moto does not schedule image deprecation: deprecationTime not checked");
    }

    let by_tag = json_of(&cli(
        &tb,
        &[
            "ami",
            "list",
            "--tag",
            &format!("batch={prefix}"),
            "--tag",
            "role=kubeadm",
            "-o",
            "json",
        ],
    ));
    let got: BTreeSet<&str> = by_tag["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["imageID"].as_str().unwrap())
        .collect();
    assert_eq!(got, ids[..2].iter().copied().collect());

    let yaml = cli(
        &tb,
        &[
            "ami",
            "list",
            "--name",
            &format!("{prefix}-cpu"),
            "-o",
            "yaml",
        ],
    );
    assert!(yaml.status.success());
    assert!(String::from_utf8_lossy(&yaml.stdout).contains(ids[0]));
}

//! Node access to the join store, proven on the rendered IAM documents. moto does not
//! evaluate IAM policies (every call with any credentials succeeds), so these rows of the
//! attack table cannot be run against it; instead the rendered documents are evaluated here
//! with IAM's rules for identity policies in one account: an explicit Deny wins, then any
//! Allow, else the request is implicitly denied; `Action`/`NotAction`,
//! `Resource`/`NotResource`, `*` and `?` wildcards (actions case-insensitive).

use kk_spec::{ElasticCluster, JoinMode, parse_spec};
use serde_json::{Value, json};

use crate::iam::glob;

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Allow,
    ExplicitDeny,
    ImplicitDeny,
}

fn any_matches(list: &Value, text: &str, case_insensitive: bool) -> bool {
    let items: Vec<&str> = match list {
        Value::String(s) => vec![s],
        Value::Array(a) => a.iter().map(|v| v.as_str().unwrap()).collect(),
        other => panic!("not a string or list: {other}"),
    };
    items.iter().any(|p| {
        if case_insensitive {
            glob(&p.to_lowercase(), &text.to_lowercase())
        } else {
            glob(p, text)
        }
    })
}

fn applies(st: &Value, action: &str, resource: &str) -> bool {
    assert!(
        st.get("Condition").is_none(),
        "this evaluator does not model conditions: {st}"
    );
    let action_ok = match (st.get("Action"), st.get("NotAction")) {
        (Some(a), None) => any_matches(a, action, true),
        (None, Some(a)) => !any_matches(a, action, true),
        _ => panic!("exactly one of Action/NotAction: {st}"),
    };
    let resource_ok = match (st.get("Resource"), st.get("NotResource")) {
        (Some(r), None) => any_matches(r, resource, false),
        (None, Some(r)) => !any_matches(r, resource, false),
        _ => panic!("exactly one of Resource/NotResource: {st}"),
    };
    action_ok && resource_ok
}

fn evaluate(policies: &[Value], action: &str, resource: &str) -> Verdict {
    let statements: Vec<&Value> = policies
        .iter()
        .flat_map(|p| p["Statement"].as_array().unwrap())
        .filter(|s| applies(s, action, resource))
        .collect();
    if statements.iter().any(|s| s["Effect"] == "Deny") {
        Verdict::ExplicitDeny
    } else if statements.iter().any(|s| s["Effect"] == "Allow") {
        Verdict::Allow
    } else {
        Verdict::ImplicitDeny
    }
}

/// The parameter reads of the AWS managed policy AmazonSSMManagedInstanceCore, which the
/// node role carries for Session Manager: `ssm:GetParameter` and `ssm:GetParameters` on
/// `"Resource": "*"` (AWS Managed Policy Reference, AmazonSSMManagedInstanceCore).
fn ssm_managed_instance_core() -> Value {
    json!({ "Statement": [{ "Effect": "Allow", "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:UpdateInstanceInformation"], "Resource": "*" }] })
}

fn cluster(name: &str, mode: JoinMode) -> ElasticCluster {
    let mut c = parse_spec(kk_spec::EXAMPLE, "example").unwrap().spec;
    c.metadata.name = name.to_owned();
    c.spec.join.mode = mode;
    c.spec.join.store_name = None;
    if mode == JoinMode::Static {
        c.spec.join.token = Some("abcdef.0123456789abcdef".into());
        c.spec.join.allow_insecure_static = true;
    }
    c
}

/// Every identity policy on the rendered node role: the managed ones we model, and the inline ones.
fn node_policies(c: &ElasticCluster) -> Vec<Value> {
    let pem = kk_render::inline_ca_pem(c).unwrap().unwrap();
    let bundle = kk_render::render(c, &pem).unwrap();
    let role: Value = serde_json::from_str(&bundle.files["iam/node-role.json"]).unwrap();
    let mut out = Vec::new();
    for arn in role["managedPolicyArns"].as_array().unwrap() {
        let arn = arn.as_str().unwrap();
        if arn.ends_with("/AmazonSSMManagedInstanceCore") {
            out.push(ssm_managed_instance_core());
        } else {
            // Only the ECR pull policy is left; it grants no SSM or Secrets Manager reads.
            assert!(
                arn.ends_with("/AmazonEC2ContainerRegistryPullOnly"),
                "{arn}"
            );
        }
    }
    for (_, policy) in role["inlinePolicies"].as_object().unwrap() {
        out.push(policy.clone());
    }
    out
}

const ACCT: &str = "111122223333";

fn param(name: &str) -> String {
    format!(
        "arn:aws:ssm:us-east-1:{ACCT}:parameter/{}",
        name.trim_start_matches('/')
    )
}

fn secret(name: &str) -> String {
    format!("arn:aws:secretsmanager:us-east-1:{ACCT}:secret:{name}-AbCdEf")
}

#[test]
fn the_evaluator_follows_iams_rules() {
    assert!(glob("arn:*:x-??????", "arn:a:b:x-abcdef"));
    assert!(!glob("arn:*:x-??????", "arn:a:b:x-abcde"));
    let allow =
        json!({ "Statement": [{ "Effect": "Allow", "Action": "ssm:Get*", "Resource": "*" }] });
    let deny = json!({ "Statement": [{ "Effect": "Deny", "Action": "SSM:GetParameter", "NotResource": "arn:ok" }] });
    assert_eq!(
        evaluate(std::slice::from_ref(&allow), "ssm:GetParameter", "arn:x"),
        Verdict::Allow
    );
    assert_eq!(
        evaluate(&[allow.clone(), deny.clone()], "ssm:GetParameter", "arn:x"),
        Verdict::ExplicitDeny
    );
    assert_eq!(
        evaluate(&[allow, deny.clone()], "ssm:GetParameter", "arn:ok"),
        Verdict::Allow
    );
    assert_eq!(
        evaluate(&[deny], "ssm:PutParameter", "arn:x"),
        Verdict::ImplicitDeny
    );
}

#[test]
fn the_rendered_account_id_is_the_one_these_tests_use() {
    assert_eq!(cluster("demo", JoinMode::Ssm).spec.aws.account_id, ACCT);
}

/// Attack row "another cluster's node role reading the store" (SSM mode), and reading any
/// other parameter in the account through AmazonSSMManagedInstanceCore.
#[test]
fn a_node_reads_only_its_own_clusters_parameter() {
    let demo = node_policies(&cluster("demo", JoinMode::Ssm));
    let other = node_policies(&cluster("other", JoinMode::Ssm));
    let demo_store = param("/kubean-karpenter/demo/join");
    let other_store = param("/kubean-karpenter/other/join");
    assert_eq!(
        evaluate(&demo, "ssm:GetParameter", &demo_store),
        Verdict::Allow
    );
    assert_eq!(
        evaluate(&other, "ssm:GetParameter", &other_store),
        Verdict::Allow
    );
    for action in [
        "ssm:GetParameter",
        "ssm:GetParameters",
        "ssm:GetParametersByPath",
        "ssm:GetParameterHistory",
    ] {
        assert_eq!(
            evaluate(&other, action, &demo_store),
            Verdict::ExplicitDeny,
            "{action}"
        );
        assert_eq!(
            evaluate(&demo, action, &other_store),
            Verdict::ExplicitDeny,
            "{action}"
        );
        assert_eq!(
            evaluate(&demo, action, &param("/prod/db/password")),
            Verdict::ExplicitDeny,
            "{action}"
        );
    }
    // The public AMI parameters stay readable (the managed policy allows them).
    let ami = "arn:aws:ssm:us-east-1::parameter/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id";
    assert_eq!(evaluate(&demo, "ssm:GetParameter", ami), Verdict::Allow);
    // Without the Deny the managed policy alone lets another cluster's node read the store:
    // the attack this Deny stops.
    let without_deny: Vec<Value> = other
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if let Some(st) = p["Statement"].as_array_mut() {
                st.retain(|s| s["Effect"] != "Deny");
            }
            p
        })
        .collect();
    assert_eq!(
        evaluate(&without_deny, "ssm:GetParameter", &demo_store),
        Verdict::Allow
    );
}

#[test]
fn a_secrets_manager_node_reads_only_its_own_secret_and_no_parameters() {
    let demo = node_policies(&cluster("demo", JoinMode::SecretsManager));
    let other = node_policies(&cluster("other", JoinMode::SecretsManager));
    let demo_secret = secret("kubean-karpenter/demo/join");
    assert_eq!(
        evaluate(&demo, "secretsmanager:GetSecretValue", &demo_secret),
        Verdict::Allow
    );
    assert_ne!(
        evaluate(&other, "secretsmanager:GetSecretValue", &demo_secret),
        Verdict::Allow
    );
    assert_eq!(
        evaluate(
            &demo,
            "ssm:GetParameter",
            &param("/kubean-karpenter/other/join")
        ),
        Verdict::ExplicitDeny
    );
}

#[test]
fn a_static_mode_node_reads_no_parameter_of_the_account() {
    let demo = node_policies(&cluster("demo", JoinMode::Static));
    assert_eq!(
        evaluate(
            &demo,
            "ssm:GetParameter",
            &param("/kubean-karpenter/other/join")
        ),
        Verdict::ExplicitDeny
    );
}

/// Key-policy evaluation: statements apply when the `Principal` names the caller (or the
/// account root names every principal of the account, which is why ours does not grant use to
/// it) and every condition holds (StringEquals / StringLike on the request context).
fn evaluate_key_policy(
    policy: &Value,
    principal: &str,
    action: &str,
    context: &[(&str, &str)],
) -> Verdict {
    let holds = |cond: Option<&Value>| -> bool {
        let Some(cond) = cond else { return true };
        cond.as_object().unwrap().iter().all(|(op, pairs)| {
            pairs.as_object().unwrap().iter().all(|(key, want)| {
                let got = context.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
                let Some(got) = got else { return false };
                match op.as_str() {
                    "StringEquals" => any_matches_exact(want, got),
                    "StringLike" => any_matches(want, got, false),
                    other => panic!("condition operator {other} not modelled"),
                }
            })
        })
    };
    let mut verdict = Verdict::ImplicitDeny;
    for st in policy["Statement"].as_array().unwrap() {
        let principals = &st["Principal"]["AWS"];
        let names: Vec<&str> = match principals {
            Value::String(s) => vec![s],
            Value::Array(a) => a.iter().map(|v| v.as_str().unwrap()).collect(),
            other => panic!("principal {other}"),
        };
        if !names.contains(&principal) || !any_matches(&st["Action"], action, true) {
            continue;
        }
        if !holds(st.get("Condition")) {
            continue;
        }
        if st["Effect"] == "Deny" {
            return Verdict::ExplicitDeny;
        }
        verdict = Verdict::Allow;
    }
    verdict
}

fn any_matches_exact(list: &Value, text: &str) -> bool {
    match list {
        Value::String(s) => s == text,
        Value::Array(a) => a.iter().any(|v| v.as_str() == Some(text)),
        other => panic!("{other}"),
    }
}

fn with_kms(name: &str, mode: JoinMode) -> ElasticCluster {
    let mut c = cluster(name, mode);
    c.spec.join.kms = Some(kk_spec::JoinKms {
        key_arn: format!("arn:aws:kms:us-east-1:{ACCT}:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"),
        writer_arns: vec![format!("arn:aws:iam::{ACCT}:role/rotator-{name}")],
    });
    c
}

fn key_policy(c: &ElasticCluster) -> Value {
    let pem = kk_render::inline_ca_pem(c).unwrap().unwrap();
    let bundle = kk_render::render(c, &pem).unwrap();
    serde_json::from_str(&bundle.files["iam/join-store-kms-key-policy.json"]).unwrap()
}

/// The customer-managed key: only this cluster's node role decrypts, only through SSM, only
/// for this store; the rotator writes; the account (and so any IAM policy) cannot use it.
#[test]
fn the_store_key_decrypts_only_for_this_clusters_nodes_and_store() {
    let demo = with_kms("demo", JoinMode::Ssm);
    let policy = key_policy(&demo);
    let node = format!("arn:aws:iam::{ACCT}:role/{}", demo.spec.aws.node_role);
    let via = ("kms:ViaService", "ssm.us-east-1.amazonaws.com");
    let store = param("/kubean-karpenter/demo/join");
    let ctx = [via, ("kms:EncryptionContext:PARAMETER_ARN", store.as_str())];
    assert_eq!(
        evaluate_key_policy(&policy, &node, "kms:Decrypt", &ctx),
        Verdict::Allow
    );
    assert_eq!(
        evaluate_key_policy(&policy, &node, "kms:Encrypt", &ctx),
        Verdict::ImplicitDeny
    );
    // Another parameter under the same key, or a direct Decrypt call: refused.
    let other_store = param("/kubean-karpenter/other/join");
    let elsewhere = [
        via,
        ("kms:EncryptionContext:PARAMETER_ARN", other_store.as_str()),
    ];
    assert_eq!(
        evaluate_key_policy(&policy, &node, "kms:Decrypt", &elsewhere),
        Verdict::ImplicitDeny
    );
    assert_eq!(
        evaluate_key_policy(
            &policy,
            &node,
            "kms:Decrypt",
            &[("kms:EncryptionContext:PARAMETER_ARN", store.as_str())]
        ),
        Verdict::ImplicitDeny
    );
    // Another cluster's node role (another role name) and the account root cannot decrypt.
    let other = cluster("other", JoinMode::Ssm);
    assert_eq!(
        other.spec.aws.node_role, demo.spec.aws.node_role,
        "same example role name"
    );
    let foreign = format!("arn:aws:iam::{ACCT}:role/KarpenterNodeRole-other");
    assert_eq!(
        evaluate_key_policy(&policy, &foreign, "kms:Decrypt", &ctx),
        Verdict::ImplicitDeny
    );
    let root = format!("arn:aws:iam::{ACCT}:root");
    assert_eq!(
        evaluate_key_policy(&policy, &root, "kms:Decrypt", &ctx),
        Verdict::ImplicitDeny
    );
    assert_eq!(
        evaluate_key_policy(&policy, &root, "kms:PutKeyPolicy", &[]),
        Verdict::Allow
    );
    // The rotator writes.
    let writer = format!("arn:aws:iam::{ACCT}:role/rotator-demo");
    assert_eq!(
        evaluate_key_policy(&policy, &writer, "kms:GenerateDataKey", &ctx),
        Verdict::Allow
    );
    // Secrets Manager: the secret's ARN pattern and its service.
    let sm = with_kms("demo", JoinMode::SecretsManager);
    let policy = key_policy(&sm);
    let secret_arn = secret("kubean-karpenter/demo/join");
    let ctx = [
        ("kms:ViaService", "secretsmanager.us-east-1.amazonaws.com"),
        ("kms:EncryptionContext:SecretARN", secret_arn.as_str()),
    ];
    assert_eq!(
        evaluate_key_policy(&policy, &node, "kms:Decrypt", &ctx),
        Verdict::Allow
    );
}

#[test]
fn a_kms_key_needs_a_store_and_a_writer() {
    let mut c = with_kms("demo", JoinMode::Static);
    let problems = kk_spec::validate(&c);
    assert!(
        problems
            .iter()
            .any(|(p, _)| p.to_string() == "spec.join.kms"),
        "{problems:?}"
    );
    c = with_kms("demo", JoinMode::Ssm);
    c.spec.join.kms.as_mut().unwrap().writer_arns.clear();
    c.spec.join.kms.as_mut().unwrap().key_arn = "alias/mine".into();
    let problems: Vec<String> = kk_spec::validate(&c)
        .iter()
        .map(|(p, _)| p.to_string())
        .collect();
    assert!(
        problems.contains(&"spec.join.kms.keyArn".to_owned()),
        "{problems:?}"
    );
    assert!(
        problems.contains(&"spec.join.kms.writerArns".to_owned()),
        "{problems:?}"
    );
    // The rotator encrypts with it.
    let c = with_kms("demo", JoinMode::Ssm);
    let pem = kk_render::inline_ca_pem(&c).unwrap().unwrap();
    let bundle = kk_render::render(&c, &pem).unwrap();
    assert!(
        bundle.files["rotator/join-token-rotator.yaml"].contains(&format!(
            "--kms-key-id={}",
            c.spec.join.kms.unwrap().key_arn
        ))
    );
}

//! `joinMethod: iam` on the lab: the real aws-iam-authenticator server (v0.7.18), configured from
//! the rendered bundle, as the lab API server's token webhook; tokens made from the credentials
//! the lab's fake IMDS issues; the lab's STS (testbed/lab-kit/sts.py, test tooling) verifying
//! their SigV4 signatures. Every row of the attack table that a running system refuses is
//! performed here and seen refused (docs/guide/join-credentials.md, "Attack table: IAM join"); the
//! signature rows exercise the lab STS's verifier, the others the real authenticator and the
//! API server.

use crate::harness as lab;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use lab::{Lab, repo};
use serde_json::json;

/// The lab spec with the authenticator section (the lab's serving certificate) and one pool
/// that joins by IAM on the EKS AL2023 image the lab's moto knows.
fn iam_spec(text: String, serving_cert_b64: &str) -> String {
    let auth = format!(
        "  iamAuthenticator:\n    clusterID: lab\n    image: 602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/aws-iam-authenticator:v0.7.18\n    servingCertificate: {serving_cert_b64}\n"
    );
    let text = text.replacen("  pools:\n", &format!("{auth}  pools:\n"), 1);
    format!(
        "{text}    - name: workload-eks\n      type: cpu\n      joinMethod: iam\n      ami: {{ssmRelease: 1.36.3-20260827}}\n      instances:\n        families: [m6i]\n        sizes: [large]\n        arch: [amd64]\n      taints:\n        - {{key: eks, value: \"true\", effect: NoSchedule}}\n      limits: {{cpu: \"64\"}}\n      kubelet:\n        maxPods: 110\n"
    )
}

const ACCOUNT: &str = "123456789012";
const NODE_ROLE: &str = "KarpenterNodeRole-lab";

/// An identity the lab STS knows, with the credentials IMDS would hand its instance.
struct Principal {
    key_id: String,
    secret: String,
    session: String,
}

fn python(args: &[&str]) -> String {
    let out = Command::new("python3").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python3 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Registers `arn` (an assumed-role session) with the lab STS, with IMDS-style credentials
/// derived from `session` (an instance ID).
fn principal(lab: &Lab, account: &str, role: &str, session: &str) -> Principal {
    let kit = repo().join("testbed/lab-kit");
    let creds = python(&[
        "-c",
        &format!(
            "import sys, json; sys.path.insert(0, {kit:?}); import imds; print(json.dumps(imds.role_credentials({session:?})))",
            kit = kit.to_str().unwrap()
        ),
    ]);
    let v: Vec<String> = serde_json::from_str(&creds).unwrap();
    let file = lab.var("KK_LAB_STS_PRINCIPALS");
    let mut all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    all[&v[0]] = json!({
        "secret": v[1],
        "sessionToken": v[2],
        "arn": format!("arn:aws:sts::{account}:assumed-role/{role}/{session}"),
        "userId": format!("AROALAB{}:{session}", role.len()),
    });
    std::fs::write(&file, all.to_string()).unwrap();
    Principal {
        key_id: v[0].clone(),
        secret: v[1].clone(),
        session: v[2].clone(),
    }
}

/// A token from the test tool (botocore's signer, chosen clock/host/cluster).
fn crafted(p: &Principal, cluster: &str, extra: &[&str]) -> String {
    let tool = repo().join("testbed/lab-kit/iam_token.py");
    let mut args = vec![
        tool.to_str().unwrap(),
        "--key-id",
        &p.key_id,
        "--secret",
        &p.secret,
        "--session-token",
        &p.session,
        "--cluster-id",
        cluster,
    ];
    args.extend_from_slice(extra);
    python(&args)
}

/// A token from the real `aws eks get-token` (the command nodeadm's kubelet kubeconfig runs),
/// with the instance's credentials and no endpoint override: the URL names real STS.
fn eks_get_token(lab: &Lab, p: &Principal, cluster: &str) -> String {
    let aws = format!("{}/bin/aws", lab.var("KK_LAB_BIN"));
    let out = Command::new(aws)
        .args([
            "eks",
            "get-token",
            "--cluster-name",
            cluster,
            "--region",
            "us-east-1",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent")
        .env("AWS_ACCESS_KEY_ID", &p.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &p.secret)
        .env("AWS_SESSION_TOKEN", &p.session)
        .env("AWS_STS_REGIONAL_ENDPOINTS", "regional")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "aws eks get-token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "ExecCredential");
    v["status"]["token"].as_str().unwrap().to_owned()
}

fn review(lab: &Lab, token: &str) -> TokenReviewStatus {
    let api: Api<TokenReview> = Api::all(lab.client.clone());
    let tr = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: None,
        },
        ..Default::default()
    };
    lab.rt
        .block_on(api.create(&PostParams::default(), &tr))
        .unwrap()
        .status
        .unwrap()
}

fn refused(lab: &Lab, what: &str, token: &str) {
    let status = review(lab, token);
    assert_ne!(
        status.authenticated,
        Some(true),
        "{what}: authenticated as {:?}",
        status.user
    );
    eprintln!("refused: {what}");
}

fn decode(token: &str) -> String {
    use base64::Engine;
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.strip_prefix("k8s-aws-v1.").unwrap())
        .unwrap();
    String::from_utf8(b).unwrap()
}

fn encode(url: &str) -> String {
    use base64::Engine;
    format!(
        "k8s-aws-v1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
    )
}

fn start_authenticator(lab: &Lab) {
    let cert = lab.var("KK_LAB_SERVING_CERT_B64");
    let (_, bundle) = lab.render(|text| iam_spec(text, &cert));
    // The lab API server trusts the lab's serving certificate; the bundle's webhook kubeconfig
    // (what Kubespray writes from the vars) names the same one.
    let webhook =
        std::fs::read_to_string(bundle.join("authenticator/webhook-kubeconfig.conf")).unwrap();
    assert!(webhook.contains(&cert) && webhook.contains("https://127.0.0.1:21362/authenticate"));
    lab.lab(&["authenticator", bundle.to_str().unwrap()]);
}

#[test]
fn iam_tokens_authenticate_as_their_instance_and_every_attack_is_refused() {
    let Some(lab) = Lab::require_token_webhook(
        "iam_tokens_authenticate_as_their_instance_and_every_attack_is_refused",
    ) else {
        return;
    };
    start_authenticator(&lab);
    let node_a = "i-0aaaaaaaaaaaaaaa1";
    let node_b = "i-0bbbbbbbbbbbbbbb2";
    let a = principal(&lab, ACCOUNT, NODE_ROLE, node_a);
    principal(&lab, ACCOUNT, NODE_ROLE, node_b);

    // The legitimate join: `aws eks get-token` from instance credentials → system:node:<id>.
    let token = eks_get_token(&lab, &a, "lab");
    assert!(decode(&token).starts_with("https://sts.us-east-1.amazonaws.com/?"));
    let ok = review(&lab, &token);
    assert_eq!(ok.authenticated, Some(true), "{ok:?}\n{}", lab.log("sts"));
    let user = ok.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(&*format!("system:node:{node_a}"))
    );
    assert!(user.groups.unwrap().contains(&"system:nodes".to_owned()));
    // The test tool makes the same tokens (so the attack rows below differ in one thing only).
    assert_eq!(
        review(&lab, &crafted(&a, "lab", &[])).authenticated,
        Some(true)
    );

    // 1. Forged signature (lab STS verifier).
    let url = decode(&token);
    let sig_at = url.find("X-Amz-Signature=").unwrap() + "X-Amz-Signature=".len();
    let mut forged = url.clone();
    let flipped = if &url[sig_at..sig_at + 1] == "0" {
        "1"
    } else {
        "0"
    };
    forged.replace_range(sig_at..sig_at + 1, flipped);
    refused(&lab, "forged signature", &encode(&forged));
    // 2. Request changed after signing: another API version (lab STS verifier).
    refused(
        &lab,
        "query changed after signing",
        &encode(&url.replace("Version=2011-06-15", "Version=2011-06-16")),
    );
    // 3. Signed for another cluster ID: the authenticator sends its own x-k8s-aws-id, so the
    //    signature no longer matches (lab STS verifier).
    refused(
        &lab,
        "token for another cluster ID",
        &eks_get_token(&lab, &a, "other-cluster"),
    );
    // 4. Older than its 15-minute validity (authenticator, before any STS call).
    let old = rfc3339(chrono_like_now() - 16 * 60);
    refused(
        &lab,
        "token signed 16 minutes ago",
        &crafted(&a, "lab", &["--signed-at", &old, "--expires", "900"]),
    );
    // 5. Another account's role of the same name (authenticator: no mapping).
    let foreign = principal(&lab, "999999999999", NODE_ROLE, "i-0ccccccccccccccc3");
    refused(
        &lab,
        "another account's node role",
        &crafted(&foreign, "lab", &[]),
    );
    // 6. A role that is not mapped (authenticator).
    let other_role = principal(&lab, ACCOUNT, "SomeAppRole", "i-0ddddddddddddddd4");
    refused(&lab, "an unmapped role", &crafted(&other_role, "lab", &[]));
    // 7. An STS host outside the allow-list: the lab's moto endpoint (authenticator).
    let moto = lab.var("AWS_ENDPOINT_URL");
    let host = moto.trim_start_matches("http://");
    refused(
        &lab,
        "STS host outside the allow-list",
        &crafted(&a, "lab", &["--host", host]),
    );
    refused(
        &lab,
        "STS look-alike host",
        &crafted(
            &a,
            "lab",
            &["--host", "sts.us-east-1.amazonaws.com.evil.example"],
        ),
    );
    // 8. Oversized token (authenticator: > 4 KiB).
    let padded = encode(&format!("{url}&X-Amz-Pad={}", "a".repeat(4096)));
    refused(&lab, "oversized token", &padded);
    // 9. Credentials STS never issued (lab STS verifier).
    let stranger = Principal {
        key_id: "ASIAUNKNOWNUNKNOWN0".into(),
        secret: "nope".into(),
        session: "nope".into(),
    };
    refused(&lab, "unknown credentials", &crafted(&stranger, "lab", &[]));
    // 10. Another action signed instead of GetCallerIdentity (authenticator).
    refused(
        &lab,
        "another STS action",
        &encode(&url.replace("Action=GetCallerIdentity", "Action=AssumeRole")),
    );
    // The lab STS's refusals (one line each) show which layer said no.
    let log = lab.log("sts");
    for code in ["SignatureDoesNotMatch", "InvalidClientTokenId"] {
        assert!(
            log.contains(code),
            "the lab STS never refused with {code}:\n{log}"
        );
    }

    // 11. A node uses its valid identity on another Node (NodeRestriction).
    node_restriction(&lab, &token, node_a, node_b);
}

/// Node A, authenticated by its IAM token, may create and label its own Node, not node B's.
fn node_restriction(lab: &Lab, token: &str, node_a: &str, node_b: &str) {
    let admin: Api<Node> = Api::all(lab.client.clone());
    let as_node = lab
        .rt
        .block_on(kk_testkit::clients::bearer(lab.var("KUBECONFIG"), token));
    let nodes: Api<Node> = Api::all(as_node);
    // Registered as a real node does: Karpenter's unregistered taint and its own instance's
    // providerID, which the node registration policy (cloud/) requires of an instance-named Node.
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {
                "providerID": format!("aws:///us-east-1a/{name}"),
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
            },
        }))
        .unwrap()
    };
    lab.rt.block_on(async {
        let _ = admin.delete(node_a, &Default::default()).await;
        let _ = admin.delete(node_b, &Default::default()).await;
        nodes
            .create(&PostParams::default(), &node(node_a))
            .await
            .expect("a node registers its own Node");
        admin
            .create(&PostParams::default(), &node(node_b))
            .await
            .unwrap();
        let patch = Patch::Merge(json!({"metadata": {"labels": {"stolen": "yes"}}}));
        let err = nodes
            .patch(node_b, &PatchParams::default(), &patch)
            .await
            .expect_err("NodeRestriction must refuse another node's object");
        assert!(
            err.to_string().contains("forbidden") || err.to_string().contains("Forbidden"),
            "{err}"
        );
        eprintln!("refused: node {node_a} updating Node {node_b}");
        nodes
            .patch(node_a, &PatchParams::default(), &patch)
            .await
            .expect("its own Node");
        let _ = admin.delete(node_a, &Default::default()).await;
        let _ = admin.delete(node_b, &Default::default()).await;
    });
}

fn chrono_like_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Seconds since the epoch → `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian).
fn rfc3339(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Figures (`-- --ignored iam_webhook_latency --nocapture`): 1,000 TokenReviews through the API
/// server of an IAM token (API server → authenticator → lab STS, webhook cache off) and of a
/// bootstrap token (the API server's own Secret lookup), and the authenticator's memory.
#[test]
#[ignore]
fn iam_webhook_latency() {
    let Some(lab) = Lab::require_token_webhook("iam_webhook_latency") else {
        return;
    };
    start_authenticator(&lab);
    // Distinct tokens: the API server caches every successful token authentication for 10 s
    // (its authenticators' union cache, whatever the webhook's own TTL), so a repeated token
    // would measure that cache. The lab runs the webhook's cache at 0 s.
    let mut iam_tokens = Vec::new();
    for session in ["i-0eeeeeeeeeeeeeee5", "i-0fffffffffffffff6"] {
        let p = principal(&lab, ACCOUNT, NODE_ROLE, session);
        let tool = repo().join("testbed/lab-kit/iam_token.py");
        let out = python(&[
            tool.to_str().unwrap(),
            "--key-id",
            &p.key_id,
            "--secret",
            &p.secret,
            "--session-token",
            &p.session,
            "--cluster-id",
            "lab",
            "--expires",
            "900",
            "--count",
            "500",
        ]);
        iam_tokens.extend(out.lines().map(str::to_owned));
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(lab.client.clone(), "kube-system");
    let expiration = rfc3339(chrono_like_now() + 3600);
    let mut bootstrap_tokens = Vec::new();
    lab.rt.block_on(async {
        for i in 0..1000 {
            let id = format!("kl{i:04}");
            let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
                "type": "bootstrap.kubernetes.io/token",
                "stringData": {"token-id": id, "token-secret": "0123456789abcdef",
                                "expiration": expiration, "usage-bootstrap-authentication": "true"},
            }))
            .unwrap();
            let _ = secrets.create(&PostParams::default(), &secret).await;
            bootstrap_tokens.push(format!("{id}.0123456789abcdef"));
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    for (what, tokens) in [
        (
            "iam webhook (apiserver -> authenticator -> STS)",
            &iam_tokens,
        ),
        (
            "bootstrap token (apiserver Secret lister)",
            &bootstrap_tokens,
        ),
    ] {
        assert_eq!(tokens.len(), 1000);
        let mut times = Vec::with_capacity(1000);
        for token in tokens {
            let t = Instant::now();
            let s = review(&lab, token);
            times.push(t.elapsed());
            assert_eq!(s.authenticated, Some(true), "{what}");
        }
        times.sort();
        eprintln!(
            "FIGURE {what}: 1000 TokenReviews of distinct tokens p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
            percentile(&times, 0.50).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3,
            times.last().unwrap().as_secs_f64() * 1e3
        );
    }
    let sts_answers = lab.log("sts").matches("answered").count();
    assert!(
        sts_answers >= 1000,
        "only {sts_answers} STS calls: a cache answered"
    );
    let pids = std::fs::read_to_string(lab.state().join("pids")).unwrap();
    let pid = pids
        .lines()
        .find_map(|l| l.strip_prefix("authenticator "))
        .unwrap()
        .trim();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for line in status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
    {
        eprintln!("FIGURE aws-iam-authenticator {line}");
    }
    lab.rt.block_on(async {
        let _ = secrets
            .delete("bootstrap-token-kklat1", &Default::default())
            .await;
    });
}

/// Item 4 of the issue: a `joinMethod: iam` pool on the EKS AL2023 image (the lab's eks-al2023
/// AMI profile, whose boot runs the nodeadm stand-in on the rendered NodeConfig): Karpenter
/// launches it, its kubelet authenticates with `aws eks get-token` from its instance role
/// through the real authenticator, registers as its instance ID, the CCM initializes it, and
/// the NodeClaim becomes Registered and Initialized. No token, store or CSR is involved.
#[test]
fn a_karpenter_launched_iam_node_registers_and_initializes() {
    let Some(mut lab) =
        Lab::require_token_webhook("a_karpenter_launched_iam_node_registers_and_initializes")
    else {
        return;
    };
    let cert = lab.var("KK_LAB_SERVING_CERT_B64");
    let (spec, bundle) = lab.render(|text| iam_spec(text, &cert));
    lab.lab(&["authenticator", bundle.to_str().unwrap()]);
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-eks", 1);
    let pool_of = |nc: &kube::api::DynamicObject| lab::pool_of(nc).to_owned();
    let name = lab.wait("NodeClaim of the iam pool", Duration::from_secs(60), |l| {
        l.nodeclaims()
            .into_iter()
            .find(|nc| pool_of(nc) == "workload-eks")
            .and_then(|nc| nc.metadata.name)
    });
    let claim = |l: &Lab| {
        l.nodeclaims()
            .into_iter()
            .find(|nc| nc.metadata.name.as_deref() == Some(name.as_str()))
    };
    let registered = lab.wait("NodeClaim Registered", Duration::from_secs(180), |l| {
        claim(l).filter(|nc| lab::is_true(nc, "Registered"))
    });
    lab.wait("NodeClaim Initialized", Duration::from_secs(120), |l| {
        claim(l).filter(|nc| lab::is_true(nc, "Initialized"))
    });
    let provider_id = registered.data["status"]["providerID"]
        .as_str()
        .unwrap()
        .to_owned();
    let instance = provider_id.rsplit('/').next().unwrap().to_owned();
    let node_name = registered.data["status"]["nodeName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        node_name, instance,
        "InstanceIdNodeName: the Node is named by its instance ID"
    );
    let console = lab.console(&provider_id);
    assert!(console.contains("nodeadm: node"), "{console}");
    assert!(
        !console.contains("kubeadm"),
        "no kubeadm on this image: {console}"
    );
    // The authenticator, not a bootstrap token or a certificate, let the kubelet in.
    let log = std::fs::read_to_string(lab.state().join("logs/authenticator.log")).unwrap();
    assert!(
        log.contains(&format!("assumed-role/{NODE_ROLE}/{instance}")),
        "the authenticator never saw {instance}"
    );
    let nodes: Api<Node> = Api::all(lab.client.clone());
    let node = lab.rt.block_on(nodes.get(&node_name)).unwrap();
    assert_eq!(
        node.spec.unwrap().provider_id.as_deref(),
        Some(&*provider_id)
    );
    lab.print_phases();
}

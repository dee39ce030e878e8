//! `token`, `ca-hash` as a user runs them against the testbed: exit codes, what is printed,
//! and no token left behind when publishing fails.

use std::process::{Command, Output};

use kk_testkit::repo;
use kk_testkit::testbed::{Testbed, require};
use serde_json::Value;

/// The binary with the testbed's environment (kubeconfig, moto endpoint, AWS test keys).
fn bin(testbed: &Testbed) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"));
    for (k, v) in &testbed.env {
        c.env(k, v);
    }
    c
}

fn run(mut c: Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn unique() -> String {
    kk_live::token::BootstrapToken::generate()
        .unwrap()
        .id()
        .to_owned()
}

/// Tokens of `cluster`, from `token list -o json`.
fn tokens_of(testbed: &Testbed, cluster: &str) -> Vec<Value> {
    let mut c = bin(testbed);
    c.args(["token", "list", "-o", "json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let all: Vec<Value> = serde_json::from_str(&out).unwrap();
    all.into_iter()
        .filter(|t| t["cluster"] == cluster)
        .collect()
}

#[test]
fn publish_with_aws_unreachable_exits_2_and_leaves_no_token() {
    let Some(testbed) = require(&repo(), "token create --publish, AWS down") else {
        return;
    };
    let cluster = format!("cli-{}", unique());
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for store in ["ssm", "secrets-manager"] {
        let mut c = bin(&testbed);
        c.env("AWS_ENDPOINT_URL", format!("http://{closed}"))
            .args(["token", "create", "--publish", "--cluster", &cluster])
            .args(["--store", store, "--api-server", "api.test.internal:6443"]);
        let (code, out, err) = run(c);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("cannot reach AWS"), "{err}");
        assert!(err.contains("was deleted again"), "{err}");
        assert_eq!(err.lines().count(), 2, "one clear line and its hint: {err}");
        assert!(
            err.contains("\nhint: AWS could not be reached"),
            "an outage, not a refusal: {err}"
        );
    }
    assert!(tokens_of(&testbed, &cluster).is_empty());
}

#[test]
fn create_publish_list_and_revoke() {
    let Some(testbed) = require(&repo(), "token create/list/revoke") else {
        return;
    };
    let cluster = format!("cli-{}", unique());
    let store = ["--cluster", &cluster, "--store", "ssm"];

    let mut c = bin(&testbed);
    c.args([
        "token",
        "create",
        "--publish",
        "--ttl",
        "10m",
        "--description",
        "cli test",
    ])
    .args(store)
    .args(["--api-server", "api.test.internal:6443"]);
    let (code, published, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let published = published.trim().to_owned();
    kk_live::token::validate_id(&published).unwrap();
    assert!(
        err.contains(&format!("/kubean-karpenter/{cluster}/join")),
        "{err}"
    );

    let mut c = bin(&testbed);
    c.args([
        "token",
        "create",
        "--show-secret",
        "--ttl",
        "10m",
        "--cluster",
        &cluster,
    ]);
    let (code, shown, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let shown = kk_live::token::BootstrapToken::parse(shown.trim()).unwrap();

    let listed = tokens_of(&testbed, &cluster);
    assert_eq!(listed.len(), 2);
    for t in &listed {
        assert_eq!(t["ours"], true);
        assert_eq!(t["expired"], false);
        assert_eq!(
            t["usages"],
            serde_json::json!(["authentication", "signing"])
        );
    }
    // `list` never shows a secret.
    let mut c = bin(&testbed);
    c.args(["token", "list"]);
    let (_, text, _) = run(c);
    assert!(!text.contains(&shown.expose()[7..]));
    assert!(text.contains(shown.id()));

    // The published token cannot be revoked while the store names it; the other can.
    let mut c = bin(&testbed);
    c.args(["token", "revoke", &published]).args(store);
    let (code, _, err) = run(c);
    assert_eq!(code, 2);
    assert!(err.contains("publishes"), "{err}");
    let mut c = bin(&testbed);
    c.args(["token", "revoke", shown.id()]).args(store);
    let (code, _, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let mut c = bin(&testbed);
    c.args(["token", "revoke", shown.id()]);
    let (code, _, err) = run(c);
    assert_eq!(code, 2);
    assert!(err.contains("not found"), "{err}");
    let mut c = bin(&testbed);
    c.args(["token", "revoke", &published]);
    assert_eq!(run(c).0, 0);
    assert!(tokens_of(&testbed, &cluster).is_empty());
}

#[test]
fn ca_hash_from_kubeconfig_and_pem_agree_and_an_unreachable_apiserver_exits_2() {
    let Some(testbed) = require(&repo(), "ca-hash") else {
        return;
    };
    let mut c = bin(&testbed);
    c.arg("ca-hash");
    let (code, from_kubeconfig, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let mut c = bin(&testbed);
    c.args(["ca-hash", "--pem", &testbed.env["KK_TESTBED_CA"]]);
    let (code, from_pem, err) = run(c);
    assert_eq!(code, 0, "{err}");
    assert_eq!(from_kubeconfig, from_pem);
    assert!(
        kk_live::store::is_ca_cert_hash(from_pem.trim()),
        "{from_pem}"
    );

    // A kubeconfig whose server nobody answers on.
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let text = std::fs::read_to_string(&testbed.kubeconfig).unwrap();
    let broken: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("server:") {
                format!("    server: https://{closed}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, broken).unwrap();
    let mut c = bin(&testbed);
    c.args(["token", "create", "--kubeconfig"]).arg(&path);
    let (code, out, err) = run(c);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("cannot reach the apiserver"), "{err}");
}

/// A refusal and an outage read differently (#48 item 2): the typed call error reaches the
/// CLI, which adds one hint line saying which it was. Both exit 2.
#[test]
fn refused_credentials_and_an_unreachable_apiserver_get_different_hints() {
    let Some(testbed) = require(&repo(), "token list, refused vs unreachable") else {
        return;
    };
    let admin = std::fs::read_to_string(&testbed.kubeconfig).unwrap();
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_owned();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, address, hint) in [
        (
            "refused",
            server.as_str(),
            "hint: the apiserver did not accept the credentials",
        ),
        (
            "unreachable",
            &format!("https://{closed}"),
            "hint: the apiserver could not be reached",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{address}\", insecure-skip-tls-verify: true}}\nusers:\n- name: u\n  user: {{token: not-a-token}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
            ),
        )
        .unwrap();
        let mut c = bin(&testbed);
        c.arg("token").arg("list").arg("--kubeconfig").arg(&path);
        let (code, out, err) = run(c);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(out.is_empty(), "{name}: {out}");
        assert!(
            err.starts_with("error: list Secrets in kube-system: "),
            "{name}: {err}"
        );
        assert_eq!(
            err.lines().count(),
            2,
            "{name}: the error and its hint: {err}"
        );
        assert!(
            err.lines().nth(1).unwrap().starts_with(hint),
            "{name}: {err}"
        );
    }
}

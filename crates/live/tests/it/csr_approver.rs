//! The node-client CSR approver against the real apiserver: a holder of our join token
//! submits CSRs (with the rendered join RBAC), the approver decides them as its own service
//! account (the rendered approver RBAC and approval policy, impersonated), and the CSR
//! conditions the apiserver stored are checked. The testbed has no kube-controller-manager, so nothing is
//! signed: approval is the API call this proves. "A real Karpenter node joins" needs
//! kubelets and a signer and belongs to the lab (testbed/, the lead's).

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node};
use kk_live::controller::csr_approver::{self, Decision, PassError, Refusal};
use kk_live::token::{self, NewToken, Timestamp};
use kk_testkit::testbed::{Testbed, require};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

const SA: &str =
    "system:serviceaccount:kubean-karpenter-csr-approver:kubean-karpenter-csr-approver";
const ROTATOR_SA: &str = "system:serviceaccount:kubean-karpenter-rotator:kubean-karpenter-rotator";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Where the rendered approver keeps its record of approvals (next to its Lease).
const RECORD_NS: &str = "kube-system";
const KUBELET: [&str; 2] = ["digital signature", "client auth"];

/// The tests that decide CSRs run one at a time: a pass decides every pending CSR of our
/// group, another test's included, and the record is one ConfigMap.
static APPROVER_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A fresh EC2-style instance ID (`i-0` and 16 hex digits), the only names approved.
fn instance() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    format!("i-0{:016x}", u64::from_le_bytes(bytes))
}

fn subject(node: &str) -> String {
    format!("/O=system:nodes/CN=system:node:{node}")
}

/// One approver pass as the approver's account. A CSR of this run (its name holds `run`)
/// that it could not decide, or state it could not read, fails the test (CSRs a failed
/// earlier run left on the shared testbed may fail as they like).
async fn approve(approver: &Client, run: &str) -> Vec<(String, Decision)> {
    let pass = csr_approver::approve_pending(approver, RECORD_NS)
        .await
        .unwrap();
    let ours: Vec<_> = pass
        .errors
        .iter()
        .filter(|e| match e {
            PassError::Call { csr, .. } | PassError::LeftPending { csr, .. } => csr.contains(run),
            PassError::State(_) => true,
        })
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
    pass.decided
}

/// The decision a pass made for `name`.
fn decision_of<'a>(decided: &'a [(String, Decision)], name: &str) -> &'a Decision {
    &decided
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name} was not decided in this pass: {decided:?}"))
        .1
}

/// (label, CSR name, PEM, signer, usages, approved?, words the condition's message holds)
type Case<'a> = (
    &'a str,
    String,
    String,
    &'a str,
    Vec<&'a str>,
    bool,
    &'a str,
);

/// A PKCS#10 request from openssl: `key` is `ec` (P-256, what the kubelet makes) or `rsa`.
fn csr_pem(subject: &str, key: &str, san: Option<&str>) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args([
        "req",
        "-new",
        "-nodes",
        "-keyout",
        "/dev/null",
        "-subj",
        subject,
    ]);
    match key {
        "ec" => cmd.args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]),
        "ec384" => cmd.args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp384r1"]),
        _ => cmd.args(["-newkey", "rsa:2048"]),
    };
    if let Some(san) = san {
        cmd.args(["-addext", &format!("subjectAltName={san}")]);
    }
    let out = cmd.output().expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn bearer(testbed: &Testbed, token: &str) -> Client {
    let mut config = kube_config(testbed).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    Client::try_from(config).unwrap()
}

async fn as_controller(testbed: &Testbed) -> Client {
    Client::try_from(as_controller_config(testbed).await).unwrap()
}

async fn as_controller_config(testbed: &Testbed) -> kube::Config {
    as_account(testbed, SA).await
}

async fn as_account(testbed: &Testbed, account: &str) -> kube::Config {
    let mut config = kube_config(testbed).await;
    config.auth_info.impersonate = Some(account.into());
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        // The account's namespace group (`system:serviceaccount:<namespace>:<name>`).
        format!(
            "system:serviceaccounts:{}",
            account.split(':').nth(2).unwrap()
        ),
        "system:authenticated".into(),
    ]);
    config
}

async fn submit(client: &Client, name: &str, pem: &str, signer: &str, usages: &[&str]) {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let body: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "request": k8s_openapi::ByteString(pem.as_bytes().to_vec()),
            "signerName": signer,
            "usages": usages,
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &body)
        .await
        .unwrap_or_else(|e| panic!("create CSR {name}: {e}"));
}

/// The (type, reason, message) of the CSR's decision, if any.
async fn condition(admin: &Client, name: &str) -> Option<(String, String, String)> {
    let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let csr = api.get(name).await.unwrap();
    let c = csr.status?.conditions?.into_iter().next()?;
    Some((
        c.type_,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    ))
}

fn nodeclaims(admin: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    Api::all_with(admin.clone(), &ApiResource::from_gvk(&gvk))
}

/// A NodeClaim whose providerID names `instance` (no node yet); returns its name.
async fn nodeclaim(admin: &Client, instance: &str) -> String {
    nodeclaim_with(admin, instance, &[]).await
}

async fn nodeclaim_with(admin: &Client, instance: &str, finalizers: &[&str]) -> String {
    let api = nodeclaims(admin);
    let name = format!("nc-{}", unique());
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": { "name": name, "finalizers": finalizers },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &body).await.unwrap();
    set_claim_status(
        admin,
        &name,
        json!({ "providerID": format!("aws:///us-east-1a/{instance}") }),
    )
    .await;
    name
}

async fn set_claim_status(admin: &Client, claim: &str, status: serde_json::Value) {
    nodeclaims(admin)
        .patch_status(
            claim,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_token_gets_a_node_certificate_only_for_a_launched_instance() {
    let Some(testbed) = require(&repo(), "CSR approver") else {
        return;
    };
    let _one_at_a_time = APPROVER_TESTS.lock().await;
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;

    // A token of ours, as stolen from a node's store.
    let (stolen, _) = token::create(
        &admin,
        &NewToken {
            ttl: Duration::from_secs(600),
            description: None,
            cluster: Some("demo".into()),
        },
        Timestamp::now(),
    )
    .await
    .unwrap();
    wait_auth(&testbed, &stolen.expose(), true).await.unwrap();
    let holder = bearer(&testbed, &stolen.expose()).await;

    let u = unique();
    let launched = instance();
    let existing = instance();
    let unknown = instance();
    let rsa_launched = instance();
    nodeclaim(&admin, &launched).await;
    nodeclaim(&admin, &existing).await;
    nodeclaim(&admin, &rsa_launched).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let node: Node = serde_json::from_value(json!({ "metadata": { "name": existing } })).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();

    let kubelet = KUBELET;
    // Each malformed request names an instance of its own: two CSRs for one name would be a
    // race (below), denied whatever else they carry.
    let lone = instance;
    let approver = as_controller(&testbed).await;

    // Finding #1, the CSR race: the real kubelet of a launched instance asks for its
    // certificate; a holder of the (stolen) join token sees it (system:node-bootstrapper may
    // list and watch CSRs) and asks for the same name, its CSR named to sort first. Neither
    // is approved, both are denied as contested, and the name stays refused afterwards.
    let raced = instance();
    nodeclaim(&admin, &raced).await;
    let real = format!("zz-kubelet-{u}");
    let rival = format!("aa-rival-{u}");
    submit(
        &holder,
        &real,
        &csr_pem(&subject(&raced), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    submit(
        &holder,
        &rival,
        &csr_pem(&subject(&raced), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    approve(&approver, &u).await;
    for name in [&rival, &real] {
        let (type_, reason, message) = condition(&admin, name).await.expect("decided");
        assert_eq!(type_, "Denied", "{name}: {message}");
        assert_eq!(reason, csr_approver::CONTESTED_REASON, "{name}: {message}");
        assert!(message.contains("2 pending CSRs"), "{message}");
    }
    let retry = format!("retry-{u}");
    submit(
        &holder,
        &retry,
        &csr_pem(&subject(&raced), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    approve(&approver, &u).await;
    let (type_, reason, message) = condition(&admin, &retry).await.expect("decided");
    assert_eq!(
        (type_.as_str(), reason.as_str()),
        ("Denied", csr_approver::CONTESTED_REASON),
        "{message}"
    );
    // A CSR filed before the NodeClaim that names its instance was created: denied.
    let early = instance();
    let premature = format!("early-{u}");
    submit(
        &holder,
        &premature,
        &csr_pem(&subject(&early), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    nodeclaim(&admin, &early).await;
    approve(&approver, &u).await;
    let (type_, _, message) = condition(&admin, &premature).await.expect("decided");
    assert_eq!(type_, "Denied", "{message}");
    assert!(message.contains("before the NodeClaim"), "{message}");

    let cases: Vec<Case> = vec![
        // (label, csr name, pem, signer, usages, approved?, expected words in the message)
        (
            "existing node's name",
            format!("existing-{u}"),
            csr_pem(&subject(&existing), "ec", None),
            CLIENT_SIGNER,
            kubelet.to_vec(),
            false,
            "already exists",
        ),
        (
            "name without a NodeClaim",
            format!("unknown-{u}"),
            csr_pem(&subject(&unknown), "ec", None),
            CLIENT_SIGNER,
            kubelet.to_vec(),
            false,
            "no NodeClaim",
        ),
        (
            "system:masters in the subject",
            format!("masters-{u}"),
            csr_pem(
                &format!("/O=system:masters/CN=system:node:{}", instance()),
                "ec",
                None,
            ),
            CLIENT_SIGNER,
            kubelet.to_vec(),
            false,
            "organizations",
        ),
        (
            "a SAN",
            format!("san-{u}"),
            csr_pem(&subject(&lone()), "ec", Some("DNS:kubernetes.default")),
            CLIENT_SIGNER,
            kubelet.to_vec(),
            false,
            "extensions",
        ),
        (
            "a P-384 key",
            format!("p384-{u}"),
            csr_pem(&subject(&lone()), "ec384", None),
            CLIENT_SIGNER,
            kubelet.to_vec(),
            false,
            "P-256",
        ),
        (
            "server auth usage",
            format!("usage-{u}"),
            csr_pem(&subject(&lone()), "ec", None),
            CLIENT_SIGNER,
            vec!["digital signature", "client auth", "server auth"],
            false,
            "usages",
        ),
        (
            "a launched instance",
            format!("launched-{u}"),
            csr_pem(&subject(&launched), "ec", None),
            CLIENT_SIGNER,
            kubelet.to_vec(),
            true,
            "NodeClaim names instance",
        ),
        (
            "RSA with key encipherment",
            format!("rsa-{u}"),
            csr_pem(&subject(&rsa_launched), "rsa", None),
            CLIENT_SIGNER,
            vec!["digital signature", "key encipherment", "client auth"],
            true,
            "NodeClaim names instance",
        ),
    ];
    for (_, name, pem, signer, usages, _, _) in &cases {
        submit(&holder, name, pem, signer, usages).await;
    }
    // Someone else's CSR (not our join group) is left alone.
    let foreign = format!("admin-{u}");
    submit(
        &admin,
        &foreign,
        &csr_pem(&subject(&unknown), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;

    let decided = approve(&approver, &u).await;
    for (label, name, _, _, _, approved, words) in &cases {
        let (type_, reason, message) = condition(&admin, name)
            .await
            .unwrap_or_else(|| panic!("{label}: CSR {name} was not decided"));
        let want = if *approved { "Approved" } else { "Denied" };
        assert_eq!(type_, want, "{label}: {message}");
        assert!(reason.starts_with("KubeanKarpenter"), "{label}: {reason}");
        assert!(
            message.contains(words),
            "{label}: {message:?} lacks {words:?}"
        );
        eprintln!("{label}: {type_}: {message}");
    }
    assert_eq!(
        condition(&admin, &foreign).await,
        None,
        "someone else's CSR was decided"
    );
    // A serving certificate asked for with the token is not ours to decide, and the
    // approver's RBAC could not approve it: only the kubelet client signer.
    let serving = format!("serving-{u}");
    submit(
        &holder,
        &serving,
        &csr_pem(&subject(&launched), "ec", None),
        "kubernetes.io/kubelet-serving",
        &["digital signature", "server auth"],
    )
    .await;
    approve(&approver, &u).await;
    assert_eq!(condition(&admin, &serving).await, None);
    let csrs: Api<CertificateSigningRequest> = Api::all(approver.clone());
    let mut csr = csrs.get(&serving).await.unwrap();
    csr.status.get_or_insert_with(Default::default).conditions = Some(vec![
        serde_json::from_value(json!({ "type": "Approved", "status": "True", "reason": "X" }))
            .unwrap(),
    ]);
    match csrs
        .replace_subresource("approval", &serving, &PostParams::default(), &csr)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the approver could approve a serving CSR: {other:?}"),
    }
    assert!(!decided.iter().any(|(n, _)| *n == foreign));

    // A second request for an instance already certified: denied.
    let again = format!("again-{u}");
    submit(
        &holder,
        &again,
        &csr_pem(&subject(&launched), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    let decided = approve(&approver, &u).await;
    assert!(
        decided.iter().any(|(n, d)| *n == again
            && matches!(d, Decision::Deny(Refusal::ApprovedBefore, m) if m.contains("already approved")))
    );

    // The token holder itself cannot approve (kubeadm's auto-approval is not ours to give).
    let api: Api<CertificateSigningRequest> = Api::all(holder.clone());
    let pending = format!("self-{u}");
    submit(
        &holder,
        &pending,
        &csr_pem(&subject(&unknown), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    let mut csr = api.get(&pending).await.unwrap();
    csr.status.get_or_insert_with(Default::default).conditions = Some(vec![
        serde_json::from_value(json!({ "type": "Approved", "status": "True", "reason": "Self" }))
            .unwrap(),
    ]);
    match api
        .replace_subresource("approval", &pending, &PostParams::default(), &csr)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("a token holder approved its own CSR: {other:?}"),
    }

    // Finding #2: the rotator's account (it can mint tokens) cannot approve a node CSR: the
    // approver runs under its own account, and the rotator's has no approval rights.
    let rotator = Client::try_from(as_account(&testbed, ROTATOR_SA).await).unwrap();
    let rot_api: Api<CertificateSigningRequest> = Api::all(rotator);
    let fresh = instance();
    nodeclaim(&admin, &fresh).await;
    let minted = format!("minted-{u}");
    submit(
        &holder,
        &minted,
        &csr_pem(&subject(&fresh), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    let mut csr = api.get(&minted).await.unwrap();
    csr.status.get_or_insert_with(Default::default).conditions = Some(vec![
        serde_json::from_value(json!({ "type": "Approved", "status": "True", "reason": "Minted" }))
            .unwrap(),
    ]);
    match rot_api
        .replace_subresource("approval", &minted, &PostParams::default(), &csr)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            eprintln!("rotator approval refused: {}", s.message)
        }
        other => panic!("the rotator's account approved a node CSR: {other:?}"),
    }
    // And the approver's account approves only CSRs of our bootstrap tokens: a kubelet-client
    // CSR someone else requested (here the admin, for a control-plane node's name) is refused
    // by the approval policy although RBAC lets the approver approve that signer.
    let control_plane = format!("admin-cp-{u}");
    submit(
        &admin,
        &control_plane,
        &csr_pem(&subject("control-plane-1"), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    let approver_api: Api<CertificateSigningRequest> = Api::all(approver.clone());
    let mut csr = approver_api.get(&control_plane).await.unwrap();
    csr.status.get_or_insert_with(Default::default).conditions = Some(vec![
        serde_json::from_value(json!({ "type": "Approved", "status": "True", "reason": "Stolen" }))
            .unwrap(),
    ]);
    match approver_api
        .replace_subresource("approval", &control_plane, &PostParams::default(), &csr)
        .await
    {
        Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("ValidatingAdmissionPolicy") =>
        {
            eprintln!("approver approval of a foreign CSR refused: {}", s.message)
        }
        other => panic!("the approver approved a CSR no token of ours asked for: {other:?}"),
    }
    // The honest single CSR is still approved (by the approver, below, in the controller).

    // In the controller (`--csr-approver-only`): once it leads (its rendered Lease, its own
    // account's RBAC), it approves the honest, single CSR of a launched instance within a few
    // approve intervals, with no call from the test.
    let late = instance();
    nodeclaim(&admin, &late).await;
    let controller = kk_live::controller::Controller::approver_only(
        as_controller_config(&testbed).await,
        Duration::from_millis(200),
        // Orphan removal looks at every Node of the shared testbed, where other tests' Nodes
        // have no NodeClaims; the lab proves it (lab_orphans.rs).
        None,
        kk_live::controller::LeaseConfig {
            namespace: "kube-system".into(),
            name: "kubean-karpenter-csr-approver".into(),
            identity: format!("csr-{}", unique()),
            duration: Duration::from_secs(4),
        },
    )
    .unwrap();
    let metrics = controller.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async {
        let _ = stopped.await;
    }));
    let by_controller = format!("controller-{u}");
    submit(
        &holder,
        &by_controller,
        &csr_pem(&subject(&late), "ec", None),
        CLIENT_SIGNER,
        &kubelet,
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let decided = loop {
        if let Some(c) = condition(&admin, &by_controller).await {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller never decided the CSR"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(decided.0, "Approved", "{decided:?}");
    assert!(metrics.is_leader());
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap();
}

/// Finding #6's removal of orphaned Nodes gives the approver `delete` on Nodes; a stolen
/// approver credential must still not remove a Kubean-built node (the control plane's, an
/// infra worker's). The rendered node-deletes policy refuses it; an instance-named Node (what
/// the approver removes when no NodeClaim names it) may go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_account_deletes_only_instance_named_nodes() {
    let Some(testbed) = require(&repo(), "CSR approver node deletes") else {
        return;
    };
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let u = unique();
    let kubean_node = format!("control-plane-{u}");
    // An EC2 instance ID: `i-0` and 16 hex digits.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let instance_node = format!("i-0{:016x}", nanos ^ u64::from(std::process::id()));
    let nodes: Api<Node> = Api::all(admin.clone());
    for name in [&kubean_node, &instance_node] {
        let node: Node = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let as_approver: Api<Node> = Api::all(as_controller(&testbed).await);
    // The policy may take a moment to be enforced after install_rotator created it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let refused = loop {
        match as_approver.delete(&kubean_node, &Default::default()).await {
            Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("EC2 instance") => {
                break e;
            }
            Err(e) => panic!("unexpected error deleting {kubean_node}: {e}"),
            Ok(_) => {
                nodes
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({ "metadata": { "name": kubean_node } }))
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                assert!(
                    std::time::Instant::now() < deadline,
                    "the approver's account deleted Kubean node {kubean_node} for 20 s"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    eprintln!(
        "refused: the approver deleting {kubean_node}: {}",
        refused.message
    );
    assert!(nodes.get_opt(&kubean_node).await.unwrap().is_some());
    as_approver
        .delete(&instance_node, &Default::default())
        .await
        .expect("the approver removes an instance-named Node");
    let _ = nodes.delete(&kubean_node, &Default::default()).await;
}

/// A token of ours, as stolen from a node's store, and a client that uses it.
async fn token_holder(testbed: &Testbed, admin: &Client) -> Client {
    let (stolen, _) = token::create(
        admin,
        &NewToken {
            ttl: Duration::from_secs(600),
            description: None,
            cluster: Some("demo".into()),
        },
        Timestamp::now(),
    )
    .await
    .unwrap();
    wait_auth(testbed, &stolen.expose(), true).await.unwrap();
    bearer(testbed, &stolen.expose()).await
}

/// The Warning Events the approver recorded on CSR `name`: (reason, message).
async fn events_on(admin: &Client, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(admin.clone(), csr_approver::EVENT_NAMESPACE);
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("CertificateSigningRequest"))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Issue 47, item 1: a token holder files kubelet-client CSRs for names that are no instance
/// ID (`system:node:a b`, a space, which no URL path may hold; and a Kubean node's name),
/// named to sort first. Before, the pass built a Node request from the name, the request
/// failed and the whole pass stopped: no CSR was ever decided again. Now the bad ones are
/// denied first (condition, Event, `csr_denied_total{reason="invalid_name"}`) and the honest
/// CSR of a live claim is approved in the same pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csr_for_a_name_that_is_no_instance_is_denied_and_the_others_are_still_decided() {
    let Some(testbed) = require(&repo(), "CSR approver: malformed names") else {
        return;
    };
    let _one_at_a_time = APPROVER_TESTS.lock().await;
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let holder = token_holder(&testbed, &admin).await;
    let approver = as_controller(&testbed).await;
    let u = unique();

    let honest = instance();
    nodeclaim(&admin, &honest).await;
    let space = format!("000-space-{u}");
    let kubean = format!("001-kubean-{u}");
    let legit = format!("zz-legit-{u}");
    submit(
        &holder,
        &space,
        &csr_pem(&subject("a b"), "ec", None),
        CLIENT_SIGNER,
        &KUBELET,
    )
    .await;
    submit(
        &holder,
        &kubean,
        &csr_pem(&subject("control-plane-1"), "ec", None),
        CLIENT_SIGNER,
        &KUBELET,
    )
    .await;
    submit(
        &holder,
        &legit,
        &csr_pem(&subject(&honest), "ec", None),
        CLIENT_SIGNER,
        &KUBELET,
    )
    .await;

    let decided = approve(&approver, &u).await;
    for bad in [&space, &kubean] {
        assert!(
            matches!(
                decision_of(&decided, bad),
                Decision::Deny(Refusal::InvalidName, _)
            ),
            "{bad}: {decided:?}"
        );
        let (type_, reason, message) = condition(&admin, bad).await.expect("decided");
        assert_eq!(
            (type_.as_str(), reason.as_str()),
            ("Denied", csr_approver::DENIED_REASON),
            "{message}"
        );
        assert!(message.contains("not an EC2 instance ID"), "{message}");
        let events = events_on(&admin, bad).await;
        assert!(
            events
                .iter()
                .any(|(r, m)| r == csr_approver::DENIED_REASON && m.contains("invalid_name")),
            "{bad}: {events:?}"
        );
        eprintln!("{bad}: Denied: {message}");
    }
    assert!(matches!(
        decision_of(&decided, &legit),
        Decision::Approve(_)
    ));
    assert_eq!(
        condition(&admin, &legit).await.map(|c| c.0).as_deref(),
        Some("Approved")
    );

    // The controller counts each denial under its reason: another bad CSR and an honest one,
    // filed before it starts, are decided by its first pass.
    let honest2 = instance();
    nodeclaim(&admin, &honest2).await;
    let bad2 = format!("000-space2-{u}");
    let legit2 = format!("zz-legit2-{u}");
    submit(
        &holder,
        &bad2,
        &csr_pem(&subject("a b"), "ec", None),
        CLIENT_SIGNER,
        &KUBELET,
    )
    .await;
    submit(
        &holder,
        &legit2,
        &csr_pem(&subject(&honest2), "ec", None),
        CLIENT_SIGNER,
        &KUBELET,
    )
    .await;
    let (metrics, stop, task) = start_approver(&testbed).await;
    wait_decided(&admin, &legit2).await;
    assert_eq!(condition(&admin, &bad2).await.unwrap().0, "Denied");
    assert_eq!(condition(&admin, &legit2).await.unwrap().0, "Approved");
    assert!(metrics.csr_denied("invalid_name") >= 1);
    let text = metrics.render(jiff::Timestamp::now());
    let line = text
        .lines()
        .find(|l| l.starts_with("kubean_karpenter_csr_denied_total{reason=\"invalid_name\"}"))
        .unwrap_or_else(|| panic!("{text}"));
    eprintln!("{line}");
    assert_ne!(line.rsplit_once(' ').unwrap().1, "0", "{text}");
    stop_approver(stop, task).await;
}

type Running = (
    std::sync::Arc<kk_live::controller::Metrics>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
);

/// The approver alone (`--csr-approver-only`) under its account, its Lease and a 200 ms
/// interval.
async fn start_approver(testbed: &Testbed) -> Running {
    let controller = kk_live::controller::Controller::approver_only(
        as_controller_config(testbed).await,
        Duration::from_millis(200),
        None,
        kk_live::controller::LeaseConfig {
            namespace: RECORD_NS.into(),
            name: "kubean-karpenter-csr-approver".into(),
            identity: format!("csr-{}", unique()),
            duration: Duration::from_secs(4),
        },
    )
    .unwrap();
    let metrics = controller.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async {
        let _ = stopped.await;
    }));
    (metrics, stop, task)
}

async fn stop_approver(stop: tokio::sync::oneshot::Sender<()>, task: tokio::task::JoinHandle<()>) {
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap();
}

/// Waits (20 s at most) until CSR `name` carries a decision.
async fn wait_decided(admin: &Client, name: &str) -> (String, String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(c) = condition(admin, name).await {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "CSR {name} was never decided"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 47, item 1, the API-error half: the apiserver refuses the approval call for some
/// CSRs (a ValidatingAdmissionPolicy the test installs, matching their names: a real
/// refusal, as an outage or a CSR deleted under the pass would give). The pass reports those
/// and still decides the CSRs after them. The refused ones were recorded before their
/// approval call (fail closed): the same CSR is approved once the refusal is gone, while a
/// new CSR for the other refused CSR's instance, after that CSR was deleted, is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_for_one_csr_does_not_stop_the_pass() {
    let Some(testbed) = require(&repo(), "CSR approver: API errors") else {
        return;
    };
    let _one_at_a_time = APPROVER_TESTS.lock().await;
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let holder = token_holder(&testbed, &admin).await;
    let approver = as_controller(&testbed).await;
    let u = unique();
    let doomed = format!("doomed-{u}");

    let policies: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        )),
    );
    let bindings: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
        )),
    );
    let policy = format!("kk-test-refuse-{u}");
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                "metadata": { "name": policy },
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": { "resourceRules": [{
                        "apiGroups": ["certificates.k8s.io"], "apiVersions": ["v1"],
                        "resources": ["certificatesigningrequests/approval"], "operations": ["UPDATE"],
                    }] },
                    "validations": [{
                        "expression": format!("!object.metadata.name.startsWith('{doomed}')"),
                        "message": "refused by the test",
                    }],
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": { "name": policy },
                "spec": { "policyName": policy, "validationActions": ["Deny"] },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // Enforced once a probe's approval call (the admin's, on a CSR not of our group) is refused.
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for i in 0.. {
        let probe = format!("{doomed}-probe-{i}");
        submit(
            &admin,
            &probe,
            &csr_pem(&subject("probe"), "ec", None),
            CLIENT_SIGNER,
            &KUBELET,
        )
        .await;
        let mut csr = csrs.get(&probe).await.unwrap();
        csr.status.get_or_insert_with(Default::default).conditions = Some(vec![
            serde_json::from_value(
                json!({ "type": "Denied", "status": "True", "reason": "Probe" }),
            )
            .unwrap(),
        ]);
        match csrs
            .replace_subresource("approval", &probe, &PostParams::default(), &csr)
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("refused by the test") => break,
            Ok(_) => {}
            Err(e) => panic!("probe {probe}: {e}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the test's policy was never enforced"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Two refused CSRs (sorting first), then an honest one and a bad name after them.
    let (retried, abandoned, honest) = (instance(), instance(), instance());
    for i in [&retried, &abandoned, &honest] {
        nodeclaim(&admin, i).await;
    }
    let doomed_a = format!("{doomed}-a");
    let doomed_b = format!("{doomed}-b");
    let legit = format!("legit-{u}");
    let bad = format!("zz-bad-{u}");
    for (name, node) in [
        (&doomed_a, retried.as_str()),
        (&doomed_b, abandoned.as_str()),
        (&legit, honest.as_str()),
        (&bad, "a b"),
    ] {
        submit(
            &holder,
            name,
            &csr_pem(&subject(node), "ec", None),
            CLIENT_SIGNER,
            &KUBELET,
        )
        .await;
    }
    let pass = csr_approver::approve_pending(&approver, RECORD_NS)
        .await
        .unwrap();
    let failed: Vec<String> = pass
        .errors
        .iter()
        .map(|e| e.to_string())
        .filter(|e| e.contains(&u))
        .collect();
    eprintln!("errors: {failed:#?}");
    assert_eq!(failed.len(), 2, "{failed:?}");
    for name in [&doomed_a, &doomed_b] {
        assert!(
            failed
                .iter()
                .any(|e| e.contains(name.as_str()) && e.contains("refused by the test")),
            "{name}: {failed:?}"
        );
        assert_eq!(
            condition(&admin, name).await,
            None,
            "{name} is still pending"
        );
    }
    assert!(matches!(
        decision_of(&pass.decided, &legit),
        Decision::Approve(_)
    ));
    assert!(matches!(
        decision_of(&pass.decided, &bad),
        Decision::Deny(Refusal::InvalidName, _)
    ));

    // One refused CSR is deleted (its kubelet gave up, or the cleaner came); a new CSR for
    // its instance is another CSR for a recorded instance: denied.
    csrs.delete(&doomed_b, &Default::default()).await.unwrap();
    let again = format!("again-{u}");
    submit(
        &holder,
        &again,
        &csr_pem(&subject(&abandoned), "ec", None),
        CLIENT_SIGNER,
        &KUBELET,
    )
    .await;
    // The refusal gone, the same CSR (same UID) is approved on a later pass.
    bindings.delete(&policy, &Default::default()).await.unwrap();
    policies.delete(&policy, &Default::default()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut again_decision = None;
    loop {
        let pass = csr_approver::approve_pending(&approver, RECORD_NS)
            .await
            .unwrap();
        if let Some((_, d)) = pass.decided.iter().find(|(n, _)| *n == again) {
            again_decision = Some(d.clone());
        }
        if condition(&admin, &doomed_a).await.is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{doomed_a} was never approved after the refusal went: {:?}",
            pass.errors
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (type_, _, message) = condition(&admin, &doomed_a).await.unwrap();
    assert_eq!(type_, "Approved", "{message}");
    let (type_, _, message) = condition(&admin, &again).await.expect("decided");
    assert_eq!(type_, "Denied", "{message}");
    assert!(message.contains(&format!("CSR {doomed_b}")), "{message}");
    assert!(
        matches!(
            again_decision,
            Some(Decision::Deny(Refusal::ApprovedBefore, _))
        ),
        "{again_decision:?}"
    );
}

/// Issue 47, item 2: a node identity needs a live claim, and an instance gets one. A token
/// holder who watches Nodes and CSRs asks for an instance's identity (a) after its approved
/// CSR was deleted (kube-controller-manager's cleaner does so an hour after approval): the
/// approver's record outlives the CSR; (b) while its NodeClaim is being deleted (held by a
/// finalizer, as Karpenter's is while it terminates the instance); (c) once the claim names
/// its node, or (d) is Registered. All four are denied. The approver's account can read and
/// write only its own record, not other ConfigMaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_identity_needs_a_live_claim_and_is_given_once() {
    let Some(testbed) = require(&repo(), "CSR approver: identity after proof") else {
        return;
    };
    let _one_at_a_time = APPROVER_TESTS.lock().await;
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let holder = token_holder(&testbed, &admin).await;
    let approver = as_controller(&testbed).await;
    let u = unique();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let file = |name: String, node: String| {
        let holder = holder.clone();
        async move {
            submit(
                &holder,
                &name,
                &csr_pem(&subject(&node), "ec", None),
                CLIENT_SIGNER,
                &KUBELET,
            )
            .await;
            name
        }
    };

    // (a) Approved, then its CSR object deleted as the cleaner would.
    let joined = instance();
    nodeclaim(&admin, &joined).await;
    let first = file(format!("first-{u}"), joined.clone()).await;
    let decided = approve(&approver, &u).await;
    assert!(matches!(
        decision_of(&decided, &first),
        Decision::Approve(_)
    ));
    let uid = csrs.get(&first).await.unwrap().metadata.uid.unwrap();
    csrs.delete(&first, &Default::default()).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), RECORD_NS);
    let record = maps
        .get(kk_spec::names::CSR_APPROVALS_CONFIGMAP)
        .await
        .unwrap();
    let entry = record.data.unwrap_or_default()[&joined].clone();
    assert!(entry.contains(&uid), "{entry}");
    let replay = file(format!("replay-{u}"), joined.clone()).await;

    // (b) A claim being deleted: a finalizer holds it with its deletionTimestamp.
    let finishing = instance();
    let hold = "kubean-karpenter.io/test-hold";
    let finishing_claim = nodeclaim_with(&admin, &finishing, &[hold]).await;
    nodeclaims(&admin)
        .delete(&finishing_claim, &Default::default())
        .await
        .unwrap();
    let dying = file(format!("dying-{u}"), finishing.clone()).await;

    // (c) A claim that names its node; (d) one that is Registered.
    let named = instance();
    let named_claim = nodeclaim(&admin, &named).await;
    set_claim_status(&admin, &named_claim, json!({ "nodeName": named })).await;
    let has_node = file(format!("has-node-{u}"), named.clone()).await;
    let registered = instance();
    let registered_claim = nodeclaim(&admin, &registered).await;
    set_claim_status(
        &admin,
        &registered_claim,
        json!({ "conditions": [{
            "type": "Registered", "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Registered", "message": "",
        }] }),
    )
    .await;
    let is_registered = file(format!("registered-{u}"), registered.clone()).await;

    let decided = approve(&approver, &u).await;
    for (name, refusal, words) in [
        (&replay, Refusal::ApprovedBefore, format!("CSR {first}")),
        (&dying, Refusal::ClaimFinished, "being deleted".to_owned()),
        (
            &has_node,
            Refusal::ClaimFinished,
            "already has its node".to_owned(),
        ),
        (
            &is_registered,
            Refusal::ClaimFinished,
            "already Registered".to_owned(),
        ),
    ] {
        assert!(
            matches!(decision_of(&decided, name), Decision::Deny(r, _) if *r == refusal),
            "{name}: {decided:?}"
        );
        let (type_, _, message) = condition(&admin, name).await.expect("decided");
        assert_eq!(type_, "Denied", "{name}: {message}");
        assert!(
            message.contains(&words),
            "{name}: {message:?} lacks {words:?}"
        );
        assert!(
            !events_on(&admin, name).await.is_empty(),
            "{name}: no Event"
        );
        eprintln!("{name}: Denied: {message}");
    }

    // The approver's own rights on ConfigMaps: its record only.
    let as_approver: Api<ConfigMap> = Api::namespaced(approver.clone(), RECORD_NS);
    match as_approver.get("kubeadm-config").await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the approver read another ConfigMap: {other:?}"),
    }
    let other: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": format!("kk-test-{u}") } })).unwrap();
    match as_approver.create(&PostParams::default(), &other).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the approver created a ConfigMap: {other:?}"),
    }

    nodeclaims(&admin)
        .patch(
            &finishing_claim,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
}

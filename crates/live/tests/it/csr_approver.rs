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
use k8s_openapi::api::core::v1::Node;
use kk_live::controller::csr_approver::{self, Decision};
use kk_live::testbed::{Testbed, require};
use kk_live::token::{self, NewToken, Timestamp};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

const SA: &str = "system:serviceaccount:karpenter:kubean-karpenter-csr-approver";
const ROTATOR_SA: &str = "system:serviceaccount:karpenter:kubean-karpenter-rotator";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

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
        "system:serviceaccounts:karpenter".into(),
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

async fn nodeclaim(admin: &Client, instance: &str) {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    let api: Api<DynamicObject> = Api::all_with(admin.clone(), &ApiResource::from_gvk(&gvk));
    let name = format!("nc-{}", unique());
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": { "name": name },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &body).await.unwrap();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({ "status": { "providerID": format!("aws:///us-east-1a/{instance}") } }),
        ),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_token_gets_a_node_certificate_only_for_a_launched_instance() {
    let Some(testbed) = require(&repo(), "CSR approver") else {
        return;
    };
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
    let launched = format!("i-{u}{}", unique());
    let existing = format!("i-{u}{}", unique());
    let unknown = format!("i-{u}{}", unique());
    let rsa_launched = format!("i-{u}{}", unique());
    nodeclaim(&admin, &launched).await;
    nodeclaim(&admin, &existing).await;
    nodeclaim(&admin, &rsa_launched).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let node: Node = serde_json::from_value(json!({ "metadata": { "name": existing } })).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();

    let kubelet = ["digital signature", "client auth"];
    let subject = |n: &str| format!("/O=system:nodes/CN=system:node:{n}");
    // Each malformed request names an instance of its own: two CSRs for one name would be a
    // race (below), denied whatever else they carry.
    let lone = || format!("i-{u}{}", unique());
    let approver = as_controller(&testbed).await;

    // Finding #1, the CSR race: the real kubelet of a launched instance asks for its
    // certificate; a holder of the (stolen) join token sees it (system:node-bootstrapper may
    // list and watch CSRs) and asks for the same name, its CSR named to sort first. Neither
    // is approved, both are denied as contested, and the name stays refused afterwards.
    let raced = format!("i-{u}{}", unique());
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
    csr_approver::approve_pending(&approver).await.unwrap();
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
    csr_approver::approve_pending(&approver).await.unwrap();
    let (type_, reason, message) = condition(&admin, &retry).await.expect("decided");
    assert_eq!(
        (type_.as_str(), reason.as_str()),
        ("Denied", csr_approver::CONTESTED_REASON),
        "{message}"
    );
    // A CSR filed before the NodeClaim that names its instance was created: denied.
    let early = format!("i-{u}{}", unique());
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
    csr_approver::approve_pending(&approver).await.unwrap();
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
                &format!("/O=system:masters/CN=system:node:i-{u}{}", unique()),
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

    let decided = csr_approver::approve_pending(&approver).await.unwrap();
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
    csr_approver::approve_pending(&approver).await.unwrap();
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
    let decided = csr_approver::approve_pending(&approver).await.unwrap();
    assert!(
        decided.iter().any(|(n, d)| *n == again
            && matches!(d, Decision::Deny(m) if m.contains("already approved")))
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
    let fresh = format!("i-{u}{}", unique());
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
    let late = format!("i-{u}{}", unique());
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

//! Issue 47, finding 8, performed on the testbed's real apiserver: whoever may create pods in
//! Karpenter's namespace (its `edit` role, as a Karpenter operator has) once mounted both our
//! controllers' accounts there and could mint a join token, then approve its CSR. The rendered
//! controllers now live in namespaces of their own; the attacker finds no account of theirs in
//! Karpenter's namespace, an account of that name made there has no rights, and the attacker
//! gets no token of the new ones. The approver's namespace enforces Pod Security `restricted`.

use crate::common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const ROTATOR: &str = kk_spec::names::ROTATOR;
const APPROVER: &str = kk_spec::names::CSR_APPROVER;
/// The example spec's Karpenter namespace, where the controllers ran before.
const KARPENTER: &str = "karpenter";

async fn as_user(testbed: &kk_testkit::testbed::Testbed, user: &str, groups: &[&str]) -> Client {
    let mut config = kube_config(testbed).await;
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    Client::try_from(config).unwrap()
}

/// A service account as RBAC and admission see it (a pod mounting it would be it).
async fn as_account(testbed: &kk_testkit::testbed::Testbed, namespace: &str, name: &str) -> Client {
    as_user(
        testbed,
        &format!("system:serviceaccount:{namespace}:{name}"),
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{namespace}"),
            "system:authenticated",
        ],
    )
    .await
}

fn forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            eprintln!("refused as expected: {what}: {}", s.message);
            s.message
        }
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// The rendered Deployment of `controller` as a Pod in `namespace`.
fn controller_pod(controller: &str, namespace: &str) -> Value {
    let deployment = rotator_objects()
        .into_iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == controller)
        .expect("the example renders the controller's Deployment");
    let template = &deployment["spec"]["template"];
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": format!("attack-{}", unique()), "namespace": namespace },
        "spec": template["spec"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_maker_in_karpenters_namespace_gets_no_controller_identity() {
    let Some(testbed) = require_testbed() else {
        return;
    };
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": KARPENTER } })).unwrap(),
        )
        .await;
    // The attacker: `edit` in Karpenter's namespace (pods, service accounts, secrets there):
    // the two roles `edit` aggregates, `system:aggregate-to-edit` and `system:aggregate-to-view`
    // (the testbed runs no controller manager to aggregate them into `edit` itself).
    let attacker = format!("karpenter-operator-{}", unique());
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), KARPENTER);
    let granted = ["edit", "view"].map(|part| format!("{attacker}-{part}"));
    for (part, name) in ["edit", "view"].iter().zip(&granted) {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": KARPENTER },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("system:aggregate-to-{part}") },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": attacker }],
        }))
        .unwrap();
        bindings
            .patch(
                name,
                &PatchParams::apply("attack-test").force(),
                &Patch::Apply(&binding),
            )
            .await
            .unwrap();
    }
    let operator = as_user(&testbed, &attacker, &["system:authenticated"]).await;
    let pods: Api<Pod> = Api::namespaced(operator.clone(), KARPENTER);
    // RBAC caches settle within moments: wait until the attacker's own rights work.
    let mut tries = 0;
    while let Err(e) = pods.list(&Default::default()).await {
        tries += 1;
        assert!(
            tries < 50,
            "the attacker's edit role never took effect: {e}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    for controller in [ROTATOR, APPROVER] {
        // 1. A pod that mounts the controller's account in Karpenter's namespace: no such account.
        let pod: Pod = serde_json::from_value(controller_pod(controller, KARPENTER)).unwrap();
        let why = forbidden(
            &format!("a pod in {KARPENTER} running as {controller}"),
            pods.create(&dry(), &pod).await,
        );
        assert!(why.contains("service account"), "{why}");
        // 2. Nor a token of the real one in its own namespace.
        let token =
            json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {} });
        let accounts: Api<ServiceAccount> = Api::namespaced(operator.clone(), controller);
        forbidden(
            &format!("a token for {controller}/{controller}"),
            accounts
                .create_subresource::<Value, Value>(
                    "token",
                    controller,
                    &PostParams::default(),
                    &token,
                )
                .await,
        );
        let foreign_pods: Api<Pod> = Api::namespaced(operator.clone(), controller);
        let pod: Pod = serde_json::from_value(controller_pod(controller, controller)).unwrap();
        forbidden(
            &format!("a pod in {controller}'s own namespace"),
            foreign_pods.create(&dry(), &pod).await,
        );
        // 3. The attacker makes an account of that name where it may (its pods would mount it):
        // it is bound to nothing.
        let own: Api<ServiceAccount> = Api::namespaced(operator.clone(), KARPENTER);
        let made: ServiceAccount =
            serde_json::from_value(json!({ "metadata": { "name": controller } })).unwrap();
        match own.create(&PostParams::default(), &made).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("{e}"),
        }
    }
    let rotator = as_account(&testbed, KARPENTER, ROTATOR).await;
    let token: Value = json!({
        "metadata": { "name": format!("bootstrap-token-{}", unique()), "namespace": "kube-system",
                      "labels": { "app.kubernetes.io/managed-by": "kubean-karpenter", "kubean-karpenter.io/cluster": "demo" } },
        "type": "bootstrap.kubernetes.io/token",
        "stringData": { "token-id": unique(), "token-secret": "0123456789abcdef",
                        "usage-bootstrap-authentication": "true", "auth-extra-groups": kk_spec::names::JOIN_TOKEN_GROUP },
    });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(rotator.clone(), "kube-system");
    forbidden(
        "the look-alike rotator account mints a join token",
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(token).unwrap(),
            )
            .await,
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(rotator.clone(), "kube-system");
    forbidden(
        "the look-alike rotator account reads the rotator's Lease",
        leases.get(ROTATOR).await,
    );
    let approver = as_account(&testbed, KARPENTER, APPROVER).await;
    let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        Api::all(approver.clone());
    forbidden(
        "the look-alike approver account lists CSRs",
        csrs.list(&Default::default()).await,
    );
    let approval = json!({ "status": { "conditions": [{ "type": "Approved", "status": "True", "reason": "Attack", "message": "attack" }] } });
    forbidden(
        "the look-alike approver account approves a CSR",
        csrs.patch_subresource(
            "approval",
            &format!("node-csr-{}", unique()),
            &PatchParams::default(),
            &Patch::Merge(approval),
        )
        .await,
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(approver.clone());
    forbidden(
        "the look-alike approver account deletes a Node",
        nodes
            .delete("i-0123456789abcdef0", &DeleteParams::default())
            .await,
    );

    // The approver's own namespace admits its rendered pod and refuses a host-network one.
    let approver_pods: Api<Pod> = Api::namespaced(admin.clone(), APPROVER);
    let pod: Pod = serde_json::from_value(controller_pod(APPROVER, APPROVER)).unwrap();
    if let Err(e) = approver_pods.create(&dry(), &pod).await {
        panic!("the rendered approver pod is refused in its own namespace: {e}");
    }
    let mut loose = controller_pod(APPROVER, APPROVER);
    loose["spec"]["hostNetwork"] = json!(true);
    let why = forbidden(
        "a host-network pod in the approver's namespace",
        approver_pods
            .create(&dry(), &serde_json::from_value(loose).unwrap())
            .await,
    );
    assert!(why.contains("PodSecurity \"restricted:latest\""), "{why}");
    // Policy check (not an attack): the rotator's namespace enforces what its pods allow.
    let rotator_ns = namespaces.get(ROTATOR).await.unwrap();
    let labels = rotator_ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/audit")
            .map(String::as_str),
        Some("restricted")
    );

    // Clean up the attacker's leftovers.
    for name in &granted {
        let _ = bindings.delete(name, &DeleteParams::default()).await;
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), KARPENTER);
    for controller in [ROTATOR, APPROVER] {
        let _ = accounts.delete(controller, &DeleteParams::default()).await;
    }
}

fn require_testbed() -> Option<kk_testkit::testbed::Testbed> {
    kk_testkit::testbed::require(&repo(), "controllers in namespaces of their own")
}

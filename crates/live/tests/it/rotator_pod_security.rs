//! The rotator's pod meets the `restricted` Pod Security Standard, enforced by the real
//! apiserver (its built-in PodSecurity admission): the rendered Deployment's pod is admitted
//! to a namespace labelled `pod-security.kubernetes.io/enforce: restricted`, and each way of
//! loosening it (run as root, keep a capability, allow privilege escalation, drop seccomp,
//! run privileged) is refused there. Server-side dry runs: nothing is scheduled.
//!
//! With the instance profile the rotator runs on the host network (the infra workers' IMDS hop
//! limit stays at 1, issue 24's finding 4), which `restricted` (and `baseline`) refuse for that
//! reason alone: the refusal names host namespaces and the host port, and the same pod off the
//! host network is admitted, so nothing else is loosened.

use crate::common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kk_testkit::testbed::require;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The rendered Deployment's pod template as a Pod in `namespace`.
fn rotator_pod(namespace: &str) -> Value {
    let deployment = rotator_objects()
        .into_iter()
        .find(|(path, o)| path == "rotator/join-token-rotator.yaml" && o["kind"] == "Deployment")
        .map(|(_, o)| o)
        .expect("the example renders the rotator Deployment");
    let template = &deployment["spec"]["template"];
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "rotator-pss", "namespace": namespace, "labels": template["metadata"]["labels"] },
        "spec": template["spec"],
    })
}

/// Loosenings both tests try.
fn run_as_root(p: &mut Value) {
    p["spec"]["securityContext"]["runAsNonRoot"] = json!(false);
    p["spec"]["securityContext"]["runAsUser"] = json!(0);
    p["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
}

fn privileged(p: &mut Value) {
    // (privileged with allowPrivilegeEscalation=false is invalid before admission)
    let sc = &mut p["spec"]["containers"][0]["securityContext"];
    sc["privileged"] = json!(true);
    sc.as_object_mut()
        .unwrap()
        .remove("allowPrivilegeEscalation");
}

async fn create(pods: &Api<Pod>, pod: &Value) -> Result<Pod, kube::Error> {
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    pods.create(&dry, &serde_json::from_value(pod.clone()).unwrap())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rotator_pod_is_admitted_as_restricted_and_every_loosening_is_refused() {
    let Some(testbed) = require(&repo(), "rotator pod security") else {
        return;
    };
    let admin = admin(&testbed).await;
    let ns = format!("pss-{}", unique());
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let sa: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    sa.create(
        &PostParams::default(),
        &serde_json::from_value(json!({ "metadata": { "name": "kubean-karpenter-rotator" } }))
            .unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);

    let mut pod = rotator_pod(&ns);
    assert_eq!(pod["spec"]["hostNetwork"], json!(true), "{pod:#}");
    match create(&pods, &pod).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            let why = s
                .message
                .split("restricted:latest\": ")
                .nth(1)
                .unwrap_or("");
            let reasons: Vec<&str> = why.split("), ").collect();
            assert!(
                reasons.len() == 2
                    && reasons[0].starts_with("host namespaces (hostNetwork=true")
                    && reasons[1].starts_with("hostPort ("),
                "refused for more than the host network: {}",
                s.message
            );
        }
        other => panic!("a host-network pod must be refused under restricted: {other:?}"),
    }
    // Off the host network (as `credentials.source: staticSecret` renders it): admitted.
    let spec = pod["spec"].as_object_mut().unwrap();
    spec.remove("hostNetwork");
    spec.remove("dnsPolicy");
    if let Err(e) = create(&pods, &pod).await {
        panic!("the rendered rotator pod off the host network is refused under restricted: {e}");
    }

    type Edit = fn(&mut Value);
    let attacks: [(&str, Edit); 6] = [
        ("run as root", run_as_root),
        ("keep NET_RAW", |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"] =
                json!({ "drop": ["ALL"], "add": ["NET_RAW"] });
        }),
        ("keep every capability", |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"] = json!({});
        }),
        ("allow privilege escalation", |p| {
            p["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        }),
        ("no seccomp profile", |p| {
            let pod_sc = p["spec"]["securityContext"].as_object_mut().unwrap();
            pod_sc.remove("seccompProfile");
            let container_sc = p["spec"]["containers"][0]["securityContext"]
                .as_object_mut()
                .unwrap();
            container_sc.remove("seccompProfile");
        }),
        ("privileged", privileged),
    ];
    for (what, edit) in attacks {
        let mut attack = rotator_pod(&ns);
        let spec = attack["spec"].as_object_mut().unwrap();
        spec.remove("hostNetwork");
        spec.remove("dnsPolicy");
        edit(&mut attack);
        match create(&pods, &attack).await {
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("PodSecurity") => {
                eprintln!("refused as expected: {what}: {}", s.message);
            }
            other => panic!("{what}: expected a PodSecurity refusal, got {other:?}"),
        }
    }
    namespaces.delete(&ns, &Default::default()).await.unwrap();
}

/// With the instance profile the rotator's own namespace enforces `privileged` (the host
/// network), so Pod Security cannot guard it: the rendered `kubean-karpenter-rotator-pods`
/// policy does. As the admin (no RBAC limit), in the rendered namespace, each pod someone granted
/// pod creation there might make is refused by that policy; the rendered pod is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_rotators_privileged_namespace_only_the_rotator_runs_and_unprivileged() {
    let Some(testbed) = require(&repo(), "rotator namespace pod policy") else {
        return;
    };
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let ns = kk_spec::names::controller_namespace(kk_spec::names::ROTATOR);
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    for account in ["kubean-karpenter-rotator", "other"] {
        let _ = accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": account } })).unwrap(),
            )
            .await;
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    // The policy takes effect within moments of being applied: wait until it refuses one.
    let mut probe = rotator_pod(ns);
    probe["spec"]["serviceAccountName"] = json!("other");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match create(&pods, &probe).await {
            Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy") => break,
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the pod policy never took effect: {other:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
    if let Err(e) = create(&pods, &rotator_pod(ns)).await {
        panic!("the rendered rotator pod is refused in its own namespace: {e}");
    }
    type Edit = fn(&mut Value);
    let attacks: [(&str, Edit); 9] = [
        ("another account", |p| {
            p["spec"]["serviceAccountName"] = json!("other")
        }),
        ("another image", |p| {
            p["spec"]["containers"][0]["image"] = json!(
                "registry.example/shell:1@sha256:0000000000000000000000000000000000000000000000000000000000000000"
            )
        }),
        ("privileged", privileged),
        ("a hostPath of the node's root", |p| {
            p["spec"]["volumes"] = json!([{ "name": "root", "hostPath": { "path": "/" } }]);
        }),
        ("the host's PID namespace", |p| {
            p["spec"]["hostPID"] = json!(true)
        }),
        ("run as root", run_as_root),
        ("add NET_ADMIN", |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"] =
                json!({ "drop": ["ALL"], "add": ["NET_ADMIN"] });
        }),
        ("seccomp unconfined", |p| {
            p["spec"]["containers"][0]["securityContext"]["seccompProfile"] =
                json!({ "type": "Unconfined" });
        }),
        ("an init container with a shell", |p| {
            let mut init = p["spec"]["containers"][0].clone();
            init["name"] = json!("init");
            init["image"] = json!(
                "registry.example/shell:1@sha256:0000000000000000000000000000000000000000000000000000000000000000"
            );
            init.as_object_mut().unwrap().remove("livenessProbe");
            init.as_object_mut().unwrap().remove("readinessProbe");
            init.as_object_mut().unwrap().remove("ports");
            p["spec"]["initContainers"] = json!([init]);
        }),
    ];
    for (what, edit) in attacks {
        let mut attack = rotator_pod(ns);
        attack["metadata"]["name"] = json!(format!("attack-{}", unique()));
        edit(&mut attack);
        match create(&pods, &attack).await {
            Err(kube::Error::Api(s))
                if s.code == 403 && s.message.contains("ValidatingAdmissionPolicy") =>
            {
                eprintln!("refused as expected: {what}: {}", s.message);
            }
            other => panic!("{what}: expected the rotator pod policy's refusal, got {other:?}"),
        }
    }
    let _ = accounts.delete("other", &Default::default()).await;
}

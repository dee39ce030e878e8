//! Against the real kube-apiserver of testbed/up (CRDs installed, CEL rules live).

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kk_live::{ApplyError, ApplyOptions, apply_all};
use kk_testkit::repo;
use kk_testkit::testbed::{Testbed, require};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// Deletes the bundle's Pods (the verify pods) where another test's real apply left them: a
/// Pod's tolerations are immutable, so a dry run against one with other tolerations is an
/// update the server refuses, whatever this bundle says.
async fn forget_pods(client: &Client, objects: &[(String, Value)]) {
    for (_, object) in objects.iter().filter(|(_, o)| o["kind"] == "Pod") {
        let (Some(namespace), Some(name)) = (
            object["metadata"]["namespace"].as_str(),
            object["metadata"]["name"].as_str(),
        ) else {
            continue;
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let _ = pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
    }
}

/// Namespaces and service accounts the bundle expects to exist (the testbed runs no
/// controllers, so nothing creates a namespace's default ServiceAccount).
async fn prepare_namespaces(client: &Client) {
    // A dry run creates no namespace, so the bundles' own (karpenter, gpu-operator, each of our
    // controllers') exist first: this test must not depend on others having made them. Ours
    // carry our label, as apply makes them (apply refuses to move into one it did not make).
    use kk_spec::names;
    let ours = [
        names::ROTATOR,
        names::CSR_APPROVER,
        names::HEALTH_AGENT,
        names::BUDGET,
    ]
    .map(names::controller_namespace);
    for ns in [
        "kubean-system",
        "karpenter",
        "default",
        "kube-system",
        "gpu-operator",
    ]
    .into_iter()
    .chain(ours)
    {
        let labels = if ours.contains(&ns) {
            json!({"app.kubernetes.io/managed-by": "kubean-karpenter"})
        } else {
            json!({})
        };
        let api: Api<Namespace> = Api::all(client.clone());
        let _ = api
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}}))
                    .unwrap(),
            )
            .await;
        let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let _ = sa
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap(),
            )
            .await;
    }
}

fn specs() -> Vec<(String, kk_spec::ElasticCluster)> {
    let dir = repo().join("fixtures/specs");
    let mut out = vec![(
        "example".to_owned(),
        kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
            .unwrap()
            .spec,
    )];
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        out.push((
            f.display().to_string(),
            kk_spec::parse_spec(&text, "f").unwrap().spec,
        ));
    }
    out
}

fn ca(cluster: &kk_spec::ElasticCluster) -> Vec<u8> {
    kk_render::inline_ca_pem(cluster)
        .map(|r| r.unwrap())
        .unwrap_or_else(|| std::fs::read(repo().join("fixtures/specs/pki/ca.crt")).unwrap())
}

#[tokio::test]
async fn every_rendered_bundle_is_accepted_by_a_server_side_dry_run() {
    let Some(testbed) = require(&repo(), "dry-run apply") else {
        return;
    };
    let client = testbed.admin().await;
    prepare_namespaces(&client).await;
    let options = ApplyOptions {
        dry_run: true,
        ..Default::default()
    };
    for (name, cluster) in specs() {
        let bundle = kk_render::render(&cluster, &ca(&cluster)).unwrap();
        let objects = bundle.manifests();
        forget_pods(&client, &objects).await;
        match apply_all(&client, &objects, &options).await {
            Ok(applied) => assert_eq!(applied.len(), objects.len(), "{name}"),
            Err(ApplyError::Refused(refusals)) => panic!(
                "{name}: {}",
                refusals
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            Err(other) => panic!("{name}: {other}"),
        }
    }
}

fn node_class(spec: Value) -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "bad"}, "spec": spec})
}

fn good_class_spec() -> Value {
    json!({
        "amiFamily": "Custom",
        "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "role": "node"
    })
}

fn node_pool(requirements: Value, disruption: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "bad"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
                "requirements": requirements
            }},
            "disruption": disruption
        }
    })
}

/// (object, substring of the CEL message, field the apiserver names)
fn invalid_objects() -> Vec<(Value, &'static str, &'static str)> {
    let mut alias_and_id = good_class_spec();
    alias_and_id["amiSelectorTerms"] =
        json!([{"alias": "al2023@v20260827", "id": "ami-0123456789abcdef0"}]);
    let mut both = good_class_spec();
    both["instanceProfile"] = json!("profile");
    let mut no_size = good_class_spec();
    no_size["blockDeviceMappings"] =
        json!([{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]);
    let mut two_roots = good_class_spec();
    two_roots["blockDeviceMappings"] = json!([
        {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
        {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}
    ]);
    vec![
        (
            node_class(alias_and_id),
            "'alias' is mutually exclusive",
            "spec.amiSelectorTerms",
        ),
        (
            node_class(both),
            "must specify exactly one of ['role', 'instanceProfile']",
            "spec",
        ),
        (
            node_pool(
                json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]),
                json!({"consolidateAfter": "1m"}),
            ),
            "label \"kubernetes.io/hostname\" is restricted",
            "spec.template.spec.requirements",
        ),
        (
            node_pool(
                json!([]),
                json!({"consolidateAfter": "1m", "budgets": [{"nodes": "1", "schedule": "@daily"}]}),
            ),
            "'schedule' must be set with 'duration'",
            "spec.disruption.budgets",
        ),
        (
            node_class(no_size),
            "snapshotID or volumeSize must be defined",
            "spec.blockDeviceMappings[0].ebs",
        ),
        (
            node_class(two_roots),
            "must have only one blockDeviceMappings with rootVolume",
            "spec.blockDeviceMappings",
        ),
    ]
}

#[tokio::test]
async fn invalid_objects_are_refused_with_the_cel_message_and_field() {
    let Some(testbed) = require(&repo(), "invalid objects") else {
        return;
    };
    let client = testbed.admin().await;
    let options = ApplyOptions {
        dry_run: true,
        ..Default::default()
    };
    for (object, message, field) in invalid_objects() {
        let kind = object["kind"].as_str().unwrap().to_owned();
        let result = apply_all(&client, &[("bad.yaml".to_owned(), object)], &options).await;
        let Err(ApplyError::Refused(refusals)) = result else {
            panic!("{kind} with {message:?} was not refused: {result:?}")
        };
        assert_eq!(refusals.len(), 1);
        let r = &refusals[0];
        assert_eq!(r.object, format!("{kind}/bad"));
        assert_eq!(r.code, 422, "{r}");
        assert!(r.message.contains(message), "{r}");
        assert!(r.message.contains(field), "{r} should name {field}");
    }
}

async fn create_token_secret(client: &Client, id: &str, secret: &str, expiration: &str) {
    let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let body: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id,
            "token-secret": secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &body).await.unwrap();
}

async fn who_am_i(testbed: &Testbed, token: &str) -> Result<SelfSubjectReview, kube::Error> {
    let client = kk_testkit::clients::bearer(&testbed.kubeconfig, token).await;
    let api: Api<SelfSubjectReview> = Api::all(client);
    api.create(&PostParams::default(), &SelfSubjectReview::default())
        .await
}

fn random_id(len: usize) -> String {
    // Unique per run without a dependency: nanoseconds in base 36.
    let mut n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut s = String::new();
    for _ in 0..len {
        let d = (n % 36) as u32;
        s.push(char::from_digit(d, 36).unwrap());
        n /= 36;
    }
    s
}

#[tokio::test]
async fn a_bootstrap_token_authenticates_and_an_expired_one_is_refused() {
    let Some(testbed) = require(&repo(), "bootstrap token") else {
        return;
    };
    let client = testbed.admin().await;
    let (id, secret) = (random_id(6), format!("{}abcdef0123", random_id(6)));
    create_token_secret(&client, &id, &secret, "2099-01-01T00:00:00Z").await;
    let (old_id, old_secret) = (
        random_id(6).chars().rev().collect::<String>(),
        "0123456789abcdef".to_owned(),
    );
    create_token_secret(&client, &old_id, &old_secret, "2001-01-01T00:00:00Z").await;

    // The authenticator reads token Secrets through an informer: allow it a moment.
    let mut review = None;
    for _ in 0..50 {
        if let Ok(r) = who_am_i(&testbed, &format!("{id}.{secret}")).await {
            review = Some(r);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let review = review.expect("a valid bootstrap token authenticates");
    let user = review.status.and_then(|s| s.user_info).unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:bootstrap:{id}").as_str())
    );
    let groups = user.groups.unwrap_or_default();
    assert!(
        groups.contains(&"system:bootstrappers:kubeadm:default-node-token".to_owned()),
        "{groups:?}"
    );

    match who_am_i(&testbed, &format!("{old_id}.{old_secret}")).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401),
        other => panic!("an expired token must be refused, got {other:?}"),
    }
}

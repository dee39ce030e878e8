//! The rotator's least privilege, enforced by the real apiserver: the rendered Role,
//! RoleBinding, Lease, ValidatingAdmissionPolicy and binding are applied to the testbed,
//! and every call is made as the rotator's service account (impersonated by the admin, so
//! RBAC and admission see exactly `system:serviceaccount:kubean-karpenter-rotator:kubean-karpenter-rotator`).
//! Each attack a stolen rotator credential could try is refused; what the rotator needs
//! works, and the controller itself runs under these rights.
//!
//! One test function: the rendered objects have fixed names (one rotator per cluster).

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kk_live::controller::{Controller, ControllerConfig, LeaseConfig};
use kk_live::store::{JoinStore, StoreKind};
use kk_live::token::{self, JOIN_TOKEN_GROUP, NODE_BOOTSTRAP_GROUP, NewToken, Timestamp};
use kk_testkit::testbed::{Testbed, require};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const SA: &str = "system:serviceaccount:kubean-karpenter-rotator:kubean-karpenter-rotator";
const NAME: &str = "kubean-karpenter-rotator";

fn example() -> kk_spec::ElasticCluster {
    kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
        .unwrap()
        .spec
}

/// The admin's client configuration, acting as the rotator's service account.
async fn as_rotator(testbed: &Testbed) -> kube::Config {
    let mut config = kube_config(testbed).await;
    config.auth_info.impersonate = Some(SA.into());
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        "system:serviceaccounts:kubean-karpenter-rotator".into(),
        "system:authenticated".into(),
    ]);
    config
}

fn secrets(client: &Client) -> Api<Secret> {
    Api::namespaced(client.clone(), "kube-system")
}

fn token_body(id: &str, labels: Value, data: Value) -> Secret {
    serde_json::from_value(json!({
        "metadata": { "name": format!("bootstrap-token-{id}"), "namespace": "kube-system", "labels": labels },
        "type": "bootstrap.kubernetes.io/token",
        "stringData": data,
    }))
    .unwrap()
}

fn our_labels(cluster: &str) -> Value {
    json!({ "app.kubernetes.io/managed-by": "kubean-karpenter", "kubean-karpenter.io/cluster": cluster })
}

fn token_data(id: &str, groups: &str) -> Value {
    json!({
        "token-id": id, "token-secret": "0123456789abcdef",
        "expiration": token::rfc3339(Timestamp::now() + Duration::from_secs(600)),
        "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
        "auth-extra-groups": groups,
    })
}

/// The call must be refused with 403; `by_policy`: by our admission policy (not RBAC).
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>, by_policy: bool) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            let policy = s.message.contains("ValidatingAdmissionPolicy");
            assert_eq!(
                policy, by_policy,
                "{what}: refused, but by the wrong layer: {}",
                s.message
            );
            eprintln!("refused as expected: {what}: {}", s.message);
        }
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rotator_account_can_only_create_and_delete_its_own_tokens() {
    let Some(testbed) = require(&repo(), "rotator least privilege") else {
        return;
    };
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let cluster = example().metadata.name;
    let rotator_config = as_rotator(&testbed).await;
    let rot = Client::try_from(rotator_config.clone()).unwrap();
    let rot_secrets = secrets(&rot);

    // The policy takes effect within moments of being applied: wait until it refuses.
    let sa_token: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": format!("stolen-{}", unique()), "namespace": "kube-system",
            "labels": our_labels(&cluster),
            "annotations": { "kubernetes.io/service-account.name": "clusterrole-aggregation-controller" },
        },
        "type": "kubernetes.io/service-account-token",
    }))
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match rot_secrets.create(&PostParams::default(), &sa_token).await {
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            Ok(_) => {
                let _ = secrets(&admin)
                    .delete(
                        sa_token.metadata.name.as_deref().unwrap(),
                        &DeleteParams::default(),
                    )
                    .await;
                assert!(Instant::now() < deadline, "the policy never took effect");
            }
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // ... and until this version of it lets a proper token through (a dry run).
    let probe_id = unique();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let proper = token_body(
        &probe_id,
        our_labels(&cluster),
        token_data(&probe_id, JOIN_TOKEN_GROUP),
    );
    while let Err(e) = rot_secrets.create(&dry, &proper).await {
        assert!(
            Instant::now() < deadline,
            "a proper token is still refused: {e}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // 1. A service-account-token Secret (the road to cluster-admin), even with our labels.
    refused(
        "create a kubernetes.io/service-account-token Secret",
        rot_secrets.create(&PostParams::default(), &sa_token).await,
        true,
    );
    // 2. Reading any Secret: get, list, watch.
    let foreign = unique();
    foreign_token(&admin, &foreign, "0123456789abcdef", "2099-01-01T00:00:00Z").await;
    refused(
        "get a foreign token Secret",
        rot_secrets.get(&format!("bootstrap-token-{foreign}")).await,
        false,
    );
    refused(
        "list Secrets",
        rot_secrets.list(&ListParams::default()).await,
        false,
    );
    refused(
        "list Secrets in another namespace",
        Api::<Secret>::namespaced(rot.clone(), "default")
            .list(&ListParams::default())
            .await,
        false,
    );
    // 3. Deleting a token that is not ours, or ours for another cluster.
    refused(
        "delete a foreign bootstrap token",
        rot_secrets
            .delete(
                &format!("bootstrap-token-{foreign}"),
                &DeleteParams::default(),
            )
            .await,
        true,
    );
    assert!(secret_exists(&admin, &foreign).await);
    let (theirs, _) = token::create(
        &admin,
        &NewToken {
            ttl: Duration::from_secs(600),
            description: None,
            cluster: Some(format!("other-{}", unique())),
        },
        Timestamp::now(),
    )
    .await
    .unwrap();
    refused(
        "delete another cluster's token",
        rot_secrets
            .delete(&theirs.secret_name(), &DeleteParams::default())
            .await,
        true,
    );
    assert!(secret_exists(&admin, theirs.id()).await);
    // 4. Tokens in another group: kubeadm's (auto-approved CSRs), or system:masters-like.
    for groups in [
        NODE_BOOTSTRAP_GROUP.to_owned(),
        format!("{JOIN_TOKEN_GROUP},{NODE_BOOTSTRAP_GROUP}"),
        "system:bootstrappers:admins".to_owned(),
    ] {
        let id = unique();
        refused(
            &format!("create a token with auth-extra-groups {groups}"),
            rot_secrets
                .create(
                    &PostParams::default(),
                    &token_body(&id, our_labels(&cluster), token_data(&id, &groups)),
                )
                .await,
            true,
        );
    }
    // 5. A token without labels, for another cluster, without expiration, or with extra keys.
    let id = unique();
    refused(
        "create an unlabelled token",
        rot_secrets
            .create(
                &PostParams::default(),
                &token_body(&id, json!({}), token_data(&id, JOIN_TOKEN_GROUP)),
            )
            .await,
        true,
    );
    refused(
        "create a token labelled for another cluster",
        rot_secrets
            .create(
                &PostParams::default(),
                &token_body(&id, our_labels("other"), token_data(&id, JOIN_TOKEN_GROUP)),
            )
            .await,
        true,
    );
    let mut forever = token_data(&id, JOIN_TOKEN_GROUP);
    forever.as_object_mut().unwrap().remove("expiration");
    refused(
        "create a token that never expires",
        rot_secrets
            .create(
                &PostParams::default(),
                &token_body(&id, our_labels(&cluster), forever),
            )
            .await,
        true,
    );
    // Finding #8: a stolen controller credential mints a token that lives until 2099 (the
    // controller could not even list it to clean it up).
    let mut until_2099 = token_data(&id, JOIN_TOKEN_GROUP);
    until_2099["expiration"] = json!("2099-01-01T00:00:00Z");
    refused(
        "create a token expiring in 2099",
        rot_secrets
            .create(
                &PostParams::default(),
                &token_body(&id, our_labels(&cluster), until_2099),
            )
            .await,
        true,
    );
    let mut unreadable = token_data(&id, JOIN_TOKEN_GROUP);
    unreadable["expiration"] = json!("never");
    refused(
        "create a token whose expiration is no time",
        rot_secrets
            .create(
                &PostParams::default(),
                &token_body(&id, our_labels(&cluster), unreadable),
            )
            .await,
        true,
    );
    let mut extra = token_data(&id, JOIN_TOKEN_GROUP);
    extra["ca.crt"] = json!("smuggled");
    refused(
        "create a token with extra keys",
        rot_secrets
            .create(
                &PostParams::default(),
                &token_body(&id, our_labels(&cluster), extra),
            )
            .await,
        true,
    );
    // 6. Leases other than its own; creating any (its own is rendered).
    let leases: Api<Lease> = Api::namespaced(rot.clone(), "kube-system");
    refused(
        "get another Lease",
        leases.get("kube-controller-manager").await,
        false,
    );
    let other: Lease =
        serde_json::from_value(json!({ "metadata": { "name": format!("x-{}", unique()) } }))
            .unwrap();
    refused(
        "create a Lease",
        leases.create(&PostParams::default(), &other).await,
        false,
    );
    let mut own = leases.get(NAME).await.unwrap();
    own.metadata.annotations = Some([("test".to_owned(), unique())].into());
    leases
        .replace(NAME, &PostParams::default(), &own)
        .await
        .unwrap();

    // What the rotator needs works: create its token, authenticate with it, delete it.
    let (mine, info) = token::create(
        &rot,
        &NewToken {
            ttl: Duration::from_secs(600),
            description: Some("rbac test".into()),
            cluster: Some(cluster.clone()),
        },
        Timestamp::now(),
    )
    .await
    .unwrap();
    assert_eq!(info.extra_groups, [JOIN_TOKEN_GROUP]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let groups = loop {
        if let Some(g) = token::authenticate(&rotator_config, &mine).await.unwrap() {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "the new token never authenticated"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(groups.iter().any(|g| g == JOIN_TOKEN_GROUP), "{groups:?}");
    assert!(
        !groups.iter().any(|g| g == NODE_BOOTSTRAP_GROUP),
        "{groups:?}"
    );
    // Updating even its own token is refused (RBAC has no update verb).
    let mut body = token_body(
        mine.id(),
        our_labels(&cluster),
        token_data(mine.id(), JOIN_TOKEN_GROUP),
    );
    body.metadata.resource_version = Some("1".into());
    refused(
        "update its own token",
        rot_secrets
            .replace(&mine.secret_name(), &PostParams::default(), &body)
            .await,
        false,
    );
    token::delete_by_id(&rot, mine.id()).await.unwrap();
    assert!(!secret_exists(&admin, mine.id()).await);

    // The controller runs with exactly these rights: it rotates, replaced tokens go after
    // the overlap, and the store always authenticates.
    let store_cluster = format!("rbac-{}", unique());
    let sdk = aws(&testbed, &moto_url(&testbed)).await;
    let store = JoinStore::new(
        StoreKind::Ssm,
        &format!("/kk-test/{store_cluster}/join"),
        &store_cluster,
        &sdk,
    );
    let config = ControllerConfig {
        cluster: cluster.clone(),
        api_server_endpoint: "api.test.internal:6443".into(),
        ca_cert_hash: testbed_ca_hash(&testbed),
        ttl: Duration::from_secs(8),
        rotate_at: 0.5,
        overlap: Duration::from_secs(2),
        approve_every: None,
        orphan_grace: None,
        tick: Duration::from_secs(1),
        retry: Duration::from_secs(1),
        lease: LeaseConfig {
            namespace: "kube-system".into(),
            name: NAME.into(),
            identity: format!("rbac-{}", unique()),
            duration: Duration::from_secs(4),
        },
    };
    let controller = Controller::new(rotator_config.clone(), store.clone(), config).unwrap();
    let metrics = controller.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async {
        let _ = stopped.await;
    }));
    let mut published = std::collections::BTreeMap::new();
    let mut past_overlap = std::collections::BTreeMap::new();
    let until = Instant::now() + Duration::from_secs(14);
    while Instant::now() < until {
        if let Ok(Some(c)) = store.read().await {
            published.insert(c.token.id().to_owned(), c.token.clone());
            // Attack row "superseded token used after its overlap": deleted, and the
            // apiserver no longer authenticates it.
            if let Some(old) = &c.superseded
                && Timestamp::now() > old.delete_after + Duration::from_secs(2)
            {
                assert!(
                    !secret_exists(&admin, &old.id).await,
                    "token {} outlived its overlap",
                    old.id
                );
                if let Some(old_token) = published.get(&old.id) {
                    past_overlap.insert(old.id.clone(), old_token.clone());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        metrics.rotations() >= 2,
        "{} rotations",
        metrics.rotations()
    );
    assert!(metrics.deleted() >= 1, "{} deleted", metrics.deleted());
    assert_eq!(
        metrics.errors(),
        0,
        "the controller hit errors under its own RBAC"
    );
    let stored = store.read().await.unwrap().unwrap();
    let (user, groups) = wait_auth(&testbed, &stored.token.expose(), true)
        .await
        .unwrap();
    assert_eq!(user, format!("system:bootstrap:{}", stored.token.id()));
    assert!(groups.contains(&JOIN_TOKEN_GROUP.to_owned()));
    assert!(published.len() >= 2, "{published:?}");
    // Attack row "superseded token used after its overlap": refused (401). The apiserver
    // caches a successful token authentication for 10 s (kubernetes/kubernetes
    // pkg/kubeapiserver/options/authentication.go, TokenSuccessCacheTTL), so refusal may lag
    // the deletion by that much; wait_auth waits 15 s.
    assert!(
        !past_overlap.is_empty(),
        "never saw a token past its overlap"
    );
    for old in past_overlap.values() {
        assert_eq!(wait_auth(&testbed, &old.expose(), false).await, None);
    }
}

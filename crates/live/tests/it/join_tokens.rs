//! Bootstrap tokens, the CA hash and the join store against the testbed (real kube-apiserver
//! with bootstrap-token auth, moto for SSM and Secrets Manager).

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kk_live::kube_error::KubeCallError;
use kk_live::store::{self, JoinStore, PublishError, StoreError, StoreKind};
use kk_live::token::{self, JOIN_TOKEN_GROUP, NewToken, Timestamp, TokenError};
use kk_testkit::testbed::require;
use kube::api::{Api, PostParams};
use serde_json::json;

fn new_token(ttl: Duration, cluster: &str) -> NewToken {
    NewToken {
        ttl,
        description: Some(format!("test {cluster}")),
        cluster: Some(cluster.to_owned()),
    }
}

#[tokio::test]
async fn a_created_token_is_kubeadms_and_authenticates_as_a_node_bootstrapper() {
    let Some(testbed) = require(&repo(), "token create") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("tok-{}", unique());
    let (token, info) = token::create(
        &client,
        &new_token(Duration::from_secs(600), &cluster),
        Timestamp::now(),
    )
    .await
    .unwrap();

    // The Secret, key by key, as kubeadm writes it.
    let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let secret = api
        .get(&format!("bootstrap-token-{}", token.id()))
        .await
        .unwrap();
    assert_eq!(
        secret.type_.as_deref(),
        Some("bootstrap.kubernetes.io/token")
    );
    let data = secret.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(text("token-id"), token.id());
    assert_eq!(
        format!("{}.{}", text("token-id"), text("token-secret")),
        token.expose()
    );
    assert_eq!(text("usage-bootstrap-authentication"), "true");
    assert_eq!(text("usage-bootstrap-signing"), "true");
    assert_eq!(text("auth-extra-groups"), JOIN_TOKEN_GROUP);
    assert_eq!(text("description"), format!("test {cluster}"));
    let exp: Timestamp = text("expiration").parse().unwrap();
    assert_eq!(Some(exp), info.expiration);
    let left = exp.duration_since(Timestamp::now()).as_secs_f64();
    assert!((590.0..=601.0).contains(&left), "{left}");
    let labels = secret.metadata.labels.unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "kubean-karpenter");
    assert_eq!(labels["kubean-karpenter.io/cluster"], cluster);

    let (user, groups) = wait_auth(&testbed, &token.expose(), true).await.unwrap();
    assert_eq!(user, format!("system:bootstrap:{}", token.id()));
    assert!(groups.contains(&JOIN_TOKEN_GROUP.to_owned()), "{groups:?}");

    // Listed (ours), without the secret anywhere.
    let listed = token::list(&client).await.unwrap();
    let mine = listed.iter().find(|t| t.id == token.id()).unwrap();
    assert!(mine.managed);
    assert!(!format!("{listed:?}").contains(&token.expose()[7..]));

    // Revoked: refused from then on.
    token::revoke(&client, token.id()).await.unwrap();
    assert!(wait_auth(&testbed, &token.expose(), false).await.is_none());
    assert!(matches!(
        token::revoke(&client, token.id()).await,
        Err(TokenError::NotFound(_))
    ));
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let Some(testbed) = require(&repo(), "token expiry") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("exp-{}", unique());
    let (token, _) = token::create(
        &client,
        &new_token(Duration::from_secs(3), &cluster),
        Timestamp::now(),
    )
    .await
    .unwrap();
    wait_auth(&testbed, &token.expose(), true).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(wait_auth(&testbed, &token.expose(), false).await.is_none());
    // Still there (only the rotator cleans up), listed as expired.
    let listed = token::list(&client).await.unwrap();
    assert!(
        listed
            .iter()
            .any(|t| t.id == token.id() && t.is_expired(Timestamp::now()))
    );
}

#[tokio::test]
async fn list_shows_foreign_tokens_as_not_ours_and_revoke_refuses_non_tokens() {
    let Some(testbed) = require(&repo(), "token list") else {
        return;
    };
    let client = admin(&testbed).await;
    let id = unique();
    foreign_token(&client, &id, "0123456789abcdef", "2099-01-01T00:00:00Z").await;
    let listed = token::list(&client).await.unwrap();
    let t = listed.iter().find(|t| t.id == id).unwrap();
    assert!(!t.managed);
    assert_eq!(t.usages, ["authentication", "signing"]);
    assert!(!format!("{listed:?}").contains("0123456789abcdef"));
    token::revoke(&client, &id).await.unwrap();
    assert!(!secret_exists(&client, &id).await);

    // A Secret named like a token but of another type is left alone.
    let other = unique();
    let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let body: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{other}")},
        "type": "Opaque", "stringData": {"x": "y"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &body).await.unwrap();
    assert!(matches!(
        token::revoke(&client, &other).await,
        Err(TokenError::NotAToken(..))
    ));
    assert!(secret_exists(&client, &other).await);
    assert!(matches!(
        token::revoke(&client, "NOT-AN-ID").await,
        Err(TokenError::BadId)
    ));
}

#[tokio::test]
async fn rbac_denied_is_a_clear_refusal() {
    let Some(testbed) = require(&repo(), "token rbac") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("rbac-{}", unique());
    let (token, _) = token::create(
        &client,
        &new_token(Duration::from_secs(120), &cluster),
        Timestamp::now(),
    )
    .await
    .unwrap();
    wait_auth(&testbed, &token.expose(), true).await.unwrap();
    // A bootstrap token may not create Secrets in kube-system.
    let mut config = kube_config(&testbed).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.expose().into()),
        ..Default::default()
    };
    let weak = kube::Client::try_from(config).unwrap();
    let err = token::create(
        &weak,
        &new_token(Duration::from_secs(60), &cluster),
        Timestamp::now(),
    )
    .await
    .unwrap_err();
    match &err {
        TokenError::Kube(KubeCallError::Refused { code, .. }) => assert_eq!(*code, 403, "{err}"),
        other => panic!("expected a 403 refusal, got {other}"),
    }
    assert!(!err.to_string().contains(&token.expose()[7..]));
    // Nothing of that cluster but the one token exists.
    let ours = token::list_managed(&client, &cluster).await.unwrap();
    assert_eq!(ours.len(), 1);
    token::revoke(&client, token.id()).await.unwrap();
}

#[tokio::test]
async fn an_unreachable_apiserver_is_reported_not_hung() {
    let Some(testbed) = require(&repo(), "unreachable apiserver") else {
        return;
    };
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client = admin_via(&testbed, closed).await;
    let started = std::time::Instant::now();
    let err = token::list(&client).await.unwrap_err();
    assert!(
        matches!(err, TokenError::Kube(KubeCallError::Unreachable { .. })),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn ca_hash_equals_openssls_from_pem_kubeconfig_and_cluster() {
    let Some(testbed) = require(&repo(), "ca-hash") else {
        return;
    };
    let ca = &testbed.env["KK_TESTBED_CA"];
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -pubkey -noout -in '{ca}' | openssl pkey -pubin -outform der | sha256sum"
        ))
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hex = String::from_utf8(out.stdout).unwrap();
    let expected = format!("sha256:{}", hex.split_whitespace().next().unwrap());

    assert_eq!(testbed_ca_hash(&testbed), expected);
    let options = kk_live::ClientOptions {
        kubeconfig: Some(testbed.kubeconfig.clone()),
        context: None,
    };
    assert_eq!(
        kk_live::cahash::from_kubeconfig(&options).await.unwrap(),
        expected
    );

    // No controller-manager publishes kube-root-ca.crt here: put it in a fresh namespace.
    let client = admin(&testbed).await;
    let ns = format!("ca-{}", unique());
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let missing = kk_live::cahash::from_cluster(&client, &ns)
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("kube-root-ca.crt"),
        "{missing}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "kube-root-ca.crt"},
            "data": {"ca.crt": std::fs::read_to_string(ca).unwrap()}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        kk_live::cahash::from_cluster(&client, &ns).await.unwrap(),
        expected
    );
}

async fn publish_round_trip(kind: StoreKind) {
    let Some(testbed) = require(&repo(), "publish") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("pub-{}", unique());
    let store = store(&testbed, kind, &cluster, &moto_url(&testbed)).await;
    assert!(store.read().await.unwrap().is_none());
    let hash = testbed_ca_hash(&testbed);
    let mut published = Vec::new();
    for _ in 0..2 {
        // The second write overwrites the first (SSM Overwrite, Secrets Manager PutSecretValue).
        let p = store::create_and_publish(
            &client,
            &store,
            &new_token(Duration::from_secs(300), &cluster),
            "api.test.internal:6443",
            &hash,
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
        let stored = store.read().await.unwrap().unwrap();
        assert_eq!(stored.token, p.token);
        assert_eq!(stored.ca_cert_hash, hash);
        assert_eq!(
            stored.api_server_endpoint.as_deref(),
            Some("api.test.internal:6443")
        );
        assert_eq!(Some(stored.expiration), p.info.expiration);
        published.push(p.token);
    }
    // The raw value is what the userData parses, and the store is tagged with the cluster.
    let sdk = aws(&testbed, &moto_url(&testbed)).await;
    let (raw, tags) = match kind {
        StoreKind::Ssm => {
            let c = aws_sdk_ssm::Client::new(&sdk);
            let p = c
                .get_parameter()
                .name(store.name())
                .with_decryption(true)
                .send()
                .await
                .unwrap();
            let p = p.parameter.unwrap();
            assert_eq!(
                p.r#type,
                Some(aws_sdk_ssm::types::ParameterType::SecureString)
            );
            let tags = c
                .list_tags_for_resource()
                .resource_type(aws_sdk_ssm::types::ResourceTypeForTagging::Parameter)
                .resource_id(store.name())
                .send()
                .await
                .unwrap()
                .tag_list
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.key, t.value))
                .collect::<Vec<_>>();
            (p.value.unwrap(), tags)
        }
        StoreKind::SecretsManager => {
            let c = aws_sdk_secretsmanager::Client::new(&sdk);
            let v = c
                .get_secret_value()
                .secret_id(store.name())
                .send()
                .await
                .unwrap();
            let d = c
                .describe_secret()
                .secret_id(store.name())
                .send()
                .await
                .unwrap();
            let tags = d
                .tags
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
                .collect::<Vec<_>>();
            (v.secret_string.unwrap(), tags)
        }
    };
    let keys: Vec<&str> = raw
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        keys,
        [
            "KK_API_SERVER_ENDPOINT",
            "KK_TOKEN",
            "KK_CA_CERT_HASH",
            "KK_EXPIRATION"
        ]
    );
    assert!(raw.contains(&format!("KK_TOKEN={}\n", published[1].expose())));
    assert!(
        tags.contains(&("kubean-karpenter.io/cluster".to_owned(), cluster.clone())),
        "{tags:?}"
    );
    for t in &published {
        token::revoke(&client, t.id()).await.unwrap();
    }
}

#[tokio::test]
async fn publish_to_ssm_round_trips_and_tags() {
    publish_round_trip(StoreKind::Ssm).await;
}

#[tokio::test]
async fn publish_to_secrets_manager_round_trips_and_tags() {
    publish_round_trip(StoreKind::SecretsManager).await;
}

#[tokio::test]
async fn a_failed_publish_deletes_the_new_token() {
    let Some(testbed) = require(&repo(), "publish rollback") else {
        return;
    };
    let client = admin(&testbed).await;
    for kind in [StoreKind::Ssm, StoreKind::SecretsManager] {
        let cluster = format!("rb-{}", unique());
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let store: JoinStore = store(&testbed, kind, &cluster, &format!("http://{closed}")).await;
        let started = std::time::Instant::now();
        let err = store::create_and_publish(
            &client,
            &store,
            &new_token(Duration::from_secs(300), &cluster),
            "api.test.internal:6443",
            &testbed_ca_hash(&testbed),
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(30));
        let PublishError::RolledBack { id, source } = &err else {
            panic!("expected a rollback, got {err}");
        };
        assert!(matches!(source, StoreError::Unreachable { .. }), "{source}");
        assert!(err.to_string().contains("cannot reach AWS"), "{err}");
        // No token Secret without its stored copy.
        assert!(!secret_exists(&client, id).await);
        assert!(
            token::list_managed(&client, &cluster)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test]
async fn kube_and_aws_clients_live_in_one_process_with_one_crypto_provider() {
    let Some(testbed) = require(&repo(), "crypto provider") else {
        return;
    };
    // Both clients built and used in one process: no "cannot determine the process-level
    // CryptoProvider" panic, and the provider is ring.
    let client = admin(&testbed).await;
    let store = store(
        &testbed,
        StoreKind::Ssm,
        &format!("cp-{}", unique()),
        &moto_url(&testbed),
    )
    .await;
    token::list(&client).await.unwrap();
    assert!(store.read().await.unwrap().is_none());
    let provider = rustls::crypto::CryptoProvider::get_default().expect("a provider is installed");
    let ring = rustls::crypto::ring::default_provider();
    assert_eq!(
        format!("{:?}", provider.cipher_suites),
        format!("{:?}", ring.cipher_suites)
    );
    // An HTTPS request through the SDK's client (TLS handshake against the apiserver's port:
    // not an AWS endpoint, so any HTTP answer will do; what matters is that rustls ran).
    let https = format!("https://{}", apiserver_addr(&testbed));
    let tls_store = crate::common::store(&testbed, StoreKind::Ssm, "cp", &https).await;
    let err = tls_store.read().await.unwrap_err();
    // The testbed CA is not in the SDK's trust store: the handshake itself must fail cleanly.
    assert!(!err.to_string().is_empty());
}

/// With `join.kms` the SecureString is written under the customer-managed key (moto records
/// the key; it does not enforce KMS permissions: the key policy is evaluated in
/// crates/render/tests/iam_eval.rs).
#[tokio::test]
async fn a_store_with_a_kms_key_writes_under_it() {
    let Some(testbed) = require(&repo(), "kms store") else {
        return;
    };
    let cluster = format!("kms-{}", unique());
    let key = "arn:aws:kms:us-east-1:123456789012:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
    let store = store(&testbed, StoreKind::Ssm, &cluster, &moto_url(&testbed))
        .await
        .with_kms_key(Some(key.to_owned()));
    let config = store::JoinConfig {
        api_server_endpoint: Some("api.test.internal:6443".into()),
        token: token::BootstrapToken::generate().unwrap(),
        ca_cert_hash: testbed_ca_hash(&testbed),
        expiration: Timestamp::now() + Duration::from_secs(600),
        superseded: None,
    };
    store.write(&config).await.unwrap();
    let ssm = aws_sdk_ssm::Client::new(&aws(&testbed, &moto_url(&testbed)).await);
    let described = ssm
        .describe_parameters()
        .parameter_filters(
            aws_sdk_ssm::types::ParameterStringFilter::builder()
                .key("Name")
                .values(store.name())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let params = described.parameters();
    assert_eq!(params.len(), 1, "{params:?}");
    assert_eq!(params[0].key_id(), Some(key));
    assert_eq!(store.read().await.unwrap().unwrap().token, config.token);
}

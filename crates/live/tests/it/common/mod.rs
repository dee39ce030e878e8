//! Shared by the join-token and rotator tests: testbed clients, a cuttable TCP proxy,
//! unique names.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_config::{Region, SdkConfig};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Secret;
use kk_live::ClientOptions;
use kk_live::store::{JoinStore, StoreKind};
use kk_testkit::testbed::Testbed;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

pub use kk_testkit::repo;

/// Six random `[a-z0-9]` characters (fresh names: the testbed never garbage-collects).
pub fn unique() -> String {
    kk_live::token::BootstrapToken::generate()
        .unwrap()
        .id()
        .to_owned()
}

pub async fn kube_config(testbed: &Testbed) -> kube::Config {
    let mut config = kk_live::client::make_config(&ClientOptions {
        kubeconfig: Some(testbed.kubeconfig.clone()),
        context: None,
    })
    .await
    .unwrap();
    kk_live::client::Timeouts::Controller.apply(&mut config);
    config
}

pub async fn admin(testbed: &Testbed) -> Client {
    Client::try_from(kube_config(testbed).await).unwrap()
}

/// An admin client that goes through `proxy` instead of straight to the apiserver.
pub async fn admin_via(testbed: &Testbed, proxy: SocketAddr) -> Client {
    Client::try_from(kube_config_via(testbed, proxy).await).unwrap()
}

/// The admin client configuration, through `proxy`.
pub async fn kube_config_via(testbed: &Testbed, proxy: SocketAddr) -> kube::Config {
    let mut config = kube_config(testbed).await;
    config.cluster_url = format!("https://{proxy}").parse().unwrap();
    config
}

pub fn apiserver_addr(testbed: &Testbed) -> SocketAddr {
    let url = &testbed.env["KK_TESTBED_APISERVER"];
    url.trim_start_matches("https://").parse().unwrap()
}

pub fn moto_url(testbed: &Testbed) -> String {
    testbed.env["AWS_ENDPOINT_URL"].clone()
}

pub fn moto_addr(testbed: &Testbed) -> SocketAddr {
    moto_url(testbed)
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

/// The SDK config for moto (or `endpoint`), credentials from the testbed env.
pub async fn aws(testbed: &Testbed, endpoint: &str) -> SdkConfig {
    let creds = aws_sdk_ssm::config::Credentials::new(
        &testbed.env["AWS_ACCESS_KEY_ID"],
        &testbed.env["AWS_SECRET_ACCESS_KEY"],
        None,
        None,
        "testbed",
    );
    kk_live::store::aws_loader()
        .credentials_provider(creds)
        .region(Region::new(testbed.env["AWS_REGION"].clone()))
        .endpoint_url(endpoint)
        .load()
        .await
}

pub async fn store(testbed: &Testbed, kind: StoreKind, cluster: &str, endpoint: &str) -> JoinStore {
    let sdk = aws(testbed, endpoint).await;
    let name = match kind {
        StoreKind::Ssm => format!("/kk-test/{cluster}/join"),
        StoreKind::SecretsManager => format!("kk-test/{cluster}/join"),
    };
    JoinStore::new(kind, &name, cluster, &sdk)
}

pub fn testbed_ca_hash(testbed: &Testbed) -> String {
    kk_live::cahash::from_pem_file(std::path::Path::new(&testbed.env["KK_TESTBED_CA"])).unwrap()
}

/// Who the apiserver says a bearer token is.
pub async fn who_am_i(testbed: &Testbed, token: &str) -> Result<SelfSubjectReview, kube::Error> {
    let mut config = kube_config(testbed).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    let client = Client::try_from(config).unwrap();
    let api: Api<SelfSubjectReview> = Api::all(client);
    api.create(&PostParams::default(), &SelfSubjectReview::default())
        .await
}

/// Waits (the authenticator reads Secrets through an informer) until `token` authenticates
/// (`Some(username, groups)`) or is refused with 401 (`None`), whichever `want` names.
pub async fn wait_auth(
    testbed: &Testbed,
    token: &str,
    want: bool,
) -> Option<(String, Vec<String>)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match who_am_i(testbed, token).await {
            Ok(review) if want => {
                let user = review.status.and_then(|s| s.user_info).unwrap();
                return Some((
                    user.username.unwrap_or_default(),
                    user.groups.unwrap_or_default(),
                ));
            }
            Err(kube::Error::Api(s)) if !want && s.code == 401 => return None,
            other => {
                if tokio::time::Instant::now() > deadline {
                    panic!(
                        "token never became {}: {other:?}",
                        if want { "valid" } else { "refused" }
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A token Secret somebody else made (no labels of ours).
pub async fn foreign_token(client: &Client, id: &str, secret: &str, expiration: &str) {
    let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let body: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id, "token-secret": secret, "expiration": expiration,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &body).await.unwrap();
}

pub async fn secret_exists(client: &Client, id: &str) -> bool {
    let api: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    api.get_opt(&format!("bootstrap-token-{id}"))
        .await
        .unwrap()
        .is_some()
}

/// A TCP proxy to `target` that the test can cut (every connection dropped, new ones
/// closed at once) and restore: an apiserver or AWS outage without touching the testbed.
/// It can also drop just the connections whose requests contain some bytes (one API call).
pub struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    block: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    kill: broadcast::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let block: Arc<std::sync::Mutex<Option<Vec<u8>>>> = Arc::default();
        let (kill, _) = broadcast::channel(4);
        let (cut2, kill2, block2) = (cut.clone(), kill.clone(), block.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if cut2.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let mut killed = kill2.subscribe();
                let block = block2.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut ri, mut wi) = inbound.split();
                    let (mut ro, mut wo) = outbound.split();
                    let upstream = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match ri.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            let blocked = block
                                .lock()
                                .unwrap()
                                .as_ref()
                                .is_some_and(|b| contains(&buf[..n], b));
                            if blocked || wo.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let downstream = tokio::io::copy(&mut ro, &mut wi);
                    tokio::select! {
                        _ = upstream => {}
                        _ = downstream => {}
                        _ = killed.recv() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            cut,
            block,
            kill,
            task,
        }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.kill.send(());
    }

    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
        *self.block.lock().unwrap() = None;
    }

    /// Drops every connection that sends `needle` (e.g. one AWS operation's target header).
    pub fn block(&self, needle: &[u8]) {
        *self.block.lock().unwrap() = Some(needle.to_vec());
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `GET path` over plain HTTP/1.1: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let status = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Creates the karpenter namespace (if missing) and applies the example spec's rendered
/// `rotator/` objects (RBAC, admission policy, Lease, Deployment), as `apply` would.
pub async fn install_rotator(admin: &Client) {
    // Each controller's own namespace first: a namespaced object is refused until it exists.
    let (namespaces, rest): (Vec<_>, Vec<_>) = rotator_objects()
        .into_iter()
        .partition(|(_, o)| o["kind"] == "Namespace");
    for objects in [namespaces, rest] {
        kk_live::apply::apply_all(
            admin,
            &objects,
            &kk_live::apply::ApplyOptions {
                force_conflicts: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
}

/// The rendered `rotator/` objects of the example spec (cluster `demo`), and the controllers' own
/// namespaces.
pub fn rotator_objects() -> Vec<(String, serde_json::Value)> {
    let cluster = kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
        .unwrap()
        .spec;
    let pem = kk_render::inline_ca_pem(&cluster).unwrap().unwrap();
    let objects: Vec<_> = kk_render::render(&cluster, &pem)
        .unwrap()
        .manifests()
        .into_iter()
        .filter(|(p, _)| {
            p.starts_with("rotator/")
                || [
                    kk_spec::names::ROTATOR,
                    kk_spec::names::CSR_APPROVER,
                    kk_spec::names::HEALTH_AGENT,
                ]
                .iter()
                .any(|c| {
                    *p == format!(
                        "namespaces/{}.yaml",
                        kk_spec::names::controller_namespace(c)
                    )
                })
        })
        .collect();
    assert!(
        objects
            .iter()
            .any(|(_, o)| o["kind"] == "ValidatingAdmissionPolicy")
    );
    objects
}

/// A node's client: the admin impersonating `system:node:<name>` in `system:nodes`, what the
/// Node authorizer and our node policies see for that instance.
pub async fn as_node(testbed: &Testbed, name: &str) -> Client {
    let mut config = kube_config(testbed).await;
    config.auth_info.impersonate = Some(format!("system:node:{name}"));
    config.auth_info.impersonate_groups =
        Some(vec!["system:nodes".into(), "system:authenticated".into()]);
    Client::try_from(config).unwrap()
}

/// A random instance id (17 hex digits, as EC2 makes them).
pub fn instance() -> String {
    let hex: String = unique()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("i-{:0>17}", &hex[hex.len().saturating_sub(17)..])
}

/// Deletes rendered ValidatingAdmissionPolicies and their bindings (`objects` as applied).
pub async fn delete_admission_policies(admin: &Client, objects: &[(String, serde_json::Value)]) {
    for (_, o) in objects.iter().rev() {
        let kind = o["kind"].as_str().unwrap();
        let name = o["metadata"]["name"].as_str().unwrap();
        let plural = if kind == "ValidatingAdmissionPolicy" {
            "validatingadmissionpolicies"
        } else {
            "validatingadmissionpolicybindings"
        };
        let resource = kube::api::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::all_with(admin.clone(), &resource);
        let _ = api.delete(name, &kube::api::DeleteParams::default()).await;
    }
}

//! The join-token rotator against the testbed: rotation over several short TTLs, leader
//! election between two replicas, and recovery from an apiserver and AWS outage (through
//! proxies this test cuts, so the shared testbed keeps running).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kk_live::controller::{Controller, ControllerConfig, LeaseConfig, Metrics};
use kk_live::store::{JoinConfig, JoinStore, StoreKind};
use kk_live::token::{self, Timestamp};
use kk_testkit::testbed::{Testbed, require};
use kube::Client;
use kube::api::Api;
use tokio::sync::oneshot;

struct Timing {
    ttl: Duration,
    overlap: Duration,
    tick: Duration,
    retry: Duration,
    lease: Duration,
}

fn config(testbed: &Testbed, cluster: &str, identity: &str, t: &Timing) -> ControllerConfig {
    ControllerConfig {
        cluster: cluster.to_owned(),
        api_server_endpoint: "api.test.internal:6443".into(),
        ca_cert_hash: testbed_ca_hash(testbed),
        ttl: t.ttl,
        rotate_at: 0.5,
        overlap: t.overlap,
        approve_every: None,
        orphan_grace: None,
        tick: t.tick,
        retry: t.retry,
        lease: LeaseConfig {
            namespace: "kube-system".into(),
            name: format!("rotator-{cluster}"),
            identity: identity.to_owned(),
            duration: t.lease,
        },
    }
}

/// A running replica: its metrics, address, and the means to stop it gracefully or kill it.
struct Replica {
    identity: String,
    metrics: Arc<Metrics>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Replica {
    async fn start(kube: kube::Config, store: JoinStore, config: ControllerConfig) -> Replica {
        if std::env::var_os("KK_TEST_LOG").is_some() {
            kk_live::controller::init_logging(false);
        }
        let identity = config.lease.identity.clone();
        let mut controller = Controller::new(kube, store, config).unwrap();
        let addr = controller
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let metrics = controller.metrics();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(controller.run(async {
            let _ = rx.await;
        }));
        Replica {
            identity,
            metrics,
            addr,
            stop: Some(tx),
            task,
        }
    }

    /// SIGTERM: finish, release the lease, return.
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), &mut self.task)
            .await
            .expect("the controller stops within 20 s")
            .unwrap();
    }

    /// A crash: nothing is released.
    fn kill(self) {
        self.task.abort();
    }
}

async fn lease_holder(client: &Client, cluster: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.get_opt(&format!("rotator-{cluster}"))
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Reads the store (directly, never through a proxy) until it holds a token.
async fn wait_published(store: &JoinStore, within: Duration) -> JoinConfig {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(c)) = store.read().await {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "nothing published within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks, once, what must hold whenever the controller runs: the stored token has not
/// expired and its Secret exists in the cluster with the same secret.
async fn check_valid(client: &Client, store: &JoinStore) -> Result<JoinConfig, String> {
    let stored = store
        .read()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the store is empty")?;
    let now = Timestamp::now();
    if stored.expiration <= now {
        return Err(format!(
            "the store holds token {} that expired at {}",
            stored.token.id(),
            token::rfc3339(stored.expiration)
        ));
    }
    match token::lookup(client, &stored.token)
        .await
        .map_err(|e| e.to_string())?
    {
        Some((info, true)) if info.can_authenticate(now) => Ok(stored),
        Some((_, true)) => Err(format!("token {} cannot authenticate", stored.token.id())),
        Some((_, false)) => Err(format!("token {}: the secret differs", stored.token.id())),
        None => Err(format!(
            "the store names token {}, which the cluster does not have",
            stored.token.id()
        )),
    }
}

fn render_nodeclasses() -> Vec<(String, String)> {
    let cluster = kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
        .unwrap()
        .spec;
    let pem = kk_render::inline_ca_pem(&cluster)
        .map(|r| r.unwrap())
        .unwrap_or_else(|| std::fs::read(repo().join("fixtures/specs/pki/ca.crt")).unwrap());
    let bundle = kk_render::render(&cluster, &pem).unwrap();
    let classes: Vec<_> = bundle
        .files
        .into_iter()
        .filter(|(p, _)| p.starts_with("nodeclasses/"))
        .collect();
    assert!(!classes.is_empty());
    classes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_a_valid_token_in_the_store_and_cleans_only_its_own() {
    let Some(testbed) = require(&repo(), "rotation") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("rot-{}", unique());
    let store = store(&testbed, StoreKind::Ssm, &cluster, &moto_url(&testbed)).await;
    let nodeclasses_before = render_nodeclasses();

    // Somebody else's tokens: an expired one without our labels, and an expired one of ours
    // for another cluster. Neither may be touched.
    let foreign = unique();
    foreign_token(
        &client,
        &foreign,
        "0123456789abcdef",
        "2001-01-01T00:00:00Z",
    )
    .await;
    let other_cluster = format!("other-{}", unique());
    let (theirs, _) = token::create(
        &client,
        &token::NewToken {
            ttl: Duration::from_secs(1),
            description: None,
            cluster: Some(other_cluster.clone()),
        },
        Timestamp::now(),
    )
    .await
    .unwrap();

    let timing = Timing {
        ttl: Duration::from_secs(6),
        overlap: Duration::from_secs(2),
        tick: Duration::from_secs(1),
        retry: Duration::from_secs(1),
        lease: Duration::from_secs(6),
    };
    let replica = Replica::start(
        kube_config(&testbed).await,
        store.clone(),
        config(&testbed, &cluster, &format!("solo-{}", unique()), &timing),
    )
    .await;
    let first = wait_published(&store, Duration::from_secs(20)).await;

    // Three TTLs and more: poll the store; it must always be valid.
    let mut seen = BTreeSet::from([first.token.id().to_owned()]);
    let until = Instant::now() + Duration::from_secs(20);
    let mut checks = 0;
    while Instant::now() < until {
        match check_valid(&client, &store).await {
            Ok(c) => {
                seen.insert(c.token.id().to_owned());
            }
            Err(e) => panic!("after {checks} good checks: {e}"),
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let m = replica.metrics.clone();
    assert!(
        seen.len() >= 4,
        "only {} tokens over 20 s: {seen:?}",
        seen.len()
    );
    assert!(m.rotations() >= 4, "{} rotations", m.rotations());
    assert!(m.is_leader());
    let (status, body) = http_get(replica.addr, "/metrics").await;
    assert_eq!(status, 200);
    for name in [
        "kubean_karpenter_join_token_expiry_seconds",
        "kubean_karpenter_join_token_rotations_total",
        "kubean_karpenter_errors_total",
        "kubean_karpenter_is_leader 1",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
    assert_eq!(http_get(replica.addr, "/healthz").await.0, 200);
    assert_eq!(http_get(replica.addr, "/readyz").await.0, 200);

    // Tokens it replaced are gone: deleted once their overlap passed, before they expired
    // (a second of slack for the last tick).
    let now = Timestamp::now();
    let stale: Vec<_> = token::list_managed(&client, &cluster)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| {
            t.expiration
                .is_some_and(|e| e.duration_since(now).as_secs_f64() < -2.0)
        })
        .map(|t| t.id)
        .collect();
    assert!(stale.is_empty(), "expired tokens left: {stale:?}");
    assert!(m.deleted() >= 2, "{} deleted", m.deleted());
    assert!(
        secret_exists(&client, &foreign).await,
        "a foreign token was deleted"
    );
    assert!(
        secret_exists(&client, theirs.id()).await,
        "another cluster's token was deleted"
    );

    // The stored token joins as a node bootstrapper would.
    let stored = check_valid(&client, &store).await.unwrap();
    let (user, _) = wait_auth(&testbed, &stored.token.expose(), true)
        .await
        .unwrap();
    assert_eq!(user, format!("system:bootstrap:{}", stored.token.id()));

    // Graceful stop releases the lease.
    replica.stop().await;
    assert_eq!(lease_holder(&client, &cluster).await, None);

    // Only tokens it published exist for this cluster (checked once it has stopped, so no
    // rotation slips in between the last look at the store and the list).
    if let Ok(Some(c)) = store.read().await {
        seen.insert(c.token.id().to_owned());
    }
    for t in token::list_managed(&client, &cluster).await.unwrap() {
        assert!(seen.contains(&t.id), "token {} was never published", t.id);
    }

    // Rotation never touched the EC2NodeClasses (the token lives in the store, not userData).
    assert_eq!(render_nodeclasses(), nodeclasses_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader_and_a_follower_takes_over_within_the_lease() {
    let Some(testbed) = require(&repo(), "leader election") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("ha-{}", unique());
    let store = store(
        &testbed,
        StoreKind::SecretsManager,
        &cluster,
        &moto_url(&testbed),
    )
    .await;
    let timing = Timing {
        ttl: Duration::from_secs(12),
        overlap: Duration::from_secs(4),
        tick: Duration::from_secs(1),
        retry: Duration::from_secs(1),
        lease: Duration::from_secs(4),
    };
    let a = Replica::start(
        kube_config(&testbed).await,
        store.clone(),
        config(&testbed, &cluster, &format!("a-{}", unique()), &timing),
    )
    .await;
    let b = Replica::start(
        kube_config(&testbed).await,
        store.clone(),
        config(&testbed, &cluster, &format!("b-{}", unique()), &timing),
    )
    .await;
    wait_published(&store, Duration::from_secs(20)).await;

    // For 10 s: never two leaders, the holder never changes, the follower never rotates.
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader_id = loop {
        match (a.metrics.is_leader(), b.metrics.is_leader()) {
            (true, false) => break a.identity.clone(),
            (false, true) => break b.identity.clone(),
            (true, true) => panic!("two leaders"),
            (false, false) => {
                assert!(Instant::now() < deadline, "no leader");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (leader, follower) = if leader_id == a.identity {
        (a, b)
    } else {
        (b, a)
    };
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        assert!(leader.metrics.is_leader(), "the leader stepped down");
        assert!(!follower.metrics.is_leader(), "two leaders");
        check_valid(&client, &store).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        lease_holder(&client, &cluster).await.as_deref(),
        Some(leader.identity.as_str())
    );
    assert!(
        leader.metrics.rotations() >= 2,
        "{}",
        leader.metrics.rotations()
    );
    assert_eq!(follower.metrics.rotations(), 0);
    let (_, body) = http_get(follower.addr, "/metrics").await;
    assert!(body.contains("kubean_karpenter_is_leader 0"), "{body}");
    // Followers read the store too: the expiry gauge is set everywhere.
    assert!(follower.metrics.stored_expiration().is_some());

    // Kill the leader (no release): the follower takes over within the lease duration.
    leader.kill();
    let killed = Instant::now();
    while !follower.metrics.is_leader() {
        assert!(
            killed.elapsed() < timing.lease + Duration::from_secs(3),
            "no takeover {:?} after the leader died",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let takeover = killed.elapsed();
    eprintln!("takeover after {takeover:?} (lease {:?})", timing.lease);
    assert!(
        takeover <= timing.lease + Duration::from_millis(1500),
        "takeover took {takeover:?}"
    );
    assert_eq!(
        lease_holder(&client, &cluster).await.as_deref(),
        Some(follower.identity.as_str())
    );
    // And the store stays valid under the new leader across a rotation.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        check_valid(&client, &store).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(follower.metrics.rotations() >= 1);
    follower.stop().await;
    assert_eq!(lease_holder(&client, &cluster).await, None);
}

/// Waits until the poller sees a token it has not seen (right after a rotation).
async fn wait_new_token(store: &JoinStore, seen: &mut BTreeSet<String>, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(c)) = store.read().await
            && seen.insert(c.token.id().to_owned())
        {
            return;
        }
        assert!(Instant::now() < deadline, "no rotation within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_recovers_from_apiserver_and_aws_outages() {
    let Some(testbed) = require(&repo(), "outage recovery") else {
        return;
    };
    let client = admin(&testbed).await;
    let cluster = format!("out-{}", unique());
    let kube_proxy = Proxy::start(apiserver_addr(&testbed)).await;
    let aws_proxy = Proxy::start(moto_addr(&testbed)).await;
    // The test reads moto directly; the controller only through the proxies.
    let direct = store(&testbed, StoreKind::Ssm, &cluster, &moto_url(&testbed)).await;
    let proxied = store(
        &testbed,
        StoreKind::Ssm,
        &cluster,
        &format!("http://{}", aws_proxy.addr),
    )
    .await;
    let timing = Timing {
        ttl: Duration::from_secs(6),
        overlap: Duration::from_secs(2),
        tick: Duration::from_secs(1),
        retry: Duration::from_secs(3),
        lease: Duration::from_secs(6),
    };
    let replica = Replica::start(
        kube_config_via(&testbed, kube_proxy.addr).await,
        proxied,
        config(&testbed, &cluster, &format!("out-{}", unique()), &timing),
    )
    .await;
    let mut seen = BTreeSet::new();
    wait_new_token(&direct, &mut seen, Duration::from_secs(20)).await;

    // 1. Mid-rotation failure: right after a rotation, PutParameter starts failing (the
    //    connection drops with the request, as when AWS dies mid-call) for longer than the
    //    rotation point. Each attempt creates a token, fails to publish, reads the store
    //    back (still the old token) and deletes the new one again.
    wait_new_token(&direct, &mut seen, Duration::from_secs(10)).await;
    let errors_before = replica.metrics.errors();
    aws_proxy.block(b"AmazonSSM.PutParameter");
    let blocked_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < blocked_until {
        // The stored (old) token still exists: no rollback deleted it.
        let stored = direct.read().await.unwrap().unwrap();
        assert!(seen.contains(stored.token.id()));
        assert!(
            token::lookup(&client, &stored.token)
                .await
                .unwrap()
                .is_some()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The rotation point falls 4 s into a token's life and the SDK backs off before it gives
    // up, so on a busy machine the first failure may be counted after the window above; wait
    // for it (the old token may expire meanwhile, which is why the window checks stop here).
    let give_up = Instant::now() + Duration::from_secs(20);
    while replica.metrics.errors() == errors_before {
        assert!(
            Instant::now() < give_up,
            "no publish failed while PutParameter was blocked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failed_attempts = replica.metrics.errors() - errors_before;
    aws_proxy.restore();
    let restored = Instant::now();
    loop {
        match check_valid(&client, &direct).await {
            Ok(c) if !seen.contains(c.token.id()) => break,
            _ => {}
        }
        assert!(
            restored.elapsed() < timing.retry + Duration::from_secs(2),
            "no valid new token {:?} after AWS came back",
            restored.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "PutParameter outage: {failed_attempts} failed rotation(s), valid again after {:?}",
        restored.elapsed()
    );
    let current = direct.read().await.unwrap().unwrap();
    seen.insert(current.token.id().to_owned());
    // No token of ours that was never published: the failed attempts were rolled back.
    for t in token::list_managed(&client, &cluster).await.unwrap() {
        assert!(
            seen.contains(&t.id),
            "orphan token {} (never published)",
            t.id
        );
    }

    // 2. The apiserver and AWS both go away, longer than a token lives.
    wait_new_token(&direct, &mut seen, Duration::from_secs(10)).await;
    kube_proxy.cut();
    aws_proxy.cut();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(http_get(replica.addr, "/healthz").await.0, 200);
    kube_proxy.restore();
    aws_proxy.restore();
    let restored = Instant::now();
    loop {
        if check_valid(&client, &direct).await.is_ok() {
            break;
        }
        assert!(
            restored.elapsed() < timing.retry + Duration::from_secs(2),
            "the store was not valid {:?} after the outage",
            restored.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered = restored.elapsed();
    eprintln!(
        "apiserver + AWS outage: valid again after {recovered:?} (retry {:?})",
        timing.retry
    );
    assert!(replica.metrics.is_leader());
    // Valid from then on.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        check_valid(&client, &direct).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(http_get(replica.addr, "/readyz").await.0, 200);
    replica.stop().await;
}

//! Issue #47 item 9: the controller's unauthenticated metrics listener under a flood. A
//! bounded, benchmark-style run (not a timing assertion): a rotating controller on the
//! testbed, its listener on 127.0.0.1 with the default limits, then slowloris connections
//! and many more connections than the cap, all from this process and for a fixed time.
//! What must hold: the accepted sockets never exceed the cap (counted by the kernel, not by
//! the listener), slow headers are cut off, `/healthz` keeps answering a prober the way the
//! kubelet would judge it, and the rotator keeps rotating.

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use kk_live::controller::listener::Limits;
use kk_live::controller::{Controller, ControllerConfig, LeaseConfig};
use kk_live::store::StoreKind;
use kk_testkit::testbed::require;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The inodes of the sockets this network namespace holds accepted (they have an inode: a
/// file in some process) on `port`'s server side. Unaccepted ones in the listen backlog, and
/// closed ones waiting out FIN or TIME_WAIT, have inode 0.
fn accepted_sockets(port: u16) -> BTreeSet<String> {
    let mut inodes = BTreeSet::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // 0A: LISTEN, the listening socket itself.
            if local_port == Some(port)
                && f.get(3) != Some(&"0A")
                && let Some(inode) = f.get(9).filter(|i| **i != "0")
            {
                inodes.insert(inode.to_string());
            }
        }
    }
    inodes
}

/// Sockets that were open at one same instant, as the kernel counts them. One read of
/// `/proc/net/tcp` is no snapshot: it walks the hash table in pages while sockets close and
/// open, so under a flood it can list a socket closed early in the walk beside one accepted
/// late in it, and overcount (the first runs saw 37-42 against a cap of 32). Two reads in a row
/// fix it: inodes are not reused and a closed socket never reopens, so a socket listed by both
/// was open from its first sighting to its second, and all of them were open at once at the
/// instant between the two reads. The count is a lower bound of what was open then, never more.
fn sockets_open_at_once(port: u16) -> usize {
    let first = accepted_sockets(port);
    let second = accepted_sockets(port);
    first.intersection(&second).count()
}

/// A slowloris client: a request line, then one header byte a second, never the blank line.
/// Returns how long the server let it live (a failed connect counts as closed at once;
/// `None`: still open at `give_up`).
async fn slowloris(addr: SocketAddr, give_up: Duration) -> Option<Duration> {
    let started = Instant::now();
    let Ok(Ok(mut s)) =
        tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
    else {
        return Some(started.elapsed());
    };
    if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .is_err()
    {
        return Some(started.elapsed());
    }
    let mut buf = [0u8; 512];
    while started.elapsed() < give_up {
        if s.write_all(b"X").await.is_err() {
            return Some(started.elapsed());
        }
        // The server's close shows as EOF or a reset on read.
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            // A 408 or 431 answer is a close too: read on to the EOF.
            Ok(Ok(_)) => {}
            Err(_) => {}
        }
    }
    None
}

/// One probe as the kubelet makes it: a fresh connection, GET, status line within 3 s.
async fn probe(addr: SocketAddr) -> Result<(), String> {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        let answer = String::from_utf8_lossy(&answer);
        if answer.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(format!("answer: {answer:?}"))
        }
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .map_err(|_| "no answer within 3 s".to_owned())?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_stays_under_the_cap_and_neither_probes_nor_rotation_starve() {
    let Some(testbed) = require(&repo(), "listener flood") else {
        return;
    };
    let limits = Limits::default();
    let cluster = format!("flood-{}", unique());
    let store = store(&testbed, StoreKind::Ssm, &cluster, &moto_url(&testbed)).await;
    // A 6 s TTL rotates about every 3 s: several rotations fall inside the flood.
    let config = ControllerConfig {
        cluster: cluster.clone(),
        api_server_endpoint: "api.test.internal:6443".into(),
        ca_cert_hash: testbed_ca_hash(&testbed),
        ttl: Duration::from_secs(6),
        rotate_at: 0.5,
        overlap: Duration::from_secs(2),
        approve_every: None,
        orphan_grace: None,
        tick: Duration::from_secs(1),
        retry: Duration::from_secs(1),
        lease: LeaseConfig {
            namespace: "kube-system".into(),
            name: format!("rotator-{cluster}"),
            identity: format!("flood-{}", unique()),
            duration: Duration::from_secs(6),
        },
    };
    let mut controller = Controller::new(kube_config(&testbed).await, store, config).unwrap();
    let addr = controller
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let stats = controller.listener_stats().unwrap();
    let metrics = controller.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + Duration::from_secs(30);
    while metrics.rotations() == 0 {
        assert!(Instant::now() < deadline, "no first token within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // (b) Slow headers alone, far below the cap: each is cut off by the header timeout (not
    // by eviction: nothing else connects), well before our own 20 s give-up.
    let slow: Vec<_> = (0..4)
        .map(|_| tokio::spawn(slowloris(addr, Duration::from_secs(20))))
        .collect();
    for s in slow {
        let lived = s.await.unwrap().expect("a slow header outlived 20 s");
        assert!(
            lived >= limits.header_timeout.mul_f64(0.8),
            "closed after {lived:?}, before the header timeout: not by it"
        );
    }
    assert_eq!(stats.evicted(), 0);

    // The flood: for 15 s, 3× the cap in slowloris connections (reopened when closed) and a
    // churner that opens silent connections as fast as it can, holding up to 300 at a time
    // and at most 5000 in all. Meanwhile a sampler reads the kernel's socket table and a
    // prober checks /healthz every half second.
    let flood_for = Duration::from_secs(15);
    let until = Instant::now() + flood_for;
    let done = Arc::new(AtomicBool::new(false));
    let rotations_before = metrics.rotations();
    let mut workers = Vec::new();
    for _ in 0..limits.max_connections * 3 {
        workers.push(tokio::spawn(async move {
            while Instant::now() < until {
                match slowloris(addr, until - Instant::now()).await {
                    None => break,
                    // Refused or reset at once: do not spin.
                    Some(lived) if lived < Duration::from_millis(100) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Some(_) => {}
                }
            }
        }));
    }
    let opened = Arc::new(AtomicUsize::new(0));
    let churn = {
        let opened = opened.clone();
        tokio::spawn(async move {
            let mut held = VecDeque::new();
            while Instant::now() < until && opened.load(Ordering::Relaxed) < 5000 {
                if let Ok(Ok(s)) =
                    tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await
                {
                    opened.fetch_add(1, Ordering::Relaxed);
                    held.push_back(s);
                    if held.len() > 300 {
                        held.pop_front();
                    }
                }
            }
        })
    };
    let sampler = {
        let done = done.clone();
        let sampled = stats.clone();
        tokio::spawn(async move {
            let (mut max, mut max_single_read, mut max_served, mut samples) = (0, 0, 0, 0);
            while !done.load(Ordering::Relaxed) {
                max = max.max(sockets_open_at_once(addr.port()));
                max_single_read = max_single_read.max(accepted_sockets(addr.port()).len());
                max_served = max_served.max(sampled.open());
                samples += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (max, max_single_read, max_served, samples)
        })
    };
    let mut probes = Vec::new();
    while Instant::now() < until {
        probes.push(probe(addr).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    churn.await.unwrap();
    for w in workers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let (max_open, max_single_read, max_served, samples) = sampler.await.unwrap();
    let rotated = metrics.rotations() - rotations_before;
    let failures: Vec<_> = probes.iter().filter_map(|p| p.as_ref().err()).collect();
    eprintln!(
        "flood: {} silent connections opened, {} evicted, at most {max_open} accepted sockets \
         open at once in {samples} samples (one read alone: {max_single_read}; the listener's \
         own count: {max_served}; cap {}), {}/{} probes answered, {rotated} rotations",
        opened.load(Ordering::Relaxed),
        stats.evicted(),
        limits.max_connections,
        probes.len() - failures.len(),
        probes.len(),
    );

    // (a) Never more than the cap, and the flood did reach it (or the test proves nothing).
    assert!(
        max_open <= limits.max_connections,
        "{max_open} sockets open at once"
    );
    // The listener's own count leaves one for the socket in hand.
    assert!(
        max_served < limits.max_connections,
        "the listener served {max_served}"
    );
    assert!(
        max_served >= limits.max_connections - 1 && stats.evicted() > 0,
        "the flood never filled the listener: {max_served} served, {} evicted",
        stats.evicted()
    );
    // (c) The kubelet restarts a container after 3 failed probes in a row (its default
    // failureThreshold): that never happens.
    assert!(
        !probes.windows(3).any(|w| w.iter().all(Result::is_err)),
        "3 probes in a row failed: {failures:?}"
    );
    assert!(probes.len() >= 10, "only {} probes ran", probes.len());
    // (d) The rotator's loop went on.
    assert!(rotated >= 1, "no rotation during the flood");

    // Afterwards everything is closed within the header timeout and the listener serves.
    tokio::time::sleep(limits.header_timeout + Duration::from_secs(1)).await;
    assert_eq!(accepted_sockets(addr.port()).len(), 0);
    probe(addr).await.unwrap();
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(45), task)
        .await
        .expect("the controller stops")
        .unwrap();
}

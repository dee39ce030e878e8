//! The controller's HTTP listener (`/metrics`, `/healthz`, `/readyz`). It is unauthenticated
//! and reachable from every pod (host port 8093 on the infra workers) while the controller
//! lives under a 128 Mi memory limit, so what one client can hold is bounded: at most
//! [`Limits::max_connections`] sockets (the oldest is closed to admit a new one, so a flood of
//! idle or slow connections cannot lock out the kubelet's probe), headers within
//! [`Limits::header_timeout`], each connection at most [`Limits::connection_timeout`], headers
//! at most [`Limits::max_header_bytes`], and no request body at all (every route is a GET).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Sockets open at once, the one being accepted included.
    pub max_connections: usize,
    /// From the connection's start (or the end of its last response) to a complete header.
    pub header_timeout: Duration,
    /// A connection's whole life: a slow body or a client that never reads the answer.
    pub connection_timeout: Duration,
    /// hyper's read buffer; a longer header is answered 431 (hyper's floor is 8 KiB).
    pub max_header_bytes: usize,
}

impl Default for Limits {
    /// Prometheus and the kubelet's probes need a handful of connections; 32 sockets with
    /// 16 KiB buffers are well under a megabyte.
    fn default() -> Self {
        Limits {
            max_connections: 32,
            header_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// A bound listener; [`HttpListener::serve`] runs it.
pub struct HttpListener {
    tcp: TcpListener,
    limits: Limits,
    state: Arc<State>,
}

/// What tests and callers can see while it runs.
#[derive(Clone)]
pub struct ListenerStats(Arc<State>);

impl ListenerStats {
    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.0.served.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Connections closed to admit a newer one.
    pub fn evicted(&self) -> u64 {
        self.0.evicted.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct State {
    /// Served connections, oldest first: (id, how to close it).
    served: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    evicted: AtomicU64,
}

impl HttpListener {
    pub async fn bind(addr: SocketAddr, limits: Limits) -> std::io::Result<HttpListener> {
        Ok(HttpListener {
            tcp: TcpListener::bind(addr).await?,
            limits,
            state: Arc::default(),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    pub fn stats(&self) -> ListenerStats {
        ListenerStats(self.state.clone())
    }

    /// Serves `router` until `stop` turns true, then lets open requests finish (each within its
    /// connection timeout) and returns.
    pub async fn serve(self, router: Router, mut stop: watch::Receiver<bool>) {
        let HttpListener { tcp, limits, state } = self;
        let router = router.layer(axum::middleware::from_fn(refuse_bodies));
        // One socket is the one in hand: the served ones stay one below the cap.
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(2) - 1));
        let mut next_id = 0u64;
        loop {
            let accepted = tokio::select! {
                a = tcp.accept() => a,
                _ = wait_stop(&mut stop) => break,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or the like: let some close before trying again.
                    tracing::warn!(error = %e, "the metrics listener cannot accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let permit = match slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    // Full: close the oldest, then take its slot (it closes at once).
                    let oldest = state.served.lock().ok().and_then(|s| s.front().cloned());
                    if let Some((_, close)) = oldest {
                        close.notify_one();
                        state.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::select! {
                        p = slots.clone().acquire_owned() => match p {
                            Ok(p) => p,
                            Err(_) => break,
                        },
                        _ = wait_stop(&mut stop) => break,
                    }
                }
            };
            next_id += 1;
            let id = next_id;
            let close = Arc::new(Notify::new());
            if let Ok(mut served) = state.served.lock() {
                served.push_back((id, close.clone()));
            }
            let router = router.clone();
            let state = state.clone();
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let mut http = hyper::server::conn::http1::Builder::new();
                http.timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .max_buf_size(limits.max_header_bytes.max(8192));
                let mut conn = Box::pin(
                    http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router)),
                );
                let life = tokio::time::sleep(limits.connection_timeout);
                tokio::pin!(life);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = &mut life => {}
                    _ = close.notified() => {}
                    _ = wait_stop(&mut stop) => {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout_at(life.deadline(), conn.as_mut()).await;
                    }
                }
                // The socket closes before the slot is given back.
                drop(conn);
                if let Ok(mut served) = state.served.lock() {
                    served.retain(|(i, _)| *i != id);
                }
                drop(permit);
            });
        }
        drop(tcp);
        // Every connection gives its slot back within its timeout.
        let all = u32::try_from(limits.max_connections.max(2) - 1).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(
            limits.connection_timeout + Duration::from_secs(1),
            slots.acquire_many(all),
        )
        .await;
    }
}

async fn wait_stop(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            // The sender is gone: nobody can ask to stop any more.
            std::future::pending::<()>().await;
        }
    }
}

/// Every route is a GET: a request that announces a body is refused unread.
async fn refuse_bodies(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONNECTION, "close")],
            "no request body is accepted\n",
        )
            .into_response();
    }
    next.run(request).await
}

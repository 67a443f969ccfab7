//! The HTTP server: hyper's HTTP/1 connections, each with the timeouts that
//! keep a slow or idle client from holding the process's connections.
//!
//! - A request's headers must arrive within `server.header_timeout` (hyper's
//!   own timer: from the connection's start for its first request, from the
//!   first byte for the next ones).
//! - Its body must arrive whole within `server.body_timeout` of the request's
//!   start: reading it then fails with [`BodyTimedOut`], which the API
//!   answers with 408.
//! - A keep-alive connection with no request under way and nothing read or
//!   written for `server.idle_timeout` closes.
//! - At most `server.max_connections` connections are served at once (cut to
//!   what the process may open). At the cap, a new connection takes the
//!   place of one without a request under way (half a request's headers,
//!   or idle between requests): the oldest of the peer address holding the
//!   most such connections, if that is another address than the newcomer's,
//!   else the oldest of all if it has waited a second. A client that opens
//!   thousands of half-sent requests loses its own connections, not
//!   others' service. When none can give its place, a few more
//!   connections are accepted for a moment, one request each: `/health/*`
//!   is answered there, anything else gets 503 with `Retry-After`. Beyond
//!   those, a connection is closed as soon as it is accepted.

use std::{
    future::Future,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::{Body, Bytes, HttpBody},
    extract::ConnectInfo,
    http::{header, HeaderValue, Request, Response, StatusCode},
    Router,
};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{Instant, Sleep},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

use crate::config::ServerConfig;

/// Connections accepted beyond the cap, for `/health/*`.
const OVERFLOW: usize = 256;
/// How long a connection beyond the cap may take to send its request.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a connection must have waited without a request under way to
/// give its place to a new one at the cap.
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);
/// How long a new connection waits for the place of the one it evicted.
const TAKE_PLACE_WITHIN: Duration = Duration::from_millis(500);
/// Files the process keeps for everything but the connections it serves:
/// the database pool, outbound deliveries, logs.
const RESERVED_FILES: u64 = 1024;

/// The connection timeouts and the cap in force.
#[derive(Debug, Clone, Copy)]
pub struct Connections {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Connections {
    /// `server`'s settings, the cap cut to what the process may open (its
    /// limit of open files raised as far as it may be first).
    pub fn from_config(server: &ServerConfig) -> Self {
        let wanted = server.max_connections;
        let files = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
        let max_connections = if files == 0 {
            wanted
        } else {
            let room = files.saturating_sub(RESERVED_FILES).max(files / 2);
            wanted
                .min(usize::try_from(room).unwrap_or(usize::MAX))
                .max(1)
        };
        if max_connections < wanted {
            tracing::warn!(
                wanted,
                max_connections,
                open_files = files,
                "server.max_connections is cut to what the process may open"
            );
        }
        Self {
            header_timeout: server.header_timeout,
            body_timeout: server.body_timeout,
            idle_timeout: server.idle_timeout,
            max_connections,
        }
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets the connections
/// finish their requests under way (idle ones close at once).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Connections,
    shutdown: CancellationToken,
) {
    let served = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW));
    let idle = Arc::new(Idle::default());
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of files or memory: wait a little rather than spin.
                if !is_connection_error(&e) {
                    tracing::error!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn {
            peer,
            app: app.clone(),
            limits,
            idle: idle.clone(),
            shutdown: shutdown.clone(),
        };
        match served.clone().try_acquire_owned() {
            Ok(p) => {
                connections.spawn(conn.serve(stream, Lane::Served(p)));
            }
            // At the cap: a connection without a request gives its place
            // (`Idle::evict_for`).
            Err(_) if idle.evict_for(peer.ip(), EVICTABLE_AFTER) => {
                let served = served.clone();
                let overflow = overflow.clone();
                connections.spawn(async move {
                    let lane = match tokio::time::timeout(TAKE_PLACE_WITHIN, served.acquire_owned())
                        .await
                    {
                        Ok(Ok(p)) => Lane::Served(p),
                        _ => match overflow.try_acquire_owned() {
                            Ok(p) => Lane::Overflow(p),
                            Err(_) => {
                                metrics::counter!(crate::metrics::CONNECTIONS_REFUSED).increment(1);
                                return;
                            }
                        },
                    };
                    conn.serve(stream, lane).await;
                });
            }
            Err(_) => match overflow.clone().try_acquire_owned() {
                Ok(p) => {
                    connections.spawn(conn.serve(stream, Lane::Overflow(p)));
                }
                Err(_) => {
                    metrics::counter!(crate::metrics::CONNECTIONS_REFUSED).increment(1);
                    drop(stream);
                }
            },
        }
    }
    connections.close();
    connections.wait().await;
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// A connection within the cap, or one beyond it (health only).
enum Lane {
    Served(#[allow(dead_code)] OwnedSemaphorePermit),
    Overflow(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// What serving one connection needs.
struct Conn {
    peer: SocketAddr,
    app: Router,
    limits: Connections,
    idle: Arc<Idle>,
    shutdown: CancellationToken,
}

impl Conn {
    async fn serve(self, stream: TcpStream, lane: Lane) {
        let Conn {
            peer,
            app,
            limits,
            idle,
            shutdown,
        } = self;
        let beyond_cap = matches!(lane, Lane::Overflow(_));
        let evicted = CancellationToken::new();
        let activity = Arc::new(Activity::new(idle, peer.ip(), evicted.clone(), !beyond_cap));
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let app = app.clone();
                let busy = activity.begin();
                async move {
                    if beyond_cap && !req.uri().path().starts_with("/health/") {
                        drop(busy);
                        return Ok::<_, std::convert::Infallible>(too_many_connections());
                    }
                    let mut req = req.map(|body| Deadline::new(body, limits.body_timeout));
                    req.extensions_mut().insert(ConnectInfo(peer));
                    let response = app.oneshot(req).await;
                    drop(busy);
                    response
                }
            })
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(if beyond_cap {
                OVERFLOW_HEADER_TIMEOUT.min(limits.header_timeout)
            } else {
                limits.header_timeout
            })
            .keep_alive(!beyond_cap);
        let io = TokioIo::new(Watched {
            inner: stream,
            activity: activity.clone(),
        });
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        let mut closing = false;
        loop {
            let idle_at = activity.idle_at(limits.idle_timeout);
            tokio::select! {
                done = conn.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(error = %e, %peer, "connection ended");
                    }
                    break;
                }
                // Its place went to a new connection: closed at once (it
                // had no request under way).
                _ = evicted.cancelled() => break,
                _ = shutdown.cancelled(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = tokio::time::sleep_until(idle_at), if !closing => {
                    if activity.is_idle(limits.idle_timeout) {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        }
        activity.forget();
    }
}

/// The connections with no request under way, oldest first, and by peer
/// address: at the cap, one gives its place to a new connection.
#[derive(Default)]
struct Idle {
    inner: std::sync::Mutex<IdleInner>,
}

#[derive(Default)]
struct IdleInner {
    next: u64,
    /// Registration order → (since when, its peer, the connection's eviction).
    order: std::collections::BTreeMap<u64, (Instant, IpAddr, CancellationToken)>,
    /// Each peer's waiting connections, in registration order.
    by_peer: std::collections::HashMap<IpAddr, std::collections::BTreeSet<u64>>,
}

impl IdleInner {
    fn take(&mut self, key: u64) -> Option<CancellationToken> {
        let (_, peer, evict) = self.order.remove(&key)?;
        if let Some(keys) = self.by_peer.get_mut(&peer) {
            keys.remove(&key);
            if keys.is_empty() {
                self.by_peer.remove(&peer);
            }
        }
        Some(evict)
    }
}

impl Idle {
    fn add(&self, peer: IpAddr, evict: &CancellationToken) -> u64 {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = i.next;
        i.next += 1;
        i.order.insert(key, (Instant::now(), peer, evict.clone()));
        i.by_peer.entry(peer).or_default().insert(key);
        key
    }

    fn remove(&self, key: u64) {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        i.take(key);
    }

    /// Makes room for a new connection from `newcomer`: closes the oldest
    /// waiting connection of the peer that has the most waiting, if that is
    /// another peer with several; else the oldest waiting connection of
    /// all, if it has waited `at_least`. Whether one was closed.
    fn evict_for(&self, newcomer: IpAddr, at_least: Duration) -> bool {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let heaviest = i
            .by_peer
            .iter()
            .max_by_key(|(_, keys)| keys.len())
            .filter(|(peer, keys)| **peer != newcomer && keys.len() > 1)
            .and_then(|(_, keys)| keys.first().copied());
        let key = match heaviest {
            Some(key) => key,
            None => match i.order.first_key_value() {
                Some((&key, (since, ..))) if since.elapsed() >= at_least => key,
                _ => return false,
            },
        };
        match i.take(key) {
            Some(evict) => {
                evict.cancel();
                true
            }
            None => false,
        }
    }
}

fn too_many_connections() -> Response<Body> {
    let problem = crate::wire::problem::Problem {
        kind: "https://dispatch.dev/problems/unavailable".into(),
        title: "Service unavailable".into(),
        status: 503,
        detail: "the server has as many connections as it serves; try again shortly".into(),
        errors: None,
    };
    let mut response = Response::new(Body::from(serde_json::to_vec(&problem).unwrap_or_default()));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What a connection is doing: requests under way, and when it last read or
/// wrote (ms after `start`); while none is under way, it is in `idle`
/// (unless it is beyond the cap, where it takes no place).
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    requests: AtomicUsize,
    idle: Arc<Idle>,
    evicted: CancellationToken,
    /// Its key in `idle` while it waits there.
    waiting: std::sync::Mutex<Option<u64>>,
    /// Whether it takes a place (within the cap) that it can give up.
    evictable: bool,
    peer: IpAddr,
}

impl Activity {
    fn new(idle: Arc<Idle>, peer: IpAddr, evicted: CancellationToken, evictable: bool) -> Self {
        let waiting = evictable.then(|| idle.add(peer, &evicted));
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            requests: AtomicUsize::new(0),
            idle,
            evicted,
            waiting: std::sync::Mutex::new(waiting),
            evictable,
            peer,
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Out of `idle` (a request began, or the connection ended).
    fn leave_idle(&self) {
        if let Some(key) = self.waiting().take() {
            self.idle.remove(key);
        }
    }

    /// The connection ended: out of `idle` for good.
    fn forget(&self) {
        self.evicted.cancel();
        self.leave_idle();
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn begin(self: &Arc<Self>) -> Busy {
        if self.requests.fetch_add(1, Ordering::Relaxed) == 0 {
            self.leave_idle();
        }
        Busy(self.clone())
    }

    /// When the connection is idle long enough, if nothing happens before.
    fn idle_at(&self, idle: Duration) -> Instant {
        let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        if self.requests.load(Ordering::Relaxed) > 0 {
            Instant::now() + idle
        } else {
            last + idle
        }
    }

    fn is_idle(&self, idle: Duration) -> bool {
        self.requests.load(Ordering::Relaxed) == 0 && Instant::now() >= self.idle_at(idle)
    }
}

/// A request under way on a connection, until dropped.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        a.touch();
        if a.requests.fetch_sub(1, Ordering::Relaxed) == 1
            && a.evictable
            && !a.evicted.is_cancelled()
        {
            let mut waiting = a.waiting();
            if waiting.is_none() {
                *waiting = Some(a.idle.add(a.peer, &a.evicted));
            }
        }
    }
}

/// The connection's socket, noting each read and write.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body not read whole within `server.body_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", .0.as_secs_f64())]
pub struct BodyTimedOut(pub Duration);

/// Whether reading a body failed because it came too slowly.
pub fn timed_out(mut e: &(dyn std::error::Error + 'static)) -> bool {
    loop {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        match e.source() {
            Some(next) => e = next,
            None => return false,
        }
    }
}

/// A request body with a deadline for its last byte. The timer is set only
/// if the body is not all there when first read.
struct Deadline {
    inner: Incoming,
    deadline: Instant,
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    fn new(inner: Incoming, limit: Duration) -> Self {
        Self {
            inner,
            deadline: Instant::now() + limit,
            limit,
            sleep: None,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

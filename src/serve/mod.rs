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

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{header, HeaderValue, Request, Response, StatusCode},
    Router,
};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

use crate::config::ServerConfig;

mod activity;
mod body;

use activity::{Activity, Idle, Watched};
use body::Deadline;
pub use body::{timed_out, BodyTimedOut};

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

//! Webhook requests over HTTP/1.1 connections kept per origin: a request
//! takes an idle connection (the one used last) or opens one, and gives it
//! back once its response was read to the end. Opening one resolves the host
//! through the private-network guard, so every connection is judged by the
//! addresses it goes to (docs/api.md#private-networks).
//!
//! Each request costs one `send_request` on a connection already open: no
//! per-request client, connector or URL to clone or parse (with reqwest a
//! webhook's request cost the service about a third more of its CPU).

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, client::conn::http1, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpStream, time::Instant};
use tokio_rustls::{rustls, TlsConnector};
use url::{Host, Url};

use super::{guard, resolver::Resolver};

type Sender = http1::SendRequest<Full<Bytes>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// At most this many idle connections are kept per origin.
const MAX_IDLE_PER_ORIGIN: usize = 512;
/// An idle connection unused this long is closed rather than used.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a connection goes: scheme, host and port of a URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    https: bool,
    host: String,
    port: u16,
}

impl Origin {
    /// None for a URL that is not http(s) with a host.
    pub fn of(url: &Url) -> Option<Self> {
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        Some(Self {
            https,
            host: url.host_str()?.to_string(),
            port: url.port_or_known_default()?,
        })
    }
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be opened (refused, unreachable, TLS, the guard).
    #[error("{0}")]
    Connect(#[source] BoxError),
    /// The connection failed while the request was sent or answered.
    #[error("{0}")]
    Request(#[source] hyper::Error),
}

pub struct Connections {
    idle: Mutex<Idle>,
    tls: TlsConnector,
    connect_timeout: Duration,
    allow_private: bool,
    /// Where the guard looks names up (unused while private networks are allowed).
    names: Resolver,
    idle_timeout: Duration,
}

/// Idle connections by origin, newest last; every `idle_timeout` the lot is
/// swept, so that origins no longer used do not keep connections open.
#[derive(Default)]
struct Idle {
    by_origin: HashMap<Origin, VecDeque<(Sender, Instant)>>,
    swept: Option<Instant>,
}

/// A connection lent to one request; `give_back` once its response body was
/// read to the end, or drop it to close the connection.
pub struct Lent {
    origin: Origin,
    sender: Sender,
}

impl Connections {
    pub fn new(connect_timeout: Duration, allow_private: bool, names: Resolver) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        Self::trusting(roots, connect_timeout, allow_private, names)
    }

    /// Connections that trust these roots for https.
    fn trusting(
        roots: rustls::RootCertStore,
        connect_timeout: Duration,
        allow_private: bool,
        names: Resolver,
    ) -> Self {
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            idle: Mutex::new(Idle::default()),
            tls: TlsConnector::from(Arc::new(config)),
            connect_timeout,
            allow_private,
            names,
            idle_timeout: IDLE_TIMEOUT,
        }
    }

    #[cfg(test)]
    fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// Sends `request` (its URI in origin form: path and query) to `origin`.
    /// A request that an idle connection could not take (closed by the
    /// receiver meanwhile) goes on a new one.
    pub async fn send(
        &self,
        origin: Origin,
        mut request: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Lent), SendError> {
        while let Some(mut sender) = self.idle_for(&origin) {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(response) => return Ok((response, Lent { origin, sender })),
                Err(mut e) => match e.take_message() {
                    // Not sent: the connection was closing; another one.
                    Some(unsent) => request = unsent,
                    None => return Err(SendError::Request(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(&origin).await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(SendError::Request)?;
        Ok((response, Lent { origin, sender }))
    }

    /// The idle connection to `origin` used last, if one is still open.
    fn idle_for(&self, origin: &Origin) -> Option<Sender> {
        let mut idle = self.idle.lock().expect("not poisoned");
        let list = idle.by_origin.get_mut(origin)?;
        while let Some((sender, since)) = list.pop_back() {
            if !sender.is_closed() && since.elapsed() < self.idle_timeout {
                return Some(sender);
            }
        }
        None
    }

    /// Keeps a connection whose response was read to the end, for the next
    /// request to its origin.
    pub fn give_back(&self, lent: Lent) {
        if lent.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().expect("not poisoned");
        let now = Instant::now();
        let stale = |(s, since): &(Sender, Instant)| {
            s.is_closed() || now.duration_since(*since) >= self.idle_timeout
        };
        if idle
            .swept
            .is_none_or(|at| now.duration_since(at) >= self.idle_timeout)
        {
            idle.swept = Some(now);
            idle.by_origin.retain(|_, list| {
                list.retain(|c| !stale(c));
                !list.is_empty()
            });
        }
        let list = idle.by_origin.entry(lent.origin).or_default();
        while list.front().is_some_and(stale) {
            list.pop_front();
        }
        if list.len() < MAX_IDLE_PER_ORIGIN {
            list.push_back((lent.sender, now));
        }
    }

    /// Opens a connection: the host resolved through the guard (an IP
    /// literal judged by it too), each address tried in turn within
    /// `webhook.connect_timeout`, TLS for https.
    async fn connect(&self, origin: &Origin) -> Result<Sender, SendError> {
        let opened = tokio::time::timeout(self.connect_timeout, self.open(origin)).await;
        match opened {
            Ok(result) => result.map_err(SendError::Connect),
            Err(_) => Err(SendError::Connect(
                format!(
                    "no connection within {}ms",
                    self.connect_timeout.as_millis()
                )
                .into(),
            )),
        }
    }

    async fn open(&self, origin: &Origin) -> Result<Sender, BoxError> {
        let stream = self.tcp(origin).await?;
        stream.set_nodelay(true)?;
        if origin.https {
            let name = rustls::pki_types::ServerName::try_from(host_name(&origin.host))?.to_owned();
            let tls = self.tls.connect(name, stream).await?;
            handshake(tls).await
        } else {
            handshake(stream).await
        }
    }

    async fn tcp(&self, origin: &Origin) -> Result<TcpStream, BoxError> {
        let host = host_name(&origin.host);
        let literal = match Host::parse(host) {
            Ok(Host::Ipv4(ip)) => Some(std::net::IpAddr::from(ip)),
            Ok(Host::Ipv6(ip)) => Some(ip.into()),
            _ => None,
        };
        let addrs: Vec<SocketAddr> = match literal {
            // An address written in the URL is judged as a resolved one is.
            Some(ip) if !self.allow_private && guard::is_forbidden(ip) => {
                return Err(Box::new(guard::PrivateAddressRefused {
                    host: origin.host.clone(),
                }))
            }
            Some(ip) => vec![SocketAddr::new(ip, origin.port)],
            _ if self.allow_private => tokio::net::lookup_host((host, origin.port))
                .await?
                .collect(),
            _ => guard::resolve_public(&self.names, host)
                .await?
                .into_iter()
                .map(|ip| SocketAddr::new(ip, origin.port))
                .collect(),
        };
        let mut last: Option<std::io::Error> = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => e.into(),
            None => format!("{host} has no address").into(),
        })
    }
}

/// An IPv6 literal without its brackets; other hosts as they are.
fn host_name(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

async fn handshake<S>(stream: S) -> Result<Sender, BoxError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // Ends when the receiver closes it, or when it is idle and no
        // longer kept.
        let _ = connection.await;
    });
    Ok(sender)
}

/// Reads up to `keep` bytes of a response body for the record and drains
/// the rest up to `drain`, until `deadline`; true when the body was read to
/// its end (the connection may then serve another request).
pub async fn read_body(
    body: &mut Incoming,
    keep: usize,
    drain: usize,
    deadline: Instant,
    excerpt: &mut Vec<u8>,
) -> bool {
    let mut read = 0usize;
    while read < drain {
        // A small body has come with the head: read without a timer.
        let next = match body.frame().now_or_never() {
            Some(frame) => Ok(frame),
            None => tokio::time::timeout_at(deadline, body.frame()).await,
        };
        match next {
            Ok(Some(Ok(frame))) => {
                if let Some(chunk) = frame.data_ref() {
                    read += chunk.len();
                    if excerpt.len() < keep {
                        let take = (keep - excerpt.len()).min(chunk.len());
                        excerpt.extend_from_slice(&chunk[..take]);
                    }
                }
            }
            Ok(None) => return true,
            Ok(Some(Err(_))) | Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests;

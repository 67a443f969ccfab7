//! Webhook requests over HTTP/1.1 connections kept per origin: a request
//! takes an idle connection (the one used last) or opens one, and gives it
//! back once its response was read to the end. Opening one resolves the host
//! through the private-network guard, so every connection is judged by the
//! addresses it goes to (API.md §3).
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

use super::guard;

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
    pub fn new(connect_timeout: Duration, allow_private: bool) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        Self::trusting(roots, connect_timeout, allow_private)
    }

    /// Connections that trust these roots for https.
    fn trusting(
        roots: rustls::RootCertStore,
        connect_timeout: Duration,
        allow_private: bool,
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
        origin: &Origin,
        mut request: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Lent), SendError> {
        while let Some(mut sender) = self.idle_for(origin) {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(response) => return Ok((response, self.lent(origin, sender))),
                Err(mut e) => match e.take_message() {
                    // Not sent: the connection was closing; another one.
                    Some(unsent) => request = unsent,
                    None => return Err(SendError::Request(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(origin).await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(SendError::Request)?;
        Ok((response, self.lent(origin, sender)))
    }

    fn lent(&self, origin: &Origin, sender: Sender) -> Lent {
        Lent {
            origin: origin.clone(),
            sender,
        }
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
    /// literal was judged before), each address tried in turn within
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
        let addrs: Vec<SocketAddr> = match Host::parse(host) {
            Ok(Host::Ipv4(ip)) => vec![SocketAddr::new(ip.into(), origin.port)],
            Ok(Host::Ipv6(ip)) => vec![SocketAddr::new(ip.into(), origin.port)],
            _ if self.allow_private => tokio::net::lookup_host((host, origin.port))
                .await?
                .collect(),
            _ => guard::resolve_public(host)
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
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    use super::*;

    /// A receiver that answers each request on a connection with 200 "ok",
    /// closing the connection after `per_connection` requests; it counts the
    /// connections it accepted.
    async fn receiver(per_connection: usize) -> (Origin, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    for _ in 0..per_connection {
                        let mut got = Vec::new();
                        // Headers, then the 2-byte body each request carries.
                        let complete = |got: &[u8]| {
                            got.windows(4)
                                .position(|w| w == b"\r\n\r\n")
                                .is_some_and(|end| got.len() >= end + 4 + 2)
                        };
                        while !complete(&got) {
                            let n = socket.read(&mut buf).await.unwrap();
                            if n == 0 {
                                return;
                            }
                            got.extend_from_slice(&buf[..n]);
                        }
                        let close = if per_connection == 1 {
                            "Connection: close\r\n"
                        } else {
                            ""
                        };
                        let answer =
                            format!("HTTP/1.1 200 OK\r\n{close}Content-Length: 2\r\n\r\nok");
                        socket.write_all(answer.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        let url = Url::parse(&format!("http://127.0.0.1:{port}/hook")).unwrap();
        (Origin::of(&url).unwrap(), accepted)
    }

    fn request(origin: &Origin) -> Request<Full<Bytes>> {
        Request::post("/hook")
            .header("host", format!("{}:{}", origin.host, origin.port))
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    }

    async fn exchange(c: &Connections, origin: &Origin) -> Vec<u8> {
        let (response, lent) = c.send(origin, request(origin)).await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut excerpt = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(read_body(&mut body, 1024, 65536, deadline, &mut excerpt).await);
        c.give_back(lent);
        excerpt
    }

    /// How many connections `requests` requests in a row open to a
    /// receiver that closes each connection after `per_connection`.
    async fn connections_opened(per_connection: usize, requests: usize) -> usize {
        let (origin, accepted) = receiver(per_connection).await;
        let c = Connections::new(Duration::from_secs(1), true);
        for _ in 0..requests {
            assert_eq!(exchange(&c, &origin).await, b"ok");
        }
        accepted.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_connection_read_to_the_end_serves_the_next_request() {
        assert_eq!(connections_opened(100, 5).await, 1);
    }

    #[tokio::test]
    async fn a_connection_the_receiver_closed_is_not_used_again() {
        assert_eq!(connections_opened(1, 3).await, 3);
    }

    #[tokio::test]
    async fn connections_idle_too_long_are_closed_whatever_their_origin() {
        let (first, _) = receiver(100).await;
        let (second, _) = receiver(100).await;
        let c = Connections::new(Duration::from_secs(1), true)
            .with_idle_timeout(Duration::from_millis(50));
        exchange(&c, &first).await;
        assert_eq!(c.idle.lock().unwrap().by_origin[&first].len(), 1);
        tokio::time::sleep(Duration::from_millis(60)).await;
        // Giving back a connection to another origin sweeps the first's.
        exchange(&c, &second).await;
        let idle = c.idle.lock().unwrap();
        assert!(!idle.by_origin.contains_key(&first));
        assert_eq!(idle.by_origin[&second].len(), 1);
    }

    /// A receiver over TLS with the certificate of `localhost` and
    /// 127.0.0.1 in `tests/fixtures/tls` (made with openssl: a test CA, and
    /// a P-256 leaf it signed, both valid until 2126), answering one request.
    async fn tls_receiver() -> Origin {
        use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
        let certs = vec![CertificateDer::from_pem_slice(include_bytes!(
            "../../tests/fixtures/tls/localhost.pem"
        ))
        .unwrap()];
        let key =
            PrivateKeyDer::from_pem_slice(include_bytes!("../../tests/fixtures/tls/localhost.key"))
                .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that does not trust the certificate hangs up.
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 8192];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = tls.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                    }
                    let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    tls.write_all(answer.as_bytes()).await.unwrap();
                    tls.flush().await.unwrap();
                });
            }
        });
        let url = Url::parse(&format!("https://localhost:{port}/hook")).unwrap();
        Origin::of(&url).unwrap()
    }

    #[tokio::test]
    async fn https_is_spoken_to_a_receiver_whose_certificate_is_trusted_and_only_then() {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let origin = tls_receiver().await;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                CertificateDer::from_pem_slice(include_bytes!("../../tests/fixtures/tls/ca.pem"))
                    .unwrap(),
            )
            .unwrap();
        let trusting = Connections::trusting(roots, Duration::from_secs(2), true);
        assert_eq!(exchange(&trusting, &origin).await, b"ok");

        // The public roots do not include the test CA: no connection.
        let public = Connections::new(Duration::from_secs(2), true);
        let err = public.send(&origin, request(&origin)).await.err().unwrap();
        assert!(matches!(err, SendError::Connect(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        let origin = Origin::of(&url).unwrap();
        let c = Connections::new(Duration::from_secs(1), true);
        let err = c.send(&origin, request(&origin)).await.err().unwrap();
        assert!(matches!(err, SendError::Connect(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_name_that_resolves_inside_is_refused_by_the_guard() {
        let url = Url::parse("http://localhost:9/").unwrap();
        let origin = Origin::of(&url).unwrap();
        let c = Connections::new(Duration::from_secs(1), false);
        let err = c.send(&origin, request(&origin)).await.err().unwrap();
        assert!(guard::find_refusal(&err).is_some(), "{err:?}");
    }
}

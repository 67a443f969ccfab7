//! The connection pool against real sockets: plain receivers that keep or
//! close their connections, a TLS receiver, refused and guarded addresses.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use super::*;
use crate::delivery::resolver::Resolver;

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
                    let answer = format!("HTTP/1.1 200 OK\r\n{close}Content-Length: 2\r\n\r\nok");
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
    let (response, lent) = c.send(origin.clone(), request(origin)).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut excerpt = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    assert!(read_body(&mut body, 1024, 65536, deadline, &mut excerpt).await);
    c.give_back(lent);
    excerpt
}

/// What a request to `origin` fails with.
async fn failure(c: &Connections, origin: &Origin) -> SendError {
    match c.send(origin.clone(), request(origin)).await {
        Ok(_) => panic!("a request to {origin:?} was answered"),
        Err(e) => e,
    }
}

/// How many connections `requests` requests in a row open to a
/// receiver that closes each connection after `per_connection`.
async fn connections_opened(per_connection: usize, requests: usize) -> usize {
    let (origin, accepted) = receiver(per_connection).await;
    let c = Connections::new(Duration::from_secs(1), true, Resolver::system());
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
    const IDLE: Duration = Duration::from_secs(5);
    let (first, _) = receiver(100).await;
    let (second, _) = receiver(100).await;
    let c =
        Connections::new(Duration::from_secs(1), true, Resolver::system()).with_idle_timeout(IDLE);
    exchange(&c, &first).await;
    assert_eq!(c.idle.lock().unwrap().by_origin[&first].len(), 1);
    // The first origin's connection has been idle longer than IDLE (and
    // the last sweep is as old): set back their instants, not the clock.
    {
        let mut idle = c.idle.lock().unwrap();
        let long_ago = Instant::now() - IDLE * 2;
        idle.swept = Some(long_ago);
        for (_, since) in idle.by_origin.get_mut(&first).unwrap() {
            *since = long_ago;
        }
    }
    // Giving back a connection to another origin sweeps the first's.
    exchange(&c, &second).await;
    let idle = c.idle.lock().unwrap();
    assert!(!idle.by_origin.contains_key(&first));
    assert_eq!(idle.by_origin[&second].len(), 1);
}

/// A test CA and a leaf it signed for `localhost` and 127.0.0.1, made now
/// and valid from ten years before the test's clock to ten years after it,
/// so that no date makes the test fail: (the CA, the leaf, the leaf's key).
fn test_pki() -> (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    use chrono::Datelike;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let year = chrono::Utc::now().year();
    let dated = |mut params: CertificateParams| {
        params.not_before = rcgen::date_time_ymd(year - 10, 1, 1);
        params.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
        params
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = dated(CertificateParams::new(Vec::<String>::new()).unwrap());
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Dispatch test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = dated(
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap(),
    );
    let leaf_cert = leaf.signed_by(&leaf_key, &Issuer::new(ca, ca_key)).unwrap();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der());
    (ca_cert.der().clone(), leaf_cert.der().clone(), key.into())
}

/// A receiver over TLS with `certificate` and its `key`, answering one
/// request on each connection.
async fn tls_receiver(
    certificate: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Origin {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certificate], key)
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
    let (ca, certificate, key) = test_pki();
    let origin = tls_receiver(certificate, key).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let trusting = Connections::trusting(roots, Duration::from_secs(2), true, Resolver::system());
    assert_eq!(exchange(&trusting, &origin).await, b"ok");

    // The public roots do not include the test CA: no connection.
    let public = Connections::new(Duration::from_secs(2), true, Resolver::system());
    let err = failure(&public, &origin).await;
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
    let c = Connections::new(Duration::from_secs(1), true, Resolver::system());
    let err = failure(&c, &origin).await;
    assert!(matches!(err, SendError::Connect(_)), "{err:?}");
}

#[tokio::test]
async fn an_address_inside_written_in_the_url_is_refused_by_the_guard() {
    for url in [
        "http://127.0.0.1:9/",
        "http://[::1]:9/",
        "http://[::ffff:10.0.0.1]:9/",
    ] {
        let origin = Origin::of(&Url::parse(url).unwrap()).unwrap();
        let c = Connections::new(Duration::from_secs(1), false, Resolver::system());
        let err = failure(&c, &origin).await;
        assert!(guard::find_refusal(&err).is_some(), "{url}: {err:?}");
    }
}

#[tokio::test]
async fn a_name_that_resolves_inside_is_refused_by_the_guard() {
    let url = Url::parse("http://localhost:9/").unwrap();
    let origin = Origin::of(&url).unwrap();
    let c = Connections::new(Duration::from_secs(1), false, Resolver::system());
    let err = failure(&c, &origin).await;
    assert!(guard::find_refusal(&err).is_some(), "{err:?}");
}

#[tokio::test]
async fn a_name_whose_answer_is_inside_is_refused_before_any_connection() {
    // The receiver listens on loopback; the table sends `inside.test` there.
    let (receiver, accepted) = receiver(100).await;
    let names = Resolver::fixed([("inside.test", vec!["127.0.0.1".parse().unwrap()])]);
    let url = Url::parse(&format!("http://inside.test:{}/hook", receiver.port)).unwrap();
    let origin = Origin::of(&url).unwrap();
    let guarded = Connections::new(Duration::from_secs(1), false, names.clone());
    let err = failure(&guarded, &origin).await;
    let refused = guard::find_refusal(&err).unwrap_or_else(|| panic!("{err:?}"));
    assert_eq!(refused.host, "inside.test");
    assert!(!err.to_string().contains("127.0.0.1"), "{err}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

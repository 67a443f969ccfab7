//! What a hostile client does to the server, on both stores: connections
//! that send half a request, a body that never ends, idle keep-alive
//! connections, more connections than the server serves; and inputs no
//! store can hold (control characters in queries and forms, times outside
//! RFC 3339's years, credentials in URLs). Each gets a clear answer and
//! takes no other client's service away.

mod common;

use std::time::{Duration, Instant};

use common::{problem::assert_problem, TestApp};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// What a raw connection reads: the status of the first answer, if any, and
/// whether the server closed the connection.
struct Read {
    status: Option<u16>,
    text: String,
    closed: bool,
}

/// Reads from `stream` until it closes or `within` passes.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Read {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|s| s.parse().ok());
    Read {
        status,
        text,
        closed,
    }
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.running().addr).await.unwrap()
}

/// A GET through a fresh connection (no pooled one).
async fn fresh_get(app: &TestApp, path: &str, token: Option<&str>) -> reqwest::Response {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut req = http.get(app.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn half_sent_requests_are_closed_after_the_header_timeout_and_others_are_served_meanwhile() {
    let app = TestApp::spawn_with(|c| c.server.header_timeout = Duration::from_millis(500)).await;
    let mut slow = Vec::new();
    for i in 0..50 {
        let mut s = connect(&app).await;
        // Headers begun and never ended; some with nothing at all.
        if i % 2 == 0 {
            s.write_all(b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .unwrap();
        }
        slow.push(s);
    }
    // Meanwhile a normal client is served at once.
    let clock = Instant::now();
    assert_eq!(fresh_get(&app, "/health/live", None).await.status(), 200);
    assert!(
        clock.elapsed() < Duration::from_millis(400),
        "{:?}",
        clock.elapsed()
    );
    for (i, s) in slow.iter_mut().enumerate() {
        let read = read_until_closed(s, Duration::from_secs(5)).await;
        assert!(read.closed, "connection {i} still open: {}", read.text);
        // Nothing is served for half a request.
        assert_ne!(read.status, Some(200), "{i}: {}", read.text);
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_answers_408_and_writes_nothing() {
    let app = TestApp::spawn_with(|c| c.server.body_timeout = Duration::from_millis(400)).await;
    let api = app.api("acme").await;
    let target = api.webhook("https://example.com/hook").await;
    let target_id = target["targetId"].as_str().unwrap();
    let body =
        json!({"targetId": target_id, "deliveryTime": common::in_ms(60_000), "payload": "x"})
            .to_string();
    let mut s = connect(&app).await;
    let head = format!(
        "POST /messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        api.token,
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // Half the body, then nothing more.
    s.write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    let read = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert_eq!(read.status, Some(408), "{}", read.text);
    assert!(
        read.text.contains("application/problem+json"),
        "{}",
        read.text
    );
    let listed: Value = api.get("/messages").await.json().await.unwrap();
    assert_eq!(listed["items"], json!([]), "{listed}");

    // The token endpoint answers in its own terms: the OAuth error JSON.
    let mut s = connect(&app).await;
    s.write_all(
        b"POST /oauth/token HTTP/1.1\r\nHost: x\r\n\
          Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ngrant_type=",
    )
    .await
    .unwrap();
    let read = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert_eq!(read.status, Some(408), "{}", read.text);
    assert!(
        read.text.contains("\"error\":\"invalid_request\""),
        "{}",
        read.text
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_over_the_limit_to_the_token_endpoint_answers_413_as_an_oauth_error() {
    let app = TestApp::spawn().await;
    let r = app
        .http
        .post(app.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(vec![b'a'; 2 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request", "{body}");
    app.shutdown().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_closes_after_the_idle_timeout_and_a_busy_one_does_not() {
    let app = TestApp::spawn_with(|c| c.server.idle_timeout = Duration::from_millis(600)).await;
    let request = b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut s = connect(&app).await;
    // Requests 200 ms apart keep it open past the idle timeout.
    for _ in 0..6 {
        s.write_all(request).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then nothing: closed after the idle timeout, not before.
    let clock = Instant::now();
    let read = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(read.closed, "still open after {:?}", clock.elapsed());
    assert!(
        clock.elapsed() >= Duration::from_millis(300),
        "closed after {:?}",
        clock.elapsed()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn beyond_max_connections_health_answers_and_other_requests_get_503_until_room_is_made() {
    let app = TestApp::spawn_with(|c| c.server.max_connections = 4).await;
    let token = app.token("acme", &[]).await;
    // Four connections with a request under way: its body comes slowly.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = connect(&app).await;
        let head = format!(
            "POST /messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        held.push(s);
    }
    for path in ["/health/live", "/health/ready"] {
        let r = fresh_get(&app, path, None).await;
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = fresh_get(&app, "/targets", Some(&token)).await;
    assert!(r.headers().contains_key("retry-after"));
    assert_problem(r, 503).await;
    drop(held);
    // Room again once the held connections are gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = fresh_get(&app, "/targets", Some(&token)).await;
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still {}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn control_characters_in_a_query_or_path_answer_400_naming_the_parameter() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for (path, field) in [
        ("/messages?orderingKey=a%00b", "orderingKey"),
        ("/messages?type=order%0Acreated", "type"),
        ("/events?type=a%00", "type"),
        ("/targets?cursor=%01", "cursor"),
        ("/messages/DI-M-%00", "path"),
    ] {
        let body = assert_problem(api.get(path).await, 400).await;
        assert_eq!(body["errors"][0]["field"], field, "{path}: {body}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_id_with_a_nul_is_a_failed_attempt_not_an_outage() {
    let app = TestApp::spawn_with(|c| c.auth.token_attempts = 3).await;
    let attempt = || async {
        app.http
            .post(app.url("/oauth/token"))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", "a\u{0}"),
                ("client_secret", "x"),
            ])
            .send()
            .await
            .unwrap()
    };
    for _ in 0..3 {
        let r = attempt().await;
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "invalid_client", "{body}");
    }
    // Counted like any other failure.
    assert_eq!(attempt().await.status(), 429);
    app.shutdown().await;
}

#[tokio::test]
async fn times_outside_years_0001_to_9999_and_leap_seconds_answer_400_naming_the_field() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = api.webhook("https://example.com/hook").await;
    let target_id = target["targetId"].as_str().unwrap();
    // A leap second tomorrow, by the app's clock: refused for being one,
    // not for being past.
    let leap = format!(
        "{}T23:59:60Z",
        (app.now() + chrono::TimeDelta::days(1)).format("%Y-%m-%d")
    );
    for at in [
        leap.as_str(),
        "+10000-01-01T23:58:59Z",
        "-0001-12-31T00:01:00Z",
    ] {
        let r = api
            .post(
                "/messages",
                json!({"targetId": target_id, "deliveryTime": at, "payload": "x"}),
            )
            .await;
        let body = assert_problem(r, 400).await;
        assert_eq!(body["errors"][0]["field"], "deliveryTime", "{at}: {body}");
    }
    let listed: Value = api.get("/messages").await.json().await.unwrap();
    assert_eq!(listed["items"], json!([]));
    app.shutdown().await;
}

#[tokio::test]
async fn a_url_with_credentials_in_it_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let cases = [
        (
            json!({"name": "w", "type": "webhook", "config": {"url": "https://user:pass@example.com/hook"}}),
            "config.url",
        ),
        (
            json!({"name": "w", "type": "webhook", "config": {"url": "https://example.com/hook",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id:secret@id.example.com/token",
                         "clientId": "c", "clientSecret": "s"}}}),
            "config.auth.tokenUrl",
        ),
        (
            json!({"name": "q", "type": "sqs", "config": {"queueUrl": "https://k:s@sqs.eu-north-1.amazonaws.com/123456789012/q",
                "region": "eu-north-1", "credentials": {"accessKeyId": "AKIA", "secretAccessKey": "s"}}}),
            "config.queueUrl",
        ),
    ];
    for (body, field) in cases {
        let problem = assert_problem(api.post("/targets", body.clone()).await, 400).await;
        let fields: Vec<&str> = problem["errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{field}: {problem}");
        // Not echoed back.
        assert!(!problem.to_string().contains("pass@"), "{problem}");
    }
    // Nor by a patch of a target made without.
    let target = api.webhook("https://example.com/hook").await;
    let id = target["targetId"].as_str().unwrap();
    let r = api
        .patch(
            &format!("/targets/{id}"),
            json!({"config": {"url": "https://u:p@example.com/hook"}}),
        )
        .await;
    let problem = assert_problem(r, 400).await;
    assert_eq!(problem["errors"][0]["field"], "config.url", "{problem}");
    let listed: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        api.get(&format!("/targets/{id}"))
            .await
            .json::<Value>()
            .await
            .unwrap()["config"]["url"],
        "https://example.com/hook"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn at_the_cap_a_connection_that_sent_half_a_request_gives_its_place_to_a_new_one() {
    let app = TestApp::spawn_with(|c| c.server.max_connections = 4).await;
    let token = app.token("acme", &[]).await;
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut s = connect(&app).await;
        s.write_all(b"GET /targets HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(s);
    }
    // Places are given up by connections that waited a second without a
    // request under way: the longest waiting first.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Four new clients, each keeping its connection: each takes the place
    // of a half-sent one (the new ones have waited less than a second).
    let mut kept = Vec::new();
    for i in 0..4 {
        let mut s = connect(&app).await;
        let request =
            format!("GET /targets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.starts_with("HTTP/1.1 200"), "client {i}: {text}");
        kept.push(s);
    }
    for (i, s) in slow.iter_mut().enumerate() {
        let read = read_until_closed(s, Duration::from_secs(2)).await;
        assert!(read.closed, "half-sent connection {i} still open");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn at_the_cap_a_client_holding_many_connections_gives_one_up_to_another_client_at_once() {
    let app = TestApp::spawn_with(|c| c.server.max_connections = 4).await;
    let token = app.token("acme", &[]).await;
    // The flooder comes from 127.0.0.2; the other client from 127.0.0.1.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 2], 0).into()).unwrap();
        let mut s = socket.connect(app.running().addr).await.unwrap();
        s.write_all(b"GET /targets HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(s);
    }
    // No second of waiting: the flooder's connections are the most.
    let clock = Instant::now();
    let r = fresh_get(&app, "/targets", Some(&token)).await;
    assert_eq!(r.status(), 200);
    assert!(
        clock.elapsed() < Duration::from_millis(900),
        "{:?}",
        clock.elapsed()
    );
    let mut closed = 0;
    for s in slow.iter_mut() {
        closed += usize::from(
            read_until_closed(s, Duration::from_millis(300))
                .await
                .closed,
        );
    }
    assert_eq!(closed, 1, "the flooder's oldest connection gave its place");
    app.shutdown().await;
}

/// How a hostile receiver answers a connection, once it has read the
/// request's head.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    /// A 200 whose chunked body never ends, sent as fast as it goes.
    EndlessBody,
    /// A 200 whose chunked body comes a byte every 100 ms, forever.
    DrippingBody,
    /// A head of a megabyte.
    HugeHead,
    /// A head that comes a line every 100 ms, forever.
    DrippingHead,
    /// Bytes that are not HTTP, then the connection closed.
    NotHttp,
}

/// A receiver on loopback that behaves as `how` on every connection.
async fn hostile_receiver(how: Hostile) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
                let _ = match how {
                    Hostile::EndlessBody => {
                        let _ = s.write_all(chunked).await;
                        let chunk = format!("10000\r\n{}\r\n", "a".repeat(0x10000));
                        loop {
                            if s.write_all(chunk.as_bytes()).await.is_err() {
                                break Ok(());
                            }
                        }
                    }
                    Hostile::DrippingBody => {
                        let _ = s.write_all(chunked).await;
                        loop {
                            if s.write_all(b"1\r\na\r\n").await.is_err() {
                                break Ok(());
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    Hostile::HugeHead => {
                        let head =
                            format!("HTTP/1.1 200 OK\r\nX-A: {}\r\n\r\n", "a".repeat(1 << 20));
                        s.write_all(head.as_bytes()).await
                    }
                    Hostile::DrippingHead => {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n").await;
                        loop {
                            if s.write_all(b"X-A: b\r\n").await.is_err() {
                                break Ok(());
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    Hostile::NotHttp => s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await,
                };
            });
        }
    });
    url
}

/// The receivers' side: a receiver that never ends its body, drips it,
/// sends a megabyte of head, drips its head or does not speak HTTP costs
/// one attempt bounded by the target's timeout (500 ms here) and at most
/// 64 KiB read, recorded with what it said (at most 1,024 bytes of body);
/// meanwhile another target of the account is delivered to at once.
#[tokio::test]
async fn a_hostile_receiver_costs_one_attempt_bounded_in_time_and_bytes() {
    let app = TestApp::spawn_with(|c| c.retry.immediate_retries = 0).await;
    let api = app.api("acme").await;
    let good = common::receiver::Receiver::start().await;
    let fine = api.webhook(&good.url("/hook")).await;
    for (how, outcome) in [
        (Hostile::EndlessBody, "Success"),
        (Hostile::DrippingBody, "Success"),
        (Hostile::HugeHead, "RetryableFailure"),
        (Hostile::DrippingHead, "RetryableFailure"),
        (Hostile::NotHttp, "RetryableFailure"),
    ] {
        let url = hostile_receiver(how).await;
        let target = api.webhook_with(&url, json!({"timeoutMs": 500})).await;
        let m = api
            .schedule(
                target["targetId"].as_str().unwrap(),
                &common::in_ms(0),
                "to a hostile receiver",
            )
            .await;
        let id = m["messageId"].as_str().unwrap().to_string();
        let before = good.count();
        api.schedule(
            fine["targetId"].as_str().unwrap(),
            &common::in_ms(0),
            "fine",
        )
        .await;
        good.wait_for(before + 1, Duration::from_secs(5)).await;
        let attempts = common::eventually(Duration::from_secs(5), "an attempt", async || {
            let a = api.attempts(&id).await;
            if a.is_empty() {
                Err(a)
            } else {
                Ok(a)
            }
        })
        .await;
        let a = &attempts[0];
        assert_eq!(a["outcome"], outcome, "{how:?}: {a}");
        let ms = a["durationMs"].as_i64().unwrap();
        assert!(ms < 1_500, "{how:?} took {ms} ms: {a}");
        let body = a["responseBody"].as_str().unwrap_or("");
        assert!(body.len() <= 1024, "{how:?}: {} bytes kept", body.len());
        if outcome != "Success" {
            assert!(
                a["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{how:?}: {a}"
            );
        }
    }
    app.shutdown().await;
}

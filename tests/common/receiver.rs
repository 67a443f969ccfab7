//! A real HTTP receiver (axum, keep-alive) that records every request and
//! answers what the test scripts.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::any,
    Router,
};
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    }
}

/// Holds the requests that wait on it open until the test opens it: an
/// attempt under way for exactly as long as the test needs, whatever the
/// machine's speed.
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::Semaphore>);

impl Gate {
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(0)))
    }

    /// Lets every request held by this gate, and every later one, through.
    pub fn open(&self) {
        self.0.close();
    }

    async fn pass(&self) {
        // No permit is ever added: acquiring ends only when the gate is closed (opened).
        let _ = self.0.acquire().await;
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

/// What to answer: a status, a body, extra headers, a delay before
/// answering, and a gate that holds the answer until the test opens it.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
    pub delay: Duration,
    pub gate: Option<Gate>,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            body: String::new(),
            headers: Vec::new(),
            delay: Duration::ZERO,
            gate: None,
        }
    }

    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// Answers only once `gate` is opened.
    pub fn held_until(mut self, gate: &Gate) -> Self {
        self.gate = Some(gate.clone());
        self
    }
}

#[derive(Default)]
struct Inner {
    received: Mutex<Vec<Received>>,
    /// Replies used in order; when empty, `default` answers.
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    arrived: Notify,
    /// Requests being answered now, and the most there ever were at once.
    concurrent: Mutex<(usize, usize)>,
    /// The same per `dispatch-ordering-key` (requests that carry one).
    per_key: Mutex<std::collections::HashMap<String, (usize, usize)>>,
    /// Answer 500 the first time a `webhook-id` arrives, 200 after.
    fail_once_each: std::sync::atomic::AtomicBool,
    /// The `webhook-id`s seen so far.
    seen: Mutex<std::collections::HashSet<String>>,
}

/// Counts a request as being answered until dropped (also when the client
/// hangs up and the handler is dropped).
struct Answering(Arc<Inner>, Option<String>);

impl Answering {
    fn new(inner: &Arc<Inner>, key: Option<String>) -> Self {
        let mut c = inner.concurrent.lock().unwrap();
        c.0 += 1;
        c.1 = c.1.max(c.0);
        if let Some(key) = &key {
            let mut per_key = inner.per_key.lock().unwrap();
            let c = per_key.entry(key.clone()).or_default();
            c.0 += 1;
            c.1 = c.1.max(c.0);
        }
        Self(inner.clone(), key)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.concurrent.lock().unwrap().0 -= 1;
        if let Some(key) = &self.1 {
            if let Some(c) = self.0.per_key.lock().unwrap().get_mut(key) {
                c.0 -= 1;
            }
        }
    }
}

#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

impl Receiver {
    /// Starts a receiver that answers 200 unless told otherwise.
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .fallback(any(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, inner }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Every later request gets this reply (after any scripted ones).
    pub fn always(&self, reply: Reply) {
        *self.inner.default.lock().unwrap() = Some(reply);
    }

    /// The next requests get these replies, in order.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.script.lock().unwrap().extend(replies);
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    /// The most requests this receiver was answering at one time.
    pub fn max_concurrent(&self) -> usize {
        self.inner.concurrent.lock().unwrap().1
    }

    /// The most requests with one `dispatch-ordering-key` this receiver was
    /// answering at one time, over all keys (0 when none carried a key).
    pub fn max_concurrent_per_key(&self) -> usize {
        self.inner
            .per_key
            .lock()
            .unwrap()
            .values()
            .map(|c| c.1)
            .max()
            .unwrap_or(0)
    }

    /// From now on, each message's first request (by `webhook-id`) is
    /// answered 500 and every later one 200, whatever the order they come in
    /// (with the delay of the `always` reply).
    pub fn fail_once_each(&self) {
        self.inner
            .fail_once_each
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn count(&self) -> usize {
        self.inner.received.lock().unwrap().len()
    }

    /// Waits until at least `n` requests have arrived, or panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.inner.arrived.notified();
            if self.count() >= n {
                return self.received();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "expected {n} requests within {within:?}, got {}",
                    self.count()
                );
            }
        }
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let _answering = Answering::new(&inner, header("dispatch-ordering-key"));
    let seen_before = match header("webhook-id") {
        Some(id) => !inner.seen.lock().unwrap().insert(id),
        None => false,
    };
    inner.received.lock().unwrap().push(Received {
        path: uri.path().to_string(),
        headers,
        body,
        at: chrono::Utc::now(),
    });
    inner.arrived.notify_waiters();
    let scripted = || {
        inner
            .script
            .lock()
            .unwrap()
            .pop_front()
            .or_else(|| inner.default.lock().unwrap().clone())
    };
    let reply = if inner
        .fail_once_each
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        // The default reply's delay and headers, with the status set.
        let base = inner
            .default
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(Reply::status(200));
        Some(Reply {
            status: if seen_before { 200 } else { 500 },
            ..base
        })
    } else {
        scripted()
    };
    let reply = reply.unwrap_or_else(|| Reply::status(200));
    if let Some(gate) = &reply.gate {
        gate.pass().await;
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    for (k, v) in reply.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            axum::http::HeaderValue::from_str(&v).unwrap(),
        );
    }
    response
}

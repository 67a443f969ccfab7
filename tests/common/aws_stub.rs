//! A stand-in for the Amazon SQS and SNS endpoints that answers what a test
//! scripts, in the wire protocols the SDKs read: SQS's JSON 1.0 protocol
//! (`X-Amz-Target: AmazonSQS.<Action>`, a JSON body; errors carry the
//! shape in `__type` and the code in `x-amzn-query-error: <Code>;<Sender|Receiver>`)
//! and SNS's Query protocol (a form with `Action`; errors are an XML
//! `ErrorResponse`). moto answers only what a real queue or topic does
//! when all is well or when it is missing; throttling, expired
//! credentials, access denied and the rest come from here. Every call is
//! recorded with its parameters.

use std::{
    collections::{HashMap, VecDeque},
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
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Sqs,
    Sns,
}

impl Service {
    /// How the service is named in the errors Dispatch records.
    pub fn label(self) -> &'static str {
        match self {
            Service::Sqs => "SQS",
            Service::Sns => "SNS",
        }
    }
}

/// One request the stub received.
#[derive(Debug, Clone)]
pub struct Call {
    pub service: Service,
    /// `SendMessage`, `SendMessageBatch`, `Publish`.
    pub action: String,
    /// The queue URL (SQS) or the topic ARN (SNS) it names.
    pub resource: String,
    /// The JSON body (SQS), or the form fields as an object of strings (SNS).
    pub params: Value,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// An error answer: what AWS sends for one class of failure.
#[derive(Debug, Clone)]
pub struct Fault {
    pub status: u16,
    /// The code the SDK reports: `x-amzn-query-error`'s first half (SQS),
    /// `<Code>` (SNS).
    pub code: String,
    /// The modelled shape in SQS's `__type` (unused for SNS).
    pub shape: String,
    pub message: String,
    pub retry_after: Option<String>,
}

impl Fault {
    fn new(status: u16, code: &str, shape: &str, message: &str) -> Self {
        Self {
            status,
            code: code.into(),
            shape: shape.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    /// Too many requests: SQS's `RequestThrottled`, SNS's `Throttling`.
    pub fn throttling(service: Service) -> Self {
        match service {
            Service::Sqs => Self::new(
                400,
                "RequestThrottled",
                "com.amazonaws.sqs#RequestThrottled",
                "Rate exceeded",
            ),
            Service::Sns => Self::new(400, "Throttling", "", "Rate exceeded"),
        }
    }

    /// The session credentials have expired.
    pub fn expired_token(service: Service) -> Self {
        let message = "The security token included in the request is expired";
        match service {
            Service::Sqs => Self::new(
                400,
                "ExpiredToken",
                "com.amazon.coral.service#ExpiredTokenException",
                message,
            ),
            Service::Sns => Self::new(403, "ExpiredToken", "", message),
        }
    }

    /// A 500 from the service.
    pub fn internal(service: Service) -> Self {
        match service {
            Service::Sqs => Self::new(
                500,
                "InternalFailure",
                "com.amazon.coral.service#InternalFailure",
                "We encountered an internal error. Please try again.",
            ),
            Service::Sns => Self::new(500, "InternalError", "", "Internal Error"),
        }
    }

    /// A 503: the service is unavailable for now.
    pub fn unavailable(service: Service) -> Self {
        let message = "Service Unavailable";
        match service {
            Service::Sqs => Self::new(
                503,
                "ServiceUnavailable",
                "com.amazon.coral.service#ServiceUnavailableException",
                message,
            ),
            Service::Sns => Self::new(503, "ServiceUnavailable", "", message),
        }
    }

    /// The credentials may not send to this queue or topic.
    pub fn access_denied(service: Service) -> Self {
        match service {
            Service::Sqs => Self::new(
                403,
                "AccessDenied",
                "com.amazon.coral.service#AccessDeniedException",
                "User: arn:aws:iam::123456789012:user/dispatch is not authorized to perform: sqs:sendmessage",
            ),
            Service::Sns => Self::new(
                403,
                "AuthorizationError",
                "",
                "User: arn:aws:iam::123456789012:user/dispatch is not authorized to perform: SNS:Publish",
            ),
        }
    }

    /// A parameter the service refuses.
    pub fn invalid_parameter(service: Service) -> Self {
        match service {
            Service::Sqs => Self::new(
                400,
                "InvalidParameterValue",
                "com.amazonaws.sqs#InvalidParameterValue",
                "Value for parameter MessageGroupId is invalid. Reason: The request include parameter that is not valid for this queue type.",
            ),
            Service::Sns => Self::new(
                400,
                "InvalidParameter",
                "",
                "Invalid parameter: MessageGroupId Reason: The request includes MessageGroupId parameter that is not valid for this topic type",
            ),
        }
    }

    /// The message is over the service's size limit (a kind of invalid
    /// parameter on both services).
    pub fn too_large(service: Service) -> Self {
        match service {
            Service::Sqs => Self::new(
                400,
                "InvalidParameterValue",
                "com.amazonaws.sqs#InvalidParameterValue",
                "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.",
            ),
            Service::Sns => Self::new(
                400,
                "InvalidParameter",
                "",
                "Invalid parameter: Message too long",
            ),
        }
    }

    /// The queue or topic does not exist.
    pub fn missing(service: Service) -> Self {
        match service {
            Service::Sqs => Self::new(
                400,
                "AWS.SimpleQueueService.NonExistentQueue",
                "com.amazonaws.sqs#QueueDoesNotExist",
                "The specified queue does not exist.",
            ),
            Service::Sns => Self::new(404, "NotFound", "", "Topic does not exist"),
        }
    }

    /// With a `Retry-After` header.
    pub fn retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// The error text Dispatch records for this answer.
    pub fn recorded(&self, service: Service) -> String {
        format!("{} {}: {}", service.label(), self.code, self.message)
    }

    fn fault_type(&self) -> &'static str {
        if self.status >= 500 {
            "Receiver"
        } else {
            "Sender"
        }
    }
}

/// What the stub answers one call.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Accepted (every entry of a batch).
    Accept,
    /// The call fails as a whole.
    Fail(Fault),
    /// A SendMessageBatch answered 200 with every entry in `Failed`
    /// (another call fails as a whole).
    FailEntries(Fault),
    /// No answer: the client's timeout ends the call.
    Hang,
}

#[derive(Default)]
struct Inner {
    calls: Mutex<Vec<Call>>,
    /// Answers per queue URL or topic ARN, used in order; then `Accept`.
    scripts: Mutex<HashMap<String, VecDeque<Answer>>>,
    arrived: Notify,
}

#[derive(Clone)]
pub struct AwsStub {
    pub url: String,
    inner: Arc<Inner>,
}

impl AwsStub {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .fallback(any(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, inner }
    }

    /// A queue URL on this endpoint, unique to the caller (`name` may end
    /// in `.fifo`).
    pub fn queue_url(&self, name: &str) -> String {
        format!("{}/123456789012/{}", self.url, unique(name))
    }

    /// A topic ARN, unique to the caller (`name` may end in `.fifo`).
    pub fn topic_arn(&self, name: &str) -> String {
        format!("arn:aws:sns:us-east-1:123456789012:{}", unique(name))
    }

    /// The next calls naming `resource` get these answers, in order; later
    /// ones are accepted.
    pub fn script(&self, resource: &str, answers: impl IntoIterator<Item = Answer>) {
        self.inner
            .scripts
            .lock()
            .unwrap()
            .entry(resource.to_string())
            .or_default()
            .extend(answers);
    }

    /// The calls naming `resource`, in the order they came.
    pub fn calls(&self, resource: &str) -> Vec<Call> {
        self.inner
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.resource == resource)
            .cloned()
            .collect()
    }

    /// Waits until `n` calls naming `resource` have come, or panics after `within`.
    pub async fn wait_for(&self, resource: &str, n: usize, within: Duration) -> Vec<Call> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.inner.arrived.notified();
            let calls = self.calls(resource);
            if calls.len() >= n {
                return calls;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "expected {n} calls for {resource} within {within:?}, got {}",
                    calls.len()
                );
            }
        }
    }
}

/// `name` with a unique suffix, before its `.fifo` if it has one.
fn unique(name: &str) -> String {
    let (stem, fifo) = match name.strip_suffix(".fifo") {
        Some(stem) => (stem, ".fifo"),
        None => (name, ""),
    };
    format!("{stem}-{}{fifo}", uuid::Uuid::new_v4().simple())
}

async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let call = match target {
        Some(target) => {
            let params: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            Call {
                service: Service::Sqs,
                action: target.rsplit('.').next().unwrap_or_default().to_string(),
                resource: params["QueueUrl"].as_str().unwrap_or_default().to_string(),
                params,
                at: chrono::Utc::now(),
            }
        }
        None => {
            let form: Map<String, Value> = url::form_urlencoded::parse(&body)
                .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
                .collect();
            Call {
                service: Service::Sns,
                action: form
                    .get("Action")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                resource: form
                    .get("TopicArn")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                params: Value::Object(form),
                at: chrono::Utc::now(),
            }
        }
    };
    let answer = inner
        .scripts
        .lock()
        .unwrap()
        .get_mut(&call.resource)
        .and_then(VecDeque::pop_front)
        .unwrap_or(Answer::Accept);
    inner.calls.lock().unwrap().push(call.clone());
    inner.arrived.notify_waiters();
    match (answer, call.service) {
        (Answer::Hang, _) => std::future::pending::<Response>().await,
        (Answer::FailEntries(f), Service::Sqs) if call.action == "SendMessageBatch" => {
            sqs_accepted(&call, Some(&f))
        }
        (Answer::Fail(f) | Answer::FailEntries(f), Service::Sqs) => sqs_error(&f),
        (Answer::Fail(f) | Answer::FailEntries(f), Service::Sns) => sns_error(&f),
        (Answer::Accept, Service::Sqs) => sqs_accepted(&call, None),
        (Answer::Accept, Service::Sns) => sns_published(),
    }
}

const SQS_JSON: &str = "application/x-amz-json-1.0";

fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn with_headers(
    status: u16,
    content_type: &str,
    extra: &[(&str, String)],
    body: String,
) -> Response {
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    let headers = response.headers_mut();
    headers.insert("content-type", content_type.parse().unwrap());
    headers.insert("x-amzn-requestid", request_id().parse().unwrap());
    for (name, value) in extra {
        headers.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    response
}

fn retry_after(f: &Fault) -> Vec<(&'static str, String)> {
    f.retry_after
        .iter()
        .map(|v| ("retry-after", v.clone()))
        .collect()
}

fn sqs_error(f: &Fault) -> Response {
    let mut headers = retry_after(f);
    headers.push((
        "x-amzn-query-error",
        format!("{};{}", f.code, f.fault_type()),
    ));
    let body = json!({"__type": f.shape, "message": f.message}).to_string();
    with_headers(f.status, SQS_JSON, &headers, body)
}

/// SendMessage's answer, or SendMessageBatch's with every entry accepted
/// (or, given `failed`, every entry failed with it).
fn sqs_accepted(call: &Call, failed: Option<&Fault>) -> Response {
    let md5 = "0123456789abcdef0123456789abcdef";
    let body = if call.action == "SendMessageBatch" {
        let ids = call.params["Entries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["Id"].clone());
        match failed {
            None => json!({
                "Successful": ids.map(|id| json!({"Id": id, "MessageId": request_id(), "MD5OfMessageBody": md5})).collect::<Vec<_>>(),
                "Failed": []
            }),
            Some(f) => json!({
                "Successful": [],
                "Failed": ids.map(|id| json!({"Id": id, "SenderFault": f.status < 500, "Code": f.code, "Message": f.message})).collect::<Vec<_>>()
            }),
        }
    } else {
        json!({"MessageId": request_id(), "MD5OfMessageBody": md5})
    };
    with_headers(200, SQS_JSON, &[], body.to_string())
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn sns_error(f: &Fault) -> Response {
    let body = format!(
        "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\">\
         <Error><Type>{}</Type><Code>{}</Code><Message>{}</Message></Error>\
         <RequestId>{}</RequestId></ErrorResponse>",
        f.fault_type(),
        xml_escape(&f.code),
        xml_escape(&f.message),
        request_id()
    );
    with_headers(f.status, "text/xml", &retry_after(f), body)
}

fn sns_published() -> Response {
    let body = format!(
        "<PublishResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\">\
         <PublishResult><MessageId>{}</MessageId></PublishResult>\
         <ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></PublishResponse>",
        request_id(),
        request_id()
    );
    with_headers(200, "text/xml", &[], body)
}

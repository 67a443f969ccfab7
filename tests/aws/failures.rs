//! How SQS and SNS failures are classified, end to end: a message to a queue
//! or topic whose endpoint (the stub) answers one class of failure, each
//! attempt's outcome, status and error as recorded, and what the ladder makes
//! of it. Throttling, 5xx, network errors, timeouts and expired credentials
//! retry; a missing queue or topic, access denied, an invalid parameter and a
//! message too large make a dead letter at once. A throttling answer's
//! Retry-After sets the next attempt.

use super::*;
use common::aws_stub::{Answer, AwsStub, Fault, Service};

/// What the ladder must make of an attempt's failure.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// Retried at once (the round's immediate retry), which fails the same
    /// way; then the message waits a minute (the ladder's next step).
    RetriedOnTheLadder,
    /// One attempt, then a wait of this many ms (Retry-After, capped).
    Waits(u64),
    /// A dead letter after one attempt.
    DeadLetter,
}

struct Case {
    name: &'static str,
    fault: Fault,
    then: Then,
}

/// Every class the contract names, as `service` answers it.
fn cases(service: Service) -> Vec<Case> {
    let case = |name, fault, then| Case { name, fault, then };
    vec![
        case(
            "throttling",
            Fault::throttling(service),
            Then::RetriedOnTheLadder,
        ),
        case(
            "throttling with Retry-After",
            Fault::throttling(service).retry_after("120"),
            Then::Waits(120_000),
        ),
        case(
            "throttling with a Retry-After over retry.max_retry_after",
            Fault::throttling(service).retry_after("7200"),
            Then::Waits(3_600_000),
        ),
        case(
            "expired credentials",
            Fault::expired_token(service),
            Then::RetriedOnTheLadder,
        ),
        case("a 500", Fault::internal(service), Then::RetriedOnTheLadder),
        case(
            "a 500 with Retry-After (not a throttle: ignored)",
            Fault::internal(service).retry_after("120"),
            Then::RetriedOnTheLadder,
        ),
        case(
            "a 503 with Retry-After",
            Fault::unavailable(service).retry_after("90"),
            Then::Waits(90_000),
        ),
        case(
            "access denied",
            Fault::access_denied(service),
            Then::DeadLetter,
        ),
        case(
            "an invalid parameter",
            Fault::invalid_parameter(service),
            Then::DeadLetter,
        ),
        case(
            "a message too large",
            Fault::too_large(service),
            Then::DeadLetter,
        ),
        case(
            "a missing queue or topic",
            Fault::missing(service),
            Then::DeadLetter,
        ),
    ]
}

/// A target of `service` at `endpoint` for `resource` (a queue URL or a
/// topic ARN).
async fn aws_target(api: &Api, service: Service, resource: &str, endpoint: &str) -> String {
    match service {
        Service::Sqs => {
            let config = json!({"queueUrl": resource, "region": "us-east-1", "endpointUrl": endpoint,
                                "credentials": {"accessKeyId": "testing", "secretAccessKey": "testing"}});
            target(api, "sqs", config).await
        }
        Service::Sns => target(api, "sns", sns_config(resource, endpoint)).await,
    }
}

fn resource(stub: &AwsStub, service: Service, name: &str) -> String {
    match service {
        Service::Sqs => stub.queue_url(name),
        Service::Sns => stub.topic_arn(name),
    }
}

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("a time: {v}")))
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// Milliseconds from an attempt's end to the message's next attempt.
fn wait_after(attempt: &Value, message: &Value) -> i64 {
    (time(&message["nextAttemptAt"]) - time(&attempt["finishedAt"])).num_milliseconds()
}

/// The ladder's first wait, the minute step, in ms (the default ladder).
const MINUTE_MS: i64 = 60_000;

/// Checks what the ladder made of one message whose every attempt got
/// `expect_error` (and `status`, when the service answered).
async fn assert_classified(
    api: &Api,
    id: &str,
    then: Then,
    status: Option<u16>,
    expect_error: &str,
    what: &str,
) {
    let m = api.message(id).await;
    let attempts = api.attempts(id).await;
    let (count, outcome) = match then {
        Then::RetriedOnTheLadder => (2, "RetryableFailure"),
        Then::Waits(_) => (1, "RetryableFailure"),
        Then::DeadLetter => (1, "NonRetryableFailure"),
    };
    assert_eq!(attempts.len(), count, "{what}: {attempts:?}");
    for a in &attempts {
        assert_eq!(a["outcome"], outcome, "{what}: {a}");
        assert_eq!(a["error"], expect_error, "{what}: {a}");
        assert_eq!(
            a["statusCode"],
            status.map_or(Value::Null, |s| json!(s)),
            "{what}: {a}"
        );
    }
    assert_eq!(m["attemptCount"], count, "{what}: {m}");
    let last = attempts.last().unwrap();
    match then {
        Then::DeadLetter => {
            assert_eq!(m["state"], "DeadLetter", "{what}: {m}");
            assert!(m["nextAttemptAt"].is_null(), "{what}: {m}");
            assert_eq!(m["lastError"], expect_error, "{what}: {m}");
        }
        Then::RetriedOnTheLadder => {
            assert_eq!(m["state"], "Scheduled", "{what}: {m}");
            assert!(last["retryAfterMs"].is_null(), "{what}: {last}");
            let wait = wait_after(last, &m);
            assert!(
                (wait - MINUTE_MS).abs() <= 1,
                "{what}: the next attempt {wait} ms after the round, not a minute: {m}"
            );
        }
        Then::Waits(ms) => {
            assert_eq!(m["state"], "Scheduled", "{what}: {m}");
            assert_eq!(last["retryAfterMs"], ms, "{what}: {last}");
            let wait = wait_after(last, &m);
            assert!(
                (wait - ms as i64).abs() <= 1,
                "{what}: the next attempt {wait} ms after a Retry-After of {ms} ms: {m}"
            );
        }
    }
}

/// Sends one message per class to `service` through the stub, with the
/// sweeper driven by hand, and checks each message's attempts.
async fn every_class_is_classified(service: Service) {
    let stub = AwsStub::start().await;
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let api = app.api("acme").await;
    let mut sent = Vec::new();
    for case in cases(service) {
        let resource = resource(&stub, service, "class");
        // Every attempt gets the same answer.
        stub.script(&resource, vec![Answer::Fail(case.fault.clone()); 3]);
        let t = aws_target(&api, service, &resource, &stub.url).await;
        let id = api.schedule(&t, &in_ms(-1), case.name).await["messageId"]
            .as_str()
            .unwrap()
            .to_string();
        sent.push((case, resource, id));
    }
    // One pass: every message is attempted, retried at once where the
    // ladder says so, and recorded; nothing is due again after it.
    assert_eq!(app.running().sweeper.deliver_due_now().await, sent.len());
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    for (case, resource, id) in &sent {
        let what = format!("{} {}", service.label(), case.name);
        assert_classified(
            &api,
            id,
            case.then,
            Some(case.fault.status),
            &case.fault.recorded(service),
            &what,
        )
        .await;
        let calls = stub.calls(resource);
        let expected = api.attempts(id).await.len();
        assert_eq!(calls.len(), expected, "{what}: one call per attempt");
        let action = match service {
            Service::Sqs => "SendMessage",
            Service::Sns => "Publish",
        };
        assert!(
            calls.iter().all(|c| c.action == action),
            "{what}: {calls:?}"
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn every_sqs_failure_class_is_retried_or_dead_lettered_as_the_contract_says() {
    every_class_is_classified(Service::Sqs).await;
}

#[tokio::test]
async fn every_sns_failure_class_is_retried_or_dead_lettered_as_the_contract_says() {
    every_class_is_classified(Service::Sns).await;
}

/// Timeouts and network errors: no answer within `aws.timeout`, and a
/// connection refused, both retry.
async fn timeouts_and_network_errors_retry(service: Service) {
    let stub = AwsStub::start().await;
    let app = TestApp::spawn_with(|c| {
        c.sweeper.enabled = false;
        c.aws.timeout = Duration::from_millis(500);
    })
    .await;
    let api = app.api("acme").await;
    let hanging = resource(&stub, service, "hanging");
    stub.script(&hanging, [Answer::Hang, Answer::Hang]);
    let hanging_t = aws_target(&api, service, &hanging, &stub.url).await;
    // Nothing listens there: the connection is refused.
    let closed = format!("http://127.0.0.1:{}", common::free_port());
    let unreachable = resource(&stub, service, "unreachable");
    let unreachable_t = aws_target(&api, service, &unreachable, &closed).await;
    let schedule = |t: String| {
        let api = api.clone();
        async move {
            api.schedule(&t, &in_ms(-1), "x").await["messageId"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let hung = schedule(hanging_t).await;
    let refused = schedule(unreachable_t).await;
    assert_eq!(app.running().sweeper.deliver_due_now().await, 2);
    let label = service.label();
    assert_classified(
        &api,
        &hung,
        Then::RetriedOnTheLadder,
        None,
        &format!("{label}: timeout"),
        "no answer",
    )
    .await;
    assert_eq!(stub.calls(&hanging).len(), 2, "both attempts reached it");
    for a in api.attempts(&hung).await {
        let took = a["durationMs"].as_u64().unwrap();
        assert!(took >= 500, "ended after {took} ms, before aws.timeout");
    }
    let attempts = api.attempts(&refused).await;
    let error = attempts[0]["error"].as_str().unwrap().to_string();
    assert!(
        error.starts_with(&format!("{label}: network error")) && error.contains("refused"),
        "{error}"
    );
    assert_classified(
        &api,
        &refused,
        Then::RetriedOnTheLadder,
        None,
        &error,
        "connection refused",
    )
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_sqs_timeout_and_a_refused_connection_are_retried() {
    timeouts_and_network_errors_retry(Service::Sqs).await;
}

#[tokio::test]
async fn an_sns_timeout_and_a_refused_connection_are_retried() {
    timeouts_and_network_errors_retry(Service::Sns).await;
}

/// The running sweeper waits as long as a throttling answer's Retry-After
/// asks, then delivers.
async fn a_throttled_call_is_retried_after_its_retry_after(service: Service) {
    let stub = AwsStub::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let resource = resource(&stub, service, "throttled");
    stub.script(
        &resource,
        [Answer::Fail(Fault::throttling(service).retry_after("1"))],
    );
    let t = aws_target(&api, service, &resource, &stub.url).await;
    let id = api.schedule(&t, &in_ms(0), "x").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let calls = stub.wait_for(&resource, 2, Duration::from_secs(15)).await;
    let m = api
        .wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["outcome"], "RetryableFailure");
    assert_eq!(attempts[0]["retryAfterMs"], 1000, "{}", attempts[0]);
    assert_eq!(attempts[1]["outcome"], "Success");
    assert_eq!(m["attemptCount"], 2);
    // Not the immediate retry of the ladder: a second later.
    let gap =
        (time(&attempts[1]["startedAt"]) - time(&attempts[0]["finishedAt"])).num_milliseconds();
    assert!(gap >= 1000, "retried {gap} ms after a Retry-After of 1 s");
    let between = (calls[1].at - calls[0].at).num_milliseconds();
    assert!(
        between >= 1000,
        "the endpoint was called again after {between} ms"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_throttled_sqs_send_waits_for_its_retry_after_then_delivers() {
    a_throttled_call_is_retried_after_its_retry_after(Service::Sqs).await;
}

#[tokio::test]
async fn a_throttled_sns_publish_waits_for_its_retry_after_then_delivers() {
    a_throttled_call_is_retried_after_its_retry_after(Service::Sns).await;
}

/// SendMessageBatch answers 200 with entries in `Failed`: each entry is
/// judged by its code and `SenderFault`, as a whole call would be. A batch
/// refused as a whole is sent again one message at a time, each judged on
/// its own answer.
#[tokio::test]
async fn the_entries_of_an_sqs_batch_are_classified_each() {
    use dispatch::domain::retry::AttemptOutcome::{NonRetryableFailure, RetryableFailure};
    let stub = AwsStub::start().await;
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let api = app.api("acme").await;
    let sqs = Service::Sqs;
    let batch = ["SendMessageBatch"];
    let one_by_one = ["SendMessageBatch", "SendMessage", "SendMessage"];
    // (the answer, the outcome, the status recorded, the calls made)
    let cases: [(Answer, _, Option<u16>, &[&str]); 6] = [
        (
            Answer::FailEntries(Fault::invalid_parameter(sqs)),
            NonRetryableFailure,
            None,
            &batch,
        ),
        (
            Answer::FailEntries(Fault::too_large(sqs)),
            NonRetryableFailure,
            None,
            &batch,
        ),
        // A sender's fault, but throttling.
        (
            Answer::FailEntries(Fault::throttling(sqs)),
            RetryableFailure,
            None,
            &batch,
        ),
        (
            Answer::FailEntries(Fault::internal(sqs)),
            RetryableFailure,
            None,
            &batch,
        ),
        (
            Answer::Fail(Fault::access_denied(sqs)),
            NonRetryableFailure,
            Some(403),
            &one_by_one,
        ),
        (
            Answer::Fail(Fault::unavailable(sqs)),
            RetryableFailure,
            Some(503),
            &one_by_one,
        ),
    ];
    for (answer, outcome, status, actions) in cases {
        let fault = match &answer {
            Answer::Fail(f) | Answer::FailEntries(f) => f.clone(),
            other => unreachable!("{other:?}"),
        };
        let queue = stub.queue_url("batch");
        stub.script(&queue, vec![answer; 3]);
        let t = aws_target(&api, sqs, &queue, &stub.url).await;
        api.schedule_many(&t, &in_ms(-1), 2).await;
        let claimed = app
            .store()
            .claim_due(chrono::Utc::now(), 10, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2);
        let results = app
            .running()
            .sweeper
            .deliverer
            .deliver_batch(&claimed.iter().map(Outgoing::from).collect::<Vec<_>>())
            .await;
        let calls = stub.calls(&queue);
        let called: Vec<&str> = calls.iter().map(|c| c.action.as_str()).collect();
        assert_eq!(called, actions, "{}", fault.code);
        assert_eq!(calls[0].params["Entries"].as_array().unwrap().len(), 2);
        assert_eq!(results.len(), 2);
        for d in results {
            assert_eq!(d.outcome, outcome, "{}: {:?}", fault.code, d.error);
            assert_eq!(d.error.as_deref(), Some(fault.recorded(sqs).as_str()));
            assert_eq!(d.status_code, status, "{}", fault.code);
        }
    }
    app.shutdown().await;
}

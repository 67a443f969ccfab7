//! SQS and SNS targets against moto server; the failures moto cannot
//! produce (`failures`) and the exact FIFO parameters (`ordering`) against a
//! stub endpoint.

mod common;
#[path = "aws/failures.rs"]
mod failures;
#[path = "aws/ordering.rs"]
mod ordering;

use std::{collections::HashMap, time::Duration};

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use common::{in_ms, moto::Moto, proxy::Proxy, Api, TestApp};
use dispatch::delivery::Outgoing;
use serde_json::{json, Value};

struct Aws {
    moto: Moto,
    sqs: aws_sdk_sqs::Client,
    sns: aws_sdk_sns::Client,
}

impl Aws {
    async fn start() -> Self {
        let moto = Moto::start().await;
        let config = common::moto::sdk_config(&moto.url).await;
        Self {
            sqs: aws_sdk_sqs::Client::new(&config),
            sns: aws_sdk_sns::Client::new(&config),
            moto,
        }
    }

    async fn queue(&self, fifo: bool) -> String {
        let name = format!(
            "q-{}{}",
            uuid::Uuid::new_v4().simple(),
            if fifo { ".fifo" } else { "" }
        );
        let mut req = self.sqs.create_queue().queue_name(name);
        if fifo {
            req = req.attributes(QueueAttributeName::FifoQueue, "true");
        }
        req.send().await.unwrap().queue_url().unwrap().to_string()
    }

    async fn receive(&self, queue_url: &str, max: i32) -> Vec<aws_sdk_sqs::types::Message> {
        self.sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(max)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap()
            .messages()
            .to_vec()
    }

    async fn receive_all(&self, queue_url: &str, n: usize) -> Vec<aws_sdk_sqs::types::Message> {
        let mut all = Vec::new();
        for _ in 0..20 {
            if all.len() >= n {
                break;
            }
            all.extend(self.receive(queue_url, 10).await);
        }
        all
    }

    fn sqs_config(&self, queue_url: &str, endpoint: &str) -> Value {
        json!({"queueUrl": queue_url, "region": "us-east-1", "endpointUrl": endpoint,
               "credentials": {"accessKeyId": "testing", "secretAccessKey": "testing"}})
    }
}

async fn target(api: &Api, kind: &str, config: Value) -> String {
    let r = api
        .post(
            "/targets",
            json!({"name": kind, "type": kind, "config": config}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["config"]["credentials"]["secretAccessKey"], "***");
    t["targetId"].as_str().unwrap().to_string()
}

fn attr(m: &aws_sdk_sqs::types::Message, name: &str) -> String {
    m.message_attributes().unwrap()[name]
        .string_value()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn an_sqs_queue_receives_the_envelope_with_its_attributes() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = aws.queue(false).await;
    let t = target(&api, "sqs", aws.sqs_config(&queue, &aws.moto.url)).await;
    let m = api.schedule(&t, &in_ms(0), "to the queue").await;
    let id = m["messageId"].as_str().unwrap();
    let m = api
        .wait_for_state(id, "Delivered", Duration::from_secs(10))
        .await;

    let got = aws.receive(&queue, 10).await;
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_str(got[0].body().unwrap()).unwrap();
    assert_eq!(body["messageId"], id);
    assert_eq!(body["targetId"], t);
    assert_eq!(body["payload"], "to the queue");
    assert_eq!(body["originalDeliveryTime"], m["deliveryTime"]);
    assert!(body["deliveryTime"].is_string());
    assert_eq!(attr(&got[0], "messageId"), id);
    assert_eq!(attr(&got[0], "targetId"), t);
    assert_eq!(
        attr(&got[0], "originalDeliveryTime"),
        m["deliveryTime"].as_str().unwrap()
    );
    let attempts = api.attempts(id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "Success");
    app.shutdown().await;
}

#[tokio::test]
async fn a_message_made_from_an_event_carries_its_event_in_the_envelope_and_attributes() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = aws.queue(false).await;
    let t = target(&api, "sqs", aws.sqs_config(&queue, &aws.moto.url)).await;
    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": t, "types": ["order.*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = api
        .post(
            "/events",
            json!({"type": "order.created", "payload": "to the queue"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let e: Value = r.json().await.unwrap();
    let id = e["messages"][0]["messageId"].as_str().unwrap();
    api.wait_for_state(id, "Delivered", Duration::from_secs(10))
        .await;

    let got = aws.receive(&queue, 10).await;
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_str(got[0].body().unwrap()).unwrap();
    assert_eq!(body["eventId"], e["eventId"]);
    assert_eq!(body["type"], "order.created");
    assert_eq!(attr(&got[0], "eventId"), e["eventId"].as_str().unwrap());
    assert_eq!(attr(&got[0], "type"), "order.created");
    assert_eq!(attr(&got[0], "messageId"), id);
    app.shutdown().await;
}

/// A payload an envelope would escape, sent as it is.
const RAW_PAYLOAD: &str = "<order id=\"7\">\n\tcafé — 🎉</order>";

#[tokio::test]
async fn a_raw_queue_and_topic_get_the_payload_as_the_body_and_the_envelope_as_attributes() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = aws.queue(false).await;
    let mut config = aws.sqs_config(&queue, &aws.moto.url);
    config["format"] = json!("raw");
    let q = target(&api, "sqs", config).await;
    let (topic, topic_queue) = sns_to_queue(&aws, true, false).await;
    let mut config = sns_config(&topic, &aws.moto.url);
    config["format"] = json!("raw");
    let t = target(&api, "sns", config).await;
    for target in [&q, &t] {
        let r = api
            .post(
                "/subscriptions",
                json!({"targetId": target, "types": ["order.created"]}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    let r = api
        .post(
            "/events",
            json!({"type": "order.created", "payload": RAW_PAYLOAD, "orderingKey": "c-7"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let e: Value = r.json().await.unwrap();
    let messages = e["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    for (queue_url, target_id) in [(&queue, &q), (&topic_queue, &t)] {
        let m = messages
            .iter()
            .find(|m| m["targetId"] == target_id.as_str())
            .unwrap();
        let id = m["messageId"].as_str().unwrap();
        let m = api
            .wait_for_state(id, "Delivered", Duration::from_secs(10))
            .await;
        let got = aws.receive_all(queue_url, 1).await;
        assert_eq!(got.len(), 1, "{target_id}");
        assert_eq!(got[0].body().unwrap(), RAW_PAYLOAD, "{target_id}");
        assert_eq!(attr(&got[0], "messageId"), id);
        assert_eq!(attr(&got[0], "targetId"), target_id.as_str());
        assert_eq!(
            attr(&got[0], "originalDeliveryTime"),
            m["deliveryTime"].as_str().unwrap()
        );
        let at = chrono::DateTime::parse_from_rfc3339(&attr(&got[0], "deliveryTime")).unwrap();
        let due =
            chrono::DateTime::parse_from_rfc3339(m["deliveryTime"].as_str().unwrap()).unwrap();
        assert!(at >= due, "attempted {at}, due {due}");
        assert_eq!(attr(&got[0], "orderingKey"), "c-7");
        assert_eq!(attr(&got[0], "eventId"), e["eventId"].as_str().unwrap());
        assert_eq!(attr(&got[0], "type"), "order.created");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn fifo_queues_get_the_group_and_the_message_id_as_deduplication_id() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = aws.queue(true).await;
    let mut grouped = aws.sqs_config(&queue, &aws.moto.url);
    grouped["messageGroupId"] = json!("orders");
    let with_group = target(&api, "sqs", grouped).await;
    let without_group = target(&api, "sqs", aws.sqs_config(&queue, &aws.moto.url)).await;
    let a = api.schedule(&with_group, &in_ms(0), "a").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let b = api.schedule(&without_group, &in_ms(0), "b").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for_state(&a, "Delivered", Duration::from_secs(10))
        .await;
    api.wait_for_state(&b, "Delivered", Duration::from_secs(10))
        .await;

    let got = aws.receive_all(&queue, 2).await;
    let by_id: HashMap<String, &aws_sdk_sqs::types::Message> =
        got.iter().map(|m| (attr(m, "messageId"), m)).collect();
    let sys =
        |id: &str, name: MessageSystemAttributeName| by_id[id].attributes().unwrap()[&name].clone();
    assert_eq!(
        sys(&a, MessageSystemAttributeName::MessageGroupId),
        "orders"
    );
    assert_eq!(
        sys(&a, MessageSystemAttributeName::MessageDeduplicationId),
        a
    );
    assert_eq!(
        sys(&b, MessageSystemAttributeName::MessageGroupId),
        without_group,
        "the targetId by default"
    );
    assert_eq!(
        sys(&b, MessageSystemAttributeName::MessageDeduplicationId),
        b
    );
    app.shutdown().await;
}

/// Schedules `payload` now with an orderingKey; returns the messageId.
async fn schedule_keyed(api: &Api, target: &str, key: &str, payload: &str) -> String {
    let r = api
        .post(
            "/messages",
            json!({"targetId": target, "deliveryTime": in_ms(0), "payload": payload, "orderingKey": key}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["orderingKey"], key);
    m["messageId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn an_ordering_key_is_the_fifo_group_and_an_attribute() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = aws.queue(true).await;
    let mut config = aws.sqs_config(&queue, &aws.moto.url);
    config["messageGroupId"] = json!("orders");
    let t = target(&api, "sqs", config).await;
    let keyed = schedule_keyed(&api, &t, "customer-7", "a").await;
    // Too long for a group id (128 at most): its digest, the same for every message of the key.
    let long_key = "k".repeat(200);
    let long = schedule_keyed(&api, &t, &long_key, "b").await;
    for id in [&keyed, &long] {
        api.wait_for_state(id, "Delivered", Duration::from_secs(10))
            .await;
    }

    let got = aws.receive_all(&queue, 2).await;
    let by_id: HashMap<String, &aws_sdk_sqs::types::Message> =
        got.iter().map(|m| (attr(m, "messageId"), m)).collect();
    let group = |id: &str| {
        by_id[id].attributes().unwrap()[&MessageSystemAttributeName::MessageGroupId].clone()
    };
    assert_eq!(
        group(&keyed),
        "customer-7",
        "the key before the target's group"
    );
    assert_eq!(attr(by_id[&keyed], "orderingKey"), "customer-7");
    let digest = group(&long);
    assert!(
        digest.starts_with("sha256:") && digest.len() == 7 + 64,
        "{digest}"
    );
    assert_eq!(attr(by_id[&long], "orderingKey"), long_key);
    app.shutdown().await;
}

#[tokio::test]
async fn a_fifo_queue_drops_a_redelivery_of_the_same_message() {
    // A crash after SendMessage but before recording makes Dispatch send the
    // same message again; the deduplication id makes SQS drop it.
    let aws = Aws::start().await;
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let api = app.api("acme").await;
    let queue = aws.queue(true).await;
    let t = target(&api, "sqs", aws.sqs_config(&queue, &aws.moto.url)).await;
    let id = api.schedule(&t, &in_ms(-1), "once").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let store = app.store();
    let sweeper = &app.running().sweeper;
    let claimed = store
        .claim_due(chrono::Utc::now(), 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    // Deliver twice without recording, as two instances would after a lost lease.
    for _ in 0..2 {
        let d = sweeper
            .deliverer
            .deliver(&Outgoing::from(&claimed[0]))
            .await;
        assert_eq!(
            d.outcome,
            dispatch::domain::retry::AttemptOutcome::Success,
            "{:?}",
            d.error
        );
    }
    let got = aws.receive_all(&queue, 2).await;
    assert_eq!(got.len(), 1, "the second send was deduplicated");
    assert_eq!(attr(&got[0], "messageId"), id);
    app.shutdown().await;
}

/// A topic with a queue subscribed to it (FIFO both, or neither); returns
/// (topic ARN, queue URL).
async fn sns_to_queue(aws: &Aws, raw: bool, fifo: bool) -> (String, String) {
    let mut topic = aws.sns.create_topic().name(format!(
        "t-{}{}",
        uuid::Uuid::new_v4().simple(),
        if fifo { ".fifo" } else { "" }
    ));
    if fifo {
        topic = topic.attributes("FifoTopic", "true");
    }
    let topic = topic.send().await.unwrap();
    let topic_arn = topic.topic_arn().unwrap().to_string();
    let queue = aws.queue(fifo).await;
    let queue_arn = aws
        .sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    aws.sns
        .subscribe()
        .topic_arn(&topic_arn)
        .protocol("sqs")
        .endpoint(queue_arn)
        .attributes("RawMessageDelivery", if raw { "true" } else { "false" })
        .send()
        .await
        .unwrap();
    (topic_arn, queue)
}

fn sns_config(topic_arn: &str, endpoint: &str) -> Value {
    json!({"topicArn": topic_arn, "region": "us-east-1", "endpointUrl": endpoint,
           "credentials": {"accessKeyId": "testing", "secretAccessKey": "testing"}})
}

#[tokio::test]
async fn an_sns_topic_delivers_to_a_raw_sqs_subscription() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let (topic, queue) = sns_to_queue(&aws, true, false).await;
    let t = target(&api, "sns", sns_config(&topic, &aws.moto.url)).await;
    let id = api.schedule(&t, &in_ms(0), "raw").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    let got = aws.receive_all(&queue, 1).await;
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_str(got[0].body().unwrap()).unwrap();
    assert_eq!(body["messageId"], id.as_str());
    assert_eq!(body["payload"], "raw");
    assert_eq!(attr(&got[0], "messageId"), id);
    assert_eq!(attr(&got[0], "targetId"), t);
    app.shutdown().await;
}

#[tokio::test]
async fn an_sns_topic_delivers_to_a_wrapped_sqs_subscription() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let (topic, queue) = sns_to_queue(&aws, false, false).await;
    let t = target(&api, "sns", sns_config(&topic, &aws.moto.url)).await;
    let id = api.schedule(&t, &in_ms(0), "wrapped").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    let got = aws.receive_all(&queue, 1).await;
    assert_eq!(got.len(), 1);
    let notification: Value = serde_json::from_str(got[0].body().unwrap()).unwrap();
    assert_eq!(notification["TopicArn"], topic.as_str());
    let envelope: Value = serde_json::from_str(notification["Message"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["messageId"], id.as_str());
    assert_eq!(envelope["payload"], "wrapped");
    assert_eq!(
        notification["MessageAttributes"]["messageId"]["Value"],
        id.as_str()
    );
    assert_eq!(
        notification["MessageAttributes"]["targetId"]["Value"],
        t.as_str()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn fifo_topics_get_the_group_and_the_message_id_as_deduplication_id() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let (topic, queue) = sns_to_queue(&aws, true, true).await;
    let mut grouped = sns_config(&topic, &aws.moto.url);
    grouped["messageGroupId"] = json!("orders");
    let with_group = target(&api, "sns", grouped).await;
    let without_group = target(&api, "sns", sns_config(&topic, &aws.moto.url)).await;
    let a = api.schedule(&with_group, &in_ms(0), "a").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let b = api.schedule(&without_group, &in_ms(0), "b").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for_state(&a, "Delivered", Duration::from_secs(10))
        .await;
    api.wait_for_state(&b, "Delivered", Duration::from_secs(10))
        .await;

    // The FIFO queue subscribed to the topic sees what SNS was given.
    let got = aws.receive_all(&queue, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let by_id: HashMap<String, &aws_sdk_sqs::types::Message> =
        got.iter().map(|m| (attr(m, "messageId"), m)).collect();
    let sys =
        |id: &str, name: MessageSystemAttributeName| by_id[id].attributes().unwrap()[&name].clone();
    assert_eq!(
        sys(&a, MessageSystemAttributeName::MessageGroupId),
        "orders"
    );
    assert_eq!(
        sys(&a, MessageSystemAttributeName::MessageDeduplicationId),
        a
    );
    assert_eq!(
        sys(&b, MessageSystemAttributeName::MessageGroupId),
        without_group,
        "the targetId by default"
    );
    assert_eq!(
        sys(&b, MessageSystemAttributeName::MessageDeduplicationId),
        b
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_missing_queue_or_topic_dead_letters_after_one_attempt() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let missing_queue = format!(
        "{}/123456789012/no-such-queue-{}",
        aws.moto.url,
        uuid::Uuid::new_v4().simple()
    );
    let q = target(&api, "sqs", aws.sqs_config(&missing_queue, &aws.moto.url)).await;
    let missing_topic = format!(
        "arn:aws:sns:us-east-1:123456789012:no-such-topic-{}",
        uuid::Uuid::new_v4().simple()
    );
    let t = target(&api, "sns", sns_config(&missing_topic, &aws.moto.url)).await;
    for (target_id, code) in [(q, "NonExistentQueue"), (t, "NotFound")] {
        let id = api.schedule(&target_id, &in_ms(0), "nowhere").await["messageId"]
            .as_str()
            .unwrap()
            .to_string();
        let m = api
            .wait_for_state(&id, "DeadLetter", Duration::from_secs(10))
            .await;
        assert_eq!(m["attemptCount"], 1);
        let attempts = api.attempts(&id).await;
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0]["outcome"], "NonRetryableFailure");
        let error = attempts[0]["error"].as_str().unwrap();
        assert!(error.contains(code), "{error}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_queue_unreachable_mid_run_recovers_through_the_ladder() {
    let aws = Aws::start().await;
    let upstream = aws.moto.url.trim_start_matches("http://").to_string();
    let proxy = Proxy::start(upstream).await;
    let endpoint = format!("http://{}", proxy.addr);
    let ladder = |c: &mut dispatch::config::Config| {
        common::fast_ladder(c);
        c.retry.minute_delay = Duration::from_millis(200);
    };
    // Attempts driven by hand while the queue is unreachable; then an
    // instance that runs on the same store takes the message up where the
    // ladder left it.
    let app = TestApp::spawn_with(|c| {
        ladder(c);
        c.sweeper.enabled = false;
    })
    .await;
    let api = app.api("acme").await;
    let queue = aws.queue(false).await;
    let t = target(&api, "sqs", aws.sqs_config(&queue, &endpoint)).await;
    let first = api.schedule(&t, &in_ms(-1), "before").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    assert_eq!(api.message(&first).await["state"], "Delivered");

    proxy.cut();
    let id = api.schedule(&t, &in_ms(-1), "during").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    let attempts = api.attempts(&id).await;
    assert_eq!(
        attempts.len(),
        2,
        "an attempt and its immediate retry: {attempts:?}"
    );
    assert!(
        attempts.iter().all(|a| a["outcome"] == "RetryableFailure"),
        "network errors are retryable: {attempts:?}"
    );
    let m = api.message(&id).await;
    assert_eq!(m["state"], "Scheduled", "{m}");
    assert!(m["nextAttemptAt"].is_string(), "{m}");
    let db = app.db.clone();
    app.shutdown().await;

    proxy.restore();
    let running = TestApp::spawn_on(db, ladder).await;
    let api = Api {
        base: running.base.clone(),
        ..api
    };
    let m = api
        .wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    let attempts = api.attempts(&id).await;
    assert!(attempts.len() >= 3, "{attempts:?}");
    assert!(attempts[..attempts.len() - 1]
        .iter()
        .all(|a| a["outcome"] == "RetryableFailure"));
    assert_eq!(attempts.last().unwrap()["outcome"], "Success");
    assert_eq!(m["attemptCount"].as_u64().unwrap() as usize, attempts.len());
    assert_eq!(aws.receive_all(&queue, 2).await.len(), 2);
    running.shutdown().await;
}

#[tokio::test]
async fn many_messages_due_together_for_one_queue_are_each_delivered_and_recorded() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = aws.queue(false).await;
    let t = target(&api, "sqs", aws.sqs_config(&queue, &aws.moto.url)).await;
    let at = in_ms(1_000);
    let mut ids = Vec::new();
    for i in 0..25 {
        ids.push(
            api.schedule(&t, &at, &format!("m{i}")).await["messageId"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    for id in &ids {
        api.wait_for_state(id, "Delivered", Duration::from_secs(15))
            .await;
        let attempts = api.attempts(id).await;
        assert_eq!(
            attempts.len(),
            1,
            "each entry of a batch is its own attempt"
        );
        assert_eq!(attempts[0]["outcome"], "Success");
    }
    let got = aws.receive_all(&queue, 25).await;
    let mut received: Vec<String> = got.iter().map(|m| attr(m, "messageId")).collect();
    received.sort();
    ids.sort();
    assert_eq!(received, ids);
    app.shutdown().await;
}

#[tokio::test]
async fn sqs_and_sns_configs_are_checked_at_creation() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for (kind, config, field) in [
        (
            "sqs",
            json!({"queueUrl": "not a url", "region": "us-east-1"}),
            "config.queueUrl",
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "moon"}),
            "config.region",
        ),
        (
            "sns",
            json!({"topicArn": "arn:aws:sqs:us-east-1:123456789012:x", "region": "us-east-1"}),
            "config.topicArn",
        ),
        (
            "sns",
            json!({"topicArn": "arn:aws:sns:us-east-1:123456789012:x", "region": "us-east-1",
                       "credentials": {"accessKeyId": "a"}}),
            "config.credentials.secretAccessKey",
        ),
    ] {
        let r = api
            .post(
                "/targets",
                json!({"name": "x", "type": kind, "config": config}),
            )
            .await;
        let problem = common::problem::assert_invalid(r, field).await;
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
    }
    app.shutdown().await;
}

//! An orderingKey on FIFO queues and topics: it is the `MessageGroupId`
//! (before the target's `messageGroupId`, else the targetId), the messageId
//! is the `MessageDeduplicationId`, and the key is also the `orderingKey`
//! message attribute. Against moto, what a FIFO queue subscribed to a FIFO
//! topic receives; against the stub, the exact request parameters of
//! SendMessage, SendMessageBatch and Publish.

use super::*;
use common::aws_stub::{AwsStub, Call};

#[tokio::test]
async fn an_ordering_key_is_the_sns_fifo_group_and_an_attribute() {
    let aws = Aws::start().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let (topic, queue) = sns_to_queue(&aws, true, true).await;
    let mut config = sns_config(&topic, &aws.moto.url);
    config["messageGroupId"] = json!("orders");
    let t = target(&api, "sns", config).await;
    let keyed = schedule_keyed(&api, &t, "customer-7", "a").await;
    let long_key = "k".repeat(200);
    let long = schedule_keyed(&api, &t, &long_key, "b").await;
    for id in [&keyed, &long] {
        api.wait_for_state(id, "Delivered", Duration::from_secs(10))
            .await;
    }

    let got = aws.receive_all(&queue, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let by_id: HashMap<String, &aws_sdk_sqs::types::Message> =
        got.iter().map(|m| (attr(m, "messageId"), m)).collect();
    let sys =
        |id: &str, name: MessageSystemAttributeName| by_id[id].attributes().unwrap()[&name].clone();
    assert_eq!(
        sys(&keyed, MessageSystemAttributeName::MessageGroupId),
        "customer-7",
        "the key before the target's group"
    );
    assert_eq!(
        sys(&keyed, MessageSystemAttributeName::MessageDeduplicationId),
        keyed
    );
    assert_eq!(attr(by_id[&keyed], "orderingKey"), "customer-7");
    let digest = sys(&long, MessageSystemAttributeName::MessageGroupId);
    assert!(
        digest.starts_with("sha256:") && digest.len() == 7 + 64,
        "{digest}"
    );
    assert_eq!(attr(by_id[&long], "orderingKey"), long_key);
    app.shutdown().await;
}

/// The `StringValue` of the SNS message attribute `name` in a Publish form
/// (`MessageAttributes.entry.N.Name` / `.Value.StringValue`).
fn sns_attribute(call: &Call, name: &str) -> Option<String> {
    let form = call.params.as_object().unwrap();
    let (key, _) = form.iter().find(|(k, v)| {
        k.starts_with("MessageAttributes.entry.")
            && k.ends_with(".Name")
            && v.as_str() == Some(name)
    })?;
    let value = key.replace(".Name", ".Value.StringValue");
    form.get(&value).and_then(Value::as_str).map(String::from)
}

#[tokio::test]
async fn fifo_requests_carry_the_ordering_key_as_message_group_id() {
    let stub = AwsStub::start().await;
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let api = app.api("acme").await;
    let creds = json!({"accessKeyId": "testing", "secretAccessKey": "testing"});
    let fifo_queue = stub.queue_url("q.fifo");
    let plain_queue = stub.queue_url("q");
    let fifo_topic = stub.topic_arn("t.fifo");
    let sqs = |queue: &str| {
        json!({"queueUrl": queue, "region": "us-east-1", "endpointUrl": stub.url,
               "credentials": creds})
    };
    let mut sns = sns_config(&fifo_topic, &stub.url);
    sns["messageGroupId"] = json!("orders");
    let mut fifo_config = sqs(&fifo_queue);
    fifo_config["messageGroupId"] = json!("orders");
    let fifo_q = target(&api, "sqs", fifo_config).await;
    let plain_q = target(&api, "sqs", sqs(&plain_queue)).await;
    let fifo_t = target(&api, "sns", sns).await;

    // One at a time (SendMessage, Publish).
    let on_fifo_queue = schedule_keyed(&api, &fifo_q, "customer-7", "a").await;
    let on_plain_queue = schedule_keyed(&api, &plain_q, "customer-7", "b").await;
    let on_fifo_topic = schedule_keyed(&api, &fifo_t, "customer-7", "c").await;
    assert_eq!(app.running().sweeper.deliver_due_now().await, 3);

    let call = &stub.calls(&fifo_queue)[0];
    assert_eq!(call.action, "SendMessage");
    assert_eq!(
        call.params["MessageGroupId"], "customer-7",
        "{:?}",
        call.params
    );
    assert_eq!(
        call.params["MessageDeduplicationId"],
        on_fifo_queue.as_str()
    );
    assert_eq!(
        call.params["MessageAttributes"]["orderingKey"]["StringValue"],
        "customer-7"
    );

    let call = &stub.calls(&plain_queue)[0];
    assert!(
        call.params.get("MessageGroupId").is_none(),
        "{:?}",
        call.params
    );
    assert!(call.params.get("MessageDeduplicationId").is_none());
    assert_eq!(
        call.params["MessageAttributes"]["messageId"]["StringValue"],
        on_plain_queue.as_str()
    );
    assert_eq!(
        call.params["MessageAttributes"]["orderingKey"]["StringValue"],
        "customer-7"
    );

    let call = &stub.calls(&fifo_topic)[0];
    assert_eq!(call.action, "Publish");
    assert_eq!(
        call.params["MessageGroupId"], "customer-7",
        "{:?}",
        call.params
    );
    assert_eq!(
        call.params["MessageDeduplicationId"],
        on_fifo_topic.as_str()
    );
    assert_eq!(
        sns_attribute(call, "orderingKey").as_deref(),
        Some("customer-7")
    );

    // Due together for one FIFO queue (SendMessageBatch): each entry its own
    // key; a message without one gets the target's group.
    let a = schedule_keyed(&api, &fifo_q, "customer-8", "d").await;
    let b = api.schedule(&fifo_q, &in_ms(0), "e").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
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
    assert!(results
        .iter()
        .all(|d| d.outcome == dispatch::domain::retry::AttemptOutcome::Success));
    let call = stub.calls(&fifo_queue).pop().unwrap();
    assert_eq!(call.action, "SendMessageBatch");
    let entries = call.params["Entries"].as_array().unwrap();
    let group_of = |id: &str| {
        let e = entries
            .iter()
            .find(|e| e["MessageDeduplicationId"] == id)
            .unwrap_or_else(|| panic!("no entry for {id}: {entries:?}"));
        e["MessageGroupId"].as_str().unwrap().to_string()
    };
    assert_eq!(group_of(&a), "customer-8");
    assert_eq!(group_of(&b), "orders");
    app.shutdown().await;
}

//! The raw format (`"format": "raw"`): a webhook gets the payload's exact
//! characters as its body, its `Content-Type` the target's `contentType`,
//! the envelope's fields as `dispatch-*` headers, and a signature over that
//! body that a Standard Webhooks library accepts; the config is checked
//! field by field.

use super::*;
use common::problem::assert_invalid;

/// A payload a JSON envelope would have escaped: quotes, a backslash, a
/// newline, a tab, characters beyond ASCII and beyond the BMP.
const AWKWARD: &str = "{\"order\": 7}\n\t<a href=\"x\">é ü — 🎉</a> \\ \u{2028} end ";

/// What a receiver using the Standard Webhooks library does with a request.
fn verify(secret: &str, got: &common::receiver::Received) {
    let wh = standardwebhooks::Webhook::new(secret).expect("a whsec_ secret");
    wh.verify(&got.body, &got.headers)
        .unwrap_or_else(|e| panic!("the library refuses the signature: {e:?}"));
}

/// A raw webhook target of `acme` with `extra` config members: the app,
/// its receiver, the API, the target's id and its signing secret.
async fn raw_target(extra: Value) -> (TestApp, Receiver, Api, String, String) {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let mut config = json!({"format": "raw"});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    let t = api.webhook_with(&rx.url("/raw"), config).await;
    assert_eq!(t["config"]["format"], "raw", "{t}");
    let secret = s(&t["config"]["signingSecret"]).to_string();
    (app, rx, api, s(&t["targetId"]).to_string(), secret)
}

#[tokio::test]
async fn a_raw_webhook_gets_the_payloads_characters_and_the_envelope_as_headers() {
    let _machine = share_the_machine().await;
    let (app, rx, api, tid, secret) = raw_target(json!({"contentType": "application/xml"})).await;
    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": tid, "types": ["order.*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = api
        .post(
            "/events",
            json!({"type": "order.created", "payload": AWKWARD, "orderingKey": "customer-7"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let event: Value = r.json().await.unwrap();
    let id = s(&event["messages"][0]["messageId"]).to_string();

    let got = rx.wait_for(1, WAIT).await;
    let m = api.wait_for_state(&id, "Delivered", WAIT).await;
    let req = &got[0];
    assert_eq!(&req.body[..], AWKWARD.as_bytes(), "the body is the payload");
    assert_eq!(req.header("content-type").unwrap(), "application/xml");
    assert_eq!(req.header("webhook-id").unwrap(), id);
    assert_eq!(req.header("dispatch-message-id").unwrap(), id);
    assert_eq!(req.header("dispatch-target-id").unwrap(), tid);
    assert_eq!(
        req.header("dispatch-original-delivery-time").unwrap(),
        s(&m["deliveryTime"])
    );
    let attempted = time(&json!(req.header("dispatch-delivery-time").unwrap()));
    assert!(attempted >= time(&m["deliveryTime"]), "{attempted}");
    assert_eq!(req.header("dispatch-ordering-key").unwrap(), "customer-7");
    assert_eq!(
        req.header("dispatch-event-id").unwrap(),
        s(&event["eventId"])
    );
    assert_eq!(req.header("dispatch-event-type").unwrap(), "order.created");
    verify(&secret, req);
    let header = req.header("webhook-signature").unwrap();
    let ts = req.header("webhook-timestamp").unwrap();
    assert!(signature_is_valid(&secret, &id, &ts, &req.body, &header));
    app.shutdown().await;
}

#[tokio::test]
async fn a_raw_body_defaults_to_plain_text_and_names_only_the_fields_it_has() {
    let _machine = share_the_machine().await;
    // A custom header named like Dispatch's own does not double it.
    let (app, rx, api, tid, secret) =
        raw_target(json!({"headers": {"dispatch-message-id": "spoofed", "X-Team": "a"}})).await;
    let id = schedule_now(&api, &json!({"targetId": tid}), "").await;
    let got = rx.wait_for(1, WAIT).await;
    let req = &got[0];
    assert!(req.body.is_empty(), "an empty payload is an empty body");
    assert_eq!(
        req.header("content-type").unwrap(),
        "text/plain; charset=utf-8"
    );
    let ids: Vec<_> = req.headers.get_all("dispatch-message-id").iter().collect();
    assert_eq!(ids, [id.as_str()]);
    assert_eq!(req.header("x-team").unwrap(), "a");
    for absent in [
        "dispatch-ordering-key",
        "dispatch-event-id",
        "dispatch-event-type",
    ] {
        assert!(req.header(absent).is_none(), "{absent} without a value");
    }
    verify(&secret, req);
    app.shutdown().await;
}

#[tokio::test]
async fn an_envelope_is_signed_for_the_library_too_and_a_patch_switches_the_format() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let t = api.webhook(&rx.url("/either")).await;
    let tid = s(&t["targetId"]).to_string();
    let secret = s(&t["config"]["signingSecret"]).to_string();
    assert_eq!(t["config"]["format"], "envelope", "the default shows");

    schedule_now(&api, &t, AWKWARD).await;
    let got = rx.wait_for(1, WAIT).await;
    assert_eq!(got[0].header("content-type").unwrap(), "application/json");
    assert_eq!(got[0].json()["payload"], AWKWARD);
    assert!(got[0].header("dispatch-message-id").is_none());
    verify(&secret, &got[0]);

    let r = api
        .patch(
            &format!("/targets/{tid}"),
            json!({"config": {"format": "raw", "contentType": "text/csv"}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["config"]["format"], "raw");
    assert_eq!(patched["config"]["contentType"], "text/csv");
    schedule_now(&api, &t, "a,b\n1,2\n").await;
    let got = rx.wait_for(2, WAIT).await;
    assert_eq!(&got[1].body[..], b"a,b\n1,2\n");
    assert_eq!(got[1].header("content-type").unwrap(), "text/csv");
    verify(&secret, &got[1]);

    // Removing the member is the default again.
    let r = api
        .patch(
            &format!("/targets/{tid}"),
            json!({"config": {"format": null, "contentType": null}}),
        )
        .await;
    let back: Value = r.json().await.unwrap();
    assert_eq!(back["config"]["format"], "envelope", "{back}");
    assert!(back["config"].get("contentType").is_none(), "{back}");
    schedule_now(&api, &t, "wrapped again").await;
    let got = rx.wait_for(3, WAIT).await;
    assert_eq!(got[2].json()["payload"], "wrapped again");
    app.shutdown().await;
}

#[tokio::test]
async fn a_format_or_content_type_that_is_not_one_answers_400_on_its_field() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let webhook = |config: Value| {
        let mut c = json!({"url": "https://example.com/hook"});
        for (k, v) in config.as_object().unwrap() {
            c[k] = v.clone();
        }
        json!({"name": "n", "type": "webhook", "config": c})
    };
    for format in [json!("xml"), json!("RAW"), json!(1), json!({})] {
        let r = api
            .post("/targets", webhook(json!({"format": format})))
            .await;
        assert_invalid(r, "config.format").await;
    }
    for content_type in [
        json!(""),
        json!("text"),
        json!("text/plain;"),
        json!("text/plain\r\nX-Injected: 1"),
        json!("text/plain; charset=\"a\\\"b\""),
        json!("text/plain\u{0}"),
        json!(format!("text/{}", "x".repeat(251))),
        json!(5),
    ] {
        let r = api
            .post("/targets", webhook(json!({"contentType": content_type})))
            .await;
        assert_invalid(r, "config.contentType").await;
    }
    let r = api
        .post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/q",
                "region": "eu-north-1", "format": "text",
                "credentials": {"accessKeyId": "a", "secretAccessKey": "b"}}}),
        )
        .await;
    assert_invalid(r, "config.format").await;
    // Nothing was made.
    let list: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 0, "{list}");
    app.shutdown().await;
}

//! The target body read by the rules of docs/api.md#targets: each problem named.

use serde_json::{json, Value};

use super::parse as parse_spec;
use crate::domain::target::{signing_key, FieldError, TargetConfig, TargetSpec};

fn webhook(config: Value) -> Result<TargetSpec, Vec<FieldError>> {
    parse_spec(&json!({"name": "orders", "type": "webhook", "config": config}))
}

fn fields(errors: Vec<FieldError>) -> Vec<String> {
    errors.into_iter().map(|e| e.field).collect()
}

#[test]
fn a_minimal_webhook_gets_a_generated_secret() {
    let spec = webhook(json!({"url": "https://example.com/hook"})).unwrap();
    assert!(spec.generated_secret);
    let TargetConfig::Webhook(c) = &spec.config else {
        panic!()
    };
    assert!(signing_key(&c.signing_secret).is_some());
    assert_eq!(spec.config.to_public_json()["signingSecret"], "***");
}

#[test]
fn webhook_urls_must_be_http() {
    for url in ["ftp://example.com", "not a url", "mailto:a@b.c", ""] {
        assert_eq!(
            fields(webhook(json!({"url": url})).unwrap_err()),
            vec!["config.url"],
            "{url}"
        );
    }
    assert_eq!(fields(webhook(json!({})).unwrap_err()), vec!["config.url"]);
}

#[test]
fn secrets_and_header_values_are_masked() {
    let spec = webhook(json!({
        "url": "https://example.com/hook",
        "headers": {"X-Api-Key": "k"},
        "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                 "clientId": "c", "clientSecret": "s", "scopes": ["a"]}
    }))
    .unwrap();
    assert!(!spec.generated_secret);
    let public = spec.config.to_public_json();
    assert_eq!(public["headers"]["X-Api-Key"], "***");
    assert_eq!(public["signingSecret"], "***");
    assert_eq!(public["auth"]["clientSecret"], "***");
    assert_eq!(public["auth"]["clientId"], "c");
}

#[test]
fn reserved_headers_and_bad_secrets_are_refused() {
    let errs = webhook(
        json!({"url": "https://e.com", "headers": {"User-Agent": "x"}, "signingSecret": "nope"}),
    );
    assert_eq!(
        fields(errs.unwrap_err()),
        vec!["config.headers.User-Agent", "config.signingSecret"]
    );
}

#[test]
fn sqs_and_sns_configs_are_validated() {
    let ok = parse_spec(&json!({"name": "q", "type": "sqs", "config": {
        "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/orders", "region": "eu-north-1"}}));
    assert!(ok.is_ok());
    let bad = parse_spec(
        &json!({"name": "q", "type": "sqs", "config": {"queueUrl": "x", "region": "Europe"}}),
    );
    assert_eq!(
        fields(bad.unwrap_err()),
        vec!["config.queueUrl", "config.region"]
    );
    let ok = parse_spec(&json!({"name": "t", "type": "sns", "config": {
        "topicArn": "arn:aws:sns:us-east-1:123456789012:orders.fifo", "region": "us-east-1"}}));
    assert!(ok.is_ok());
    let bad = parse_spec(
        &json!({"name": "t", "type": "sns", "config": {"topicArn": "arn:aws:sqs:x", "region": "us-east-1"}}),
    );
    assert_eq!(fields(bad.unwrap_err()), vec!["config.topicArn"]);
}

#[test]
fn missing_name_type_and_config_are_each_reported() {
    assert_eq!(
        fields(parse_spec(&json!({})).unwrap_err()),
        vec!["name", "type", "config"]
    );
    assert_eq!(
        fields(parse_spec(&json!({"name": "a", "type": "ftp", "config": {}})).unwrap_err()),
        vec!["type"]
    );
}

#[test]
fn headers_are_limited_in_number_and_size() {
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    let err = webhook(json!({"url": "https://e.com", "headers": many})).unwrap_err();
    assert_eq!(fields(err), vec!["config.headers"]);
    let big = json!({"X-A": "a".repeat(4096), "X-B": "b".repeat(4096)});
    let err = webhook(json!({"url": "https://e.com", "headers": big})).unwrap_err();
    assert_eq!(fields(err), vec!["config.headers"]);
    let at_limit: serde_json::Map<String, Value> = (0..32)
        .map(|i| (format!("X-H{i:02}"), json!("v".repeat(250))))
        .collect();
    assert!(webhook(json!({"url": "https://e.com", "headers": at_limit})).is_ok());
}

#[test]
fn every_reserved_header_is_refused_in_any_case() {
    for name in [
        "Host",
        "content-length",
        "Content-Type",
        "TRANSFER-ENCODING",
        "Connection",
        "user-agent",
        "Webhook-Id",
        "webhook-timestamp",
        "webhook-signature",
    ] {
        let err = webhook(json!({"url": "https://e.com", "headers": {name: "x"}})).unwrap_err();
        assert_eq!(fields(err), vec![format!("config.headers.{name}")]);
    }
}

#[test]
fn authorization_is_refused_only_alongside_oauth() {
    assert!(
        webhook(json!({"url": "https://e.com", "headers": {"Authorization": "Bearer k"}})).is_ok()
    );
    let err = webhook(
        json!({"url": "https://e.com", "headers": {"authorization": "Bearer k"},
        "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example/token",
                 "clientId": "c", "clientSecret": "s"}}),
    )
    .unwrap_err();
    assert_eq!(fields(err), vec!["config.headers.authorization"]);
}

#[test]
fn u0000_in_any_string_the_server_reads_is_named_and_elsewhere_ignored() {
    let err = parse_spec(&json!({"name": "a\0b", "type": "webhook",
        "config": {"url": "https://e.com/\0", "headers": {"X-A": "v\0"},
                   "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example/token",
                            "clientId": "c\0", "clientSecret": "s", "scopes": ["ok", "x\0"]}}}))
    .unwrap_err();
    assert_eq!(
        fields(err),
        vec![
            "name",
            "config.url",
            "config.headers.X-A",
            "config.auth.clientId",
            "config.auth.scopes[1]"
        ]
    );
    let err = webhook(json!({"url": "https://e.com", "headers": {"X\0": "v"}})).unwrap_err();
    assert_eq!(fields(err), vec!["config.headers.X\\u0000"]);
    // A member the server does not read is not part of the target.
    assert!(
        parse_spec(&json!({"name": "a", "type": "webhook", "note\0": "x\0",
        "config": {"url": "https://e.com", "extra": {"k\0": "v\0"}}}))
        .is_ok()
    );
}

#[test]
fn a_timeout_is_an_integer_as_json_schema_counts_them() {
    for ok in [json!(1), json!(5000.0), json!(300000)] {
        let spec = webhook(json!({"url": "https://e.com", "timeoutMs": ok})).unwrap();
        let TargetConfig::Webhook(c) = spec.config else {
            panic!()
        };
        assert!(c.timeout_ms.is_some());
    }
    for bad in [
        json!(0),
        json!(1.5),
        json!(300001),
        json!(-5),
        json!("5000"),
    ] {
        let err = webhook(json!({"url": "https://e.com", "timeoutMs": bad})).unwrap_err();
        assert_eq!(fields(err), vec!["config.timeoutMs"], "{bad}");
    }
}

#[test]
fn sqs_and_sns_read_the_members_they_share() {
    let err = parse_spec(&json!({"name": "q", "type": "sqs", "config": {
        "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/q", "region": "eu-north-1",
        "endpointUrl": "", "credentials": {"accessKeyId": "a"}, "messageGroupId": "a b"}}))
    .unwrap_err();
    assert_eq!(
        fields(err),
        vec![
            "config.endpointUrl",
            "config.credentials.secretAccessKey",
            "config.messageGroupId"
        ]
    );
    let spec = parse_spec(&json!({"name": "t", "type": "sns", "config": {
        "topicArn": "arn:aws:sns:us-east-1:123456789012:t.fifo", "region": "us-east-1",
        "endpointUrl": "http://127.0.0.1:5000", "messageGroupId": "g",
        "credentials": {"accessKeyId": "a", "secretAccessKey": "s"}}}))
    .unwrap();
    let TargetConfig::Sns(c) = spec.config else {
        panic!()
    };
    assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
    assert_eq!(c.message_group_id.as_deref(), Some("g"));
    assert_eq!(c.credentials.unwrap().secret_access_key, "s");
}

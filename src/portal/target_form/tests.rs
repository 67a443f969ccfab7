use super::*;
use crate::wire::target::parse as parse_spec;

#[test]
fn a_webhook_form_becomes_the_api_document() {
    let f = TargetForm {
        name: "orders".into(),
        kind: "webhook".into(),
        enabled: Some("on".into()),
        url: "https://example.com/hook".into(),
        timeout_ms: "5000".into(),
        headers: "X-Api-Key: abc\n\nX-Team: core".into(),
        ..TargetForm::default()
    };
    let doc = f.to_document(false).unwrap();
    assert_eq!(doc["config"]["headers"]["X-Api-Key"], "abc");
    assert_eq!(doc["config"]["timeoutMs"], 5000);
    let spec = parse_spec(&doc).unwrap();
    assert!(spec.generated_secret);
}

#[test]
fn bad_header_lines_and_timeouts_are_named() {
    let f = TargetForm {
        kind: "webhook".into(),
        timeout_ms: "soon".into(),
        headers: "no colon here".into(),
        ..TargetForm::default()
    };
    let fields: Vec<_> = f
        .to_document(false)
        .unwrap_err()
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(fields, ["config.timeoutMs", "config.headers"]);
}

#[test]
fn empty_secrets_on_an_edit_stand_for_the_stored_ones() {
    let f = TargetForm {
        kind: "sqs".into(),
        queue_url: "https://sqs.eu-north-1.amazonaws.com/1/q".into(),
        region: "eu-north-1".into(),
        access_key_id: "AKIA".into(),
        ..TargetForm::default()
    };
    let doc = f.to_document(true).unwrap();
    assert_eq!(doc["config"]["credentials"]["secretAccessKey"], MASK);
    assert_eq!(
        input_of("config.credentials.secretAccessKey"),
        "secretAccessKey"
    );
    assert_eq!(input_of("config.auth.tokenUrl"), "tokenUrl");
    assert_eq!(input_of("config.headers.X-Api-Key"), "headers");
}

#[test]
fn limits_become_flow_control_and_a_breaker_or_null_when_empty() {
    let mut f = TargetForm {
        name: "orders".into(),
        kind: "webhook".into(),
        url: "https://example.com/hook".into(),
        parallelism: "5".into(),
        period: " 2s ".into(),
        cooldown: "30s".into(),
        ..TargetForm::default()
    };
    let doc = f.to_document(false).unwrap();
    assert_eq!(
        doc["config"]["flowControl"],
        serde_json::json!({"parallelism": 5, "period": "2s"})
    );
    assert_eq!(
        doc["config"]["circuitBreaker"],
        serde_json::json!({"cooldown": "30s"})
    );
    let spec = parse_spec(&doc).unwrap();
    assert_eq!(spec.config.limits().breaker.map(|b| b.failures), Some(20));
    f.parallelism = String::new();
    f.period = String::new();
    f.cooldown = String::new();
    let doc = f.to_document(false).unwrap();
    assert!(doc["config"]["flowControl"].is_null() && doc["config"]["circuitBreaker"].is_null());
    f.rate = "many".into();
    let errors = f.to_document(false).unwrap_err();
    assert_eq!(errors[0].field, "config.flowControl.rate");
    assert_eq!(input_of(&errors[0].field), "rate");
}

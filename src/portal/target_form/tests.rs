use super::{input::input_of, *};
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

#[test]
fn an_edit_form_keeps_a_raw_format_and_its_content_type() {
    let doc = serde_json::json!({"name": "raw", "type": "webhook", "config": {
        "url": "https://example.com/hook", "format": "raw", "contentType": "application/xml",
        "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}});
    let spec = parse_spec(&doc).unwrap();
    let now = chrono::Utc::now();
    let target = Target {
        id: crate::domain::ids::TargetId::new(),
        account: crate::domain::ids::AccountId::from_trusted("acme"),
        name: spec.name,
        enabled: true,
        config: spec.config,
        created_at: now,
        updated_at: now,
        health: crate::domain::target::gate::Health::closed(None),
    };
    let form = TargetForm::from_target(&target);
    assert_eq!(
        (form.format.as_str(), form.content_type.as_str()),
        ("raw", "application/xml")
    );
    // What the edit saves (its secret `***` stands for the stored one).
    let doc = form.to_document(true).unwrap();
    assert_eq!(doc["config"]["format"], "raw");
    assert_eq!(doc["config"]["contentType"], "application/xml");
    let typed = TargetForm {
        signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        ..form
    };
    let saved = parse_spec(&typed.to_document(true).unwrap()).unwrap();
    assert_eq!(saved.config.format(), Format::Raw);
    let TargetConfig::Webhook(w) = saved.config else {
        unreachable!()
    };
    assert_eq!(w.content_type.as_deref(), Some("application/xml"));
    // A new form's empty choice is the envelope, and an SQS target may be raw.
    let blank = TargetForm {
        name: "q".into(),
        kind: "sqs".into(),
        queue_url: "https://sqs.eu-north-1.amazonaws.com/123456789012/q".into(),
        region: "eu-north-1".into(),
        access_key_id: "AKIA".into(),
        secret_access_key: "s".into(),
        ..TargetForm::default()
    };
    let envelope = parse_spec(&blank.to_document(false).unwrap()).unwrap();
    assert_eq!(envelope.config.format(), Format::Envelope);
    let raw = TargetForm {
        format: "raw".into(),
        ..blank
    };
    assert_eq!(
        parse_spec(&raw.to_document(false).unwrap())
            .unwrap()
            .config
            .format(),
        Format::Raw
    );
}

//! Targets and their configuration (API.md §3), parsed from JSON at the edge.

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::ids::TargetId;

mod parse;
mod secrets;

pub use parse::parse_spec;

/// What a response shows in place of a secret.
pub const MASK: &str = "***";

#[derive(Debug, Clone)]
pub struct Target {
    pub id: TargetId,
    pub account: String,
    pub name: String,
    pub enabled: bool,
    pub config: TargetConfig,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TargetConfig {
    Webhook(WebhookConfig),
    Sqs(SqsConfig),
    Sns(SnsConfig),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookConfig {
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    pub signing_secret: String,
    #[serde(default)]
    pub auth: Option<OAuthClientCredentials>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuthClientCredentials {
    #[serde(rename = "type")]
    pub kind: String,
    pub token_url: String,
    pub client_id: String,
    pub client_secret: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SqsConfig {
    pub queue_url: String,
    pub region: String,
    #[serde(default)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    pub credentials: Option<AwsCredentials>,
    #[serde(default)]
    pub message_group_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnsConfig {
    pub topic_arn: String,
    pub region: String,
    #[serde(default)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    pub credentials: Option<AwsCredentials>,
    #[serde(default)]
    pub message_group_id: Option<String>,
}

/// One invalid field, named by its JSON path (`config.url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A validated name and configuration, ready to store.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    pub name: String,
    pub enabled: bool,
    pub config: TargetConfig,
    /// Set when the signing secret was generated: shown once in the create response.
    pub generated_secret: bool,
}

impl TargetConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            TargetConfig::Webhook(_) => "webhook",
            TargetConfig::Sqs(_) => "sqs",
            TargetConfig::Sns(_) => "sns",
        }
    }

    /// The configuration with its secrets, as stored.
    pub fn to_stored_json(&self) -> Value {
        match self {
            TargetConfig::Webhook(c) => serde_json::to_value(c),
            TargetConfig::Sqs(c) => serde_json::to_value(c),
            TargetConfig::Sns(c) => serde_json::to_value(c),
        }
        .expect("target configs serialize")
    }

    pub fn from_stored_json(kind: &str, v: Value) -> Result<Self, serde_json::Error> {
        Ok(match kind {
            "sqs" => TargetConfig::Sqs(serde_json::from_value(v)?),
            "sns" => TargetConfig::Sns(serde_json::from_value(v)?),
            _ => TargetConfig::Webhook(serde_json::from_value(v)?),
        })
    }

    /// The configuration as a response shows it: every secret is `***`.
    pub fn to_public_json(&self) -> Value {
        let mut v = self.to_stored_json();
        for path in secret_paths(self.kind()) {
            mask_path(&mut v, path);
        }
        if let Some(Value::Object(headers)) = v.get_mut("headers") {
            for value in headers.values_mut() {
                *value = Value::String(MASK.into());
            }
        }
        v
    }
}

fn secret_paths(kind: &str) -> &'static [&'static [&'static str]] {
    match kind {
        "webhook" => &[&["signingSecret"], &["auth", "clientSecret"]],
        _ => &[&["credentials", "secretAccessKey"]],
    }
}

fn mask_path(v: &mut Value, path: &[&str]) {
    let mut cur = v;
    for key in path {
        match cur.get_mut(*key) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if cur.is_string() {
        *cur = Value::String(MASK.into());
    }
}

/// Where a merged PATCH document still holds `***` for a secret, the client
/// echoed a masked response back: keep the secret it stands for. Secrets
/// that travel to an address (header values to `url`, the OAuth client
/// secret to `tokenUrl`) are kept only while that address is unchanged, so
/// that a patch cannot send them somewhere new; a `***` left over then is
/// an error naming the field to send again.
pub fn restore_masked_secrets(
    kind: &str,
    merged: &mut Value,
    stored: &Value,
) -> Result<(), Vec<FieldError>> {
    let same = |path: &[&str], merged: &Value| pointer(merged, path) == pointer(stored, path);
    let url_unchanged = same(&["url"], merged);
    let token_url_unchanged = same(&["auth", "tokenUrl"], merged);
    for path in secret_paths(kind) {
        let travels = *path == ["auth", "clientSecret"] && !token_url_unchanged;
        let (Some(new), Some(old)) = (pointer_mut(merged, path), pointer(stored, path)) else {
            continue;
        };
        if new.as_str() == Some(MASK) && !travels {
            *new = old.clone();
        }
    }
    if let (Some(Value::Object(new)), Some(Value::Object(old))) =
        (merged.get_mut("headers"), stored.get("headers"))
    {
        for (name, value) in new.iter_mut() {
            if value.as_str() == Some(MASK) && url_unchanged {
                if let Some(old_value) = old.get(name) {
                    *value = old_value.clone();
                }
            }
        }
    }
    let mut errors = Vec::new();
    for path in secret_paths(kind) {
        if pointer(merged, path).and_then(Value::as_str) == Some(MASK) {
            errors.push(FieldError::new(
                format!("config.{}", path.join(".")),
                "must be sent in full: it is not kept when the address it goes to changes",
            ));
        }
    }
    if let Some(Value::Object(headers)) = merged.get("headers") {
        for (name, value) in headers {
            if value.as_str() == Some(MASK) {
                errors.push(FieldError::new(
                    format!("config.headers.{name}"),
                    "must be sent in full: header values are not kept when the url changes",
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn pointer<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| cur.get(*key))
}

fn pointer_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |cur, key| cur.get_mut(*key))
}

/// A fresh Standard Webhooks secret: `whsec_` and 24 random bytes in base64.
pub fn generate_signing_secret() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    format!("whsec_{}", B64.encode(bytes))
}

/// The HMAC key inside a `whsec_` secret.
pub fn signing_key(secret: &str) -> Option<Vec<u8>> {
    let key = B64.decode(secret.strip_prefix("whsec_")?).ok()?;
    (16..=64).contains(&key.len()).then_some(key)
}

/// The stored document a merge patch applies to: the full target with secrets.
pub fn patchable_document(t: &Target) -> Value {
    json!({"name": t.name, "type": t.config.kind(), "enabled": t.enabled, "config": t.config.to_stored_json()})
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn echoed_masks_keep_the_stored_secrets() {
        let stored = json!({"signingSecret": "whsec_old", "headers": {"A": "1", "B": "2"}});
        let mut merged = json!({"signingSecret": "***", "headers": {"A": "***", "B": "3"}});
        restore_masked_secrets("webhook", &mut merged, &stored).unwrap();
        assert_eq!(
            merged,
            json!({"signingSecret": "whsec_old", "headers": {"A": "1", "B": "3"}})
        );
        // A new header sent as *** has nothing to stand for.
        let mut merged = json!({"signingSecret": "***", "headers": {"C": "***"}});
        let errors = restore_masked_secrets("webhook", &mut merged, &stored).unwrap_err();
        assert_eq!(errors[0].field, "config.headers.C");
    }

    #[test]
    fn secrets_are_not_kept_when_their_destination_changes() {
        let stored = json!({"url": "https://a.example/hook", "signingSecret": "whsec_old", "headers": {"K": "key"},
                            "auth": {"tokenUrl": "https://id.example/token", "clientSecret": "s"}});
        let mut merged = json!({"url": "https://evil.example/hook", "signingSecret": "***", "headers": {"K": "***"},
                                "auth": {"tokenUrl": "https://evil.example/token", "clientSecret": "***"}});
        let errors = restore_masked_secrets("webhook", &mut merged, &stored).unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["config.auth.clientSecret", "config.headers.K"]);
        // The signing secret never leaves Dispatch: it is kept.
        assert_eq!(merged["signingSecret"], "whsec_old");
    }
}

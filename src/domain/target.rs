//! Targets and their configuration (API.md §3), parsed from JSON at the edge.

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use url::Url;

use super::ids::TargetId;

/// What a response shows in place of a secret.
pub const MASK: &str = "***";

/// Headers a target may not set: Dispatch owns them.
const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "user-agent",
    "host",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "transfer-encoding",
    "connection",
];

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

/// Parses a create request body (`{"name", "type", "config", "enabled"?}`).
pub fn parse_spec(body: &Value) -> Result<TargetSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    let name = match obj.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= 200 => s.clone(),
        Some(Value::String(_)) => {
            errors.push(FieldError::new("name", "must be 1 to 200 characters"));
            String::new()
        }
        None | Some(Value::Null) => {
            errors.push(FieldError::new("name", "is required"));
            String::new()
        }
        Some(_) => {
            errors.push(FieldError::new("name", "must be a string"));
            String::new()
        }
    };
    let enabled = match obj.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(FieldError::new("enabled", "must be a boolean"));
            true
        }
    };
    let kind = match obj.get("type") {
        Some(Value::String(s)) if matches!(s.as_str(), "webhook" | "sqs" | "sns") => {
            Some(s.as_str())
        }
        None | Some(Value::Null) => {
            errors.push(FieldError::new("type", "is required: webhook, sqs or sns"));
            None
        }
        Some(_) => {
            errors.push(FieldError::new("type", "must be one of webhook, sqs, sns"));
            None
        }
    };
    let empty = Value::Object(Map::new());
    let config_value = match obj.get("config") {
        Some(v @ Value::Object(_)) => v,
        None | Some(Value::Null) => {
            errors.push(FieldError::new("config", "is required"));
            &empty
        }
        Some(_) => {
            errors.push(FieldError::new("config", "must be an object"));
            &empty
        }
    };
    let mut generated_secret = false;
    let config = kind.and_then(|kind| match kind {
        "webhook" => parse_webhook(config_value, &mut errors, &mut generated_secret)
            .map(TargetConfig::Webhook),
        "sqs" => parse_sqs(config_value, &mut errors).map(TargetConfig::Sqs),
        _ => parse_sns(config_value, &mut errors).map(TargetConfig::Sns),
    });
    match config {
        Some(config) if errors.is_empty() => Ok(TargetSpec {
            name,
            enabled,
            config,
            generated_secret,
        }),
        _ => Err(errors),
    }
}

/// Reads the fields of a config object, recording what is wrong.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: &'a str,
    errors: &'a mut Vec<FieldError>,
}

impl<'a> Fields<'a> {
    fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.prefix)
    }

    fn err(&mut self, key: &str, message: &str) {
        let field = self.path(key);
        self.errors.push(FieldError::new(field, message));
    }

    fn string(&mut self, key: &str, required: bool) -> Option<String> {
        match self.obj.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            None | Some(Value::Null) if !required => None,
            None | Some(Value::Null) => {
                self.err(key, "is required");
                None
            }
            Some(Value::String(_)) => {
                self.err(key, "must not be empty");
                None
            }
            Some(_) => {
                self.err(key, "must be a string");
                None
            }
        }
    }

    fn http_url(&mut self, key: &str, required: bool) -> Option<String> {
        let s = self.string(key, required)?;
        match Url::parse(&s) {
            Ok(u)
                if matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some_and(|h| !h.is_empty()) =>
            {
                Some(s)
            }
            Ok(_) => {
                self.err(key, "must be an http or https URL with a host");
                None
            }
            Err(e) => {
                self.err(key, &format!("is not a valid URL: {e}"));
                None
            }
        }
    }

    fn region(&mut self) -> Option<String> {
        let region = self.string("region", true)?;
        if is_region(&region) {
            Some(region)
        } else {
            self.err("region", "is not an AWS region such as eu-north-1");
            None
        }
    }

    fn credentials(&mut self) -> Option<AwsCredentials> {
        match self.obj.get("credentials") {
            None | Some(Value::Null) => None,
            Some(Value::Object(c)) => {
                let prefix = self.path("credentials");
                let mut inner = Fields {
                    obj: c,
                    prefix: &prefix,
                    errors: self.errors,
                };
                let access_key_id = inner.string("accessKeyId", true);
                let secret_access_key = inner.string("secretAccessKey", true);
                Some(AwsCredentials {
                    access_key_id: access_key_id?,
                    secret_access_key: secret_access_key?,
                })
            }
            Some(_) => {
                self.err(
                    "credentials",
                    "must be null or an object with accessKeyId and secretAccessKey",
                );
                None
            }
        }
    }

    fn message_group_id(&mut self) -> Option<String> {
        let id = self.string("messageGroupId", false)?;
        if id.chars().count() > 128 || !id.chars().all(|c| c.is_ascii_graphic()) {
            self.err(
                "messageGroupId",
                "must be at most 128 printable ASCII characters",
            );
            return None;
        }
        Some(id)
    }
}

fn is_region(s: &str) -> bool {
    // eu-north-1, us-gov-west-1, ap-southeast-2, cn-north-1
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

fn parse_webhook(
    v: &Value,
    errors: &mut Vec<FieldError>,
    generated: &mut bool,
) -> Option<WebhookConfig> {
    let obj = v.as_object()?;
    let mut f = Fields {
        obj,
        prefix: "config",
        errors,
    };
    let url = f.http_url("url", true);
    let mut headers = BTreeMap::new();
    match obj.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(h)) => {
            for (name, value) in h {
                let field = format!("config.headers.{name}");
                let valid_name = axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok();
                if !valid_name {
                    f.errors
                        .push(FieldError::new(field, "is not a valid header name"));
                } else if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    f.errors.push(FieldError::new(
                        field,
                        "is set by Dispatch and cannot be overridden",
                    ));
                } else if let Some(value) = value
                    .as_str()
                    .filter(|s| axum::http::HeaderValue::from_str(s).is_ok())
                {
                    headers.insert(name.clone(), value.to_string());
                } else {
                    f.errors.push(FieldError::new(
                        field,
                        "must be a string valid as a header value",
                    ));
                }
            }
        }
        Some(_) => f.err(
            "headers",
            "must be an object of header names to string values",
        ),
    }
    let timeout_ms = match obj.get("timeoutMs") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|ms| (1..=300_000).contains(&ms)) => {
            n.as_u64()
        }
        Some(_) => {
            f.err("timeoutMs", "must be an integer from 1 to 300000");
            None
        }
    };
    let signing_secret = match f.string("signingSecret", false) {
        None => {
            *generated = true;
            Some(generate_signing_secret())
        }
        Some(s) if signing_key(&s).is_some() => Some(s),
        Some(_) => {
            f.err(
                "signingSecret",
                "must be whsec_ followed by 16 to 64 bytes in base64",
            );
            None
        }
    };
    let auth = match obj.get("auth") {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            let mut af = Fields {
                obj: a,
                prefix: "config.auth",
                errors: f.errors,
            };
            let kind = af.string("type", true);
            if kind
                .as_deref()
                .is_some_and(|k| k != "oauth2ClientCredentials")
            {
                af.err("type", "must be oauth2ClientCredentials");
            }
            let token_url = af.http_url("tokenUrl", true);
            let client_id = af.string("clientId", true);
            let client_secret = af.string("clientSecret", true);
            let scopes = match a.get("scopes") {
                None | Some(Value::Null) => Some(Vec::new()),
                Some(Value::Array(items))
                    if items
                        .iter()
                        .all(|s| s.as_str().is_some_and(|s| !s.is_empty())) =>
                {
                    Some(
                        items
                            .iter()
                            .filter_map(|s| s.as_str().map(String::from))
                            .collect(),
                    )
                }
                Some(_) => {
                    af.err("scopes", "must be an array of non-empty strings");
                    None
                }
            };
            match (kind, token_url, client_id, client_secret, scopes) {
                (
                    Some(kind),
                    Some(token_url),
                    Some(client_id),
                    Some(client_secret),
                    Some(scopes),
                ) if kind == "oauth2ClientCredentials" => Some(OAuthClientCredentials {
                    kind,
                    token_url,
                    client_id,
                    client_secret,
                    scopes,
                }),
                _ => None,
            }
        }
        Some(_) => {
            f.err("auth", "must be null or an oauth2ClientCredentials object");
            None
        }
    };
    Some(WebhookConfig {
        url: url?,
        headers,
        timeout_ms,
        signing_secret: signing_secret?,
        auth,
    })
}

fn parse_sqs(v: &Value, errors: &mut Vec<FieldError>) -> Option<SqsConfig> {
    let obj = v.as_object()?;
    let mut f = Fields {
        obj,
        prefix: "config",
        errors,
    };
    let queue_url = f.http_url("queueUrl", true);
    let region = f.region();
    let endpoint_url = f.http_url("endpointUrl", false);
    let credentials = f.credentials();
    let message_group_id = f.message_group_id();
    Some(SqsConfig {
        queue_url: queue_url?,
        region: region?,
        endpoint_url,
        credentials,
        message_group_id,
    })
}

fn parse_sns(v: &Value, errors: &mut Vec<FieldError>) -> Option<SnsConfig> {
    let obj = v.as_object()?;
    let mut f = Fields {
        obj,
        prefix: "config",
        errors,
    };
    let topic_arn = f.string("topicArn", true);
    let topic_arn = topic_arn.and_then(|arn| {
        if is_sns_arn(&arn) {
            Some(arn)
        } else {
            f.err(
                "topicArn",
                "must be an SNS topic ARN: arn:aws:sns:<region>:<account>:<name>",
            );
            None
        }
    });
    let region = f.region();
    let endpoint_url = f.http_url("endpointUrl", false);
    let credentials = f.credentials();
    let message_group_id = f.message_group_id();
    Some(SnsConfig {
        topic_arn: topic_arn?,
        region: region?,
        endpoint_url,
        credentials,
        message_group_id,
    })
}

fn is_sns_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.split(':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "sns"
        && is_region(parts[3])
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && !parts[5].is_empty()
        && parts[5].len() <= 256
        && parts[5]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
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

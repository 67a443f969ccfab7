//! Targets and their configuration (docs/api.md#targets), parsed from JSON at the edge.

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use self::{gate::Limits, pull::PullConfig};
use super::ids::{AccountId, TargetId};

pub mod gate;
mod headers;
pub mod pull;
pub mod rules;
mod secrets;
mod split;

pub use secrets::keep_secrets;

/// What a response shows in place of a secret.
pub const MASK: &str = "***";

#[derive(Debug, Clone)]
pub struct Target {
    pub id: TargetId,
    pub account: AccountId,
    pub name: String,
    pub enabled: bool,
    pub config: TargetConfig,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Its breaker's state: closed when it has none.
    pub health: gate::Health,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TargetConfig {
    Webhook(WebhookConfig),
    Sqs(SqsConfig),
    Sns(SnsConfig),
    /// A queue its consumers read (docs/api.md#pull-targets): nothing is sent.
    Pull(PullConfig),
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
    /// The secret a rotation replaced, still signing beside the new one
    /// until its time is up; never shown in a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_signing_secret: Option<PreviousSecret>,
    /// `envelope` or `raw` (docs/api.md#raw-format).
    #[serde(default)]
    pub format: Format,
    /// A raw body's `Content-Type`; `text/plain; charset=utf-8` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `flowControl` and `circuitBreaker` (docs/api.md#flow-control-and-fairness).
    #[serde(flatten)]
    pub limits: Limits,
}

/// What a target receives: the JSON envelope around the payload, or the
/// payload's characters alone with the envelope's fields beside them (as
/// headers or message attributes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Envelope,
    Raw,
}

/// A raw webhook body's `Content-Type` when the target names none.
pub const RAW_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// A replaced signing secret and the end of its overlap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviousSecret {
    pub secret: String,
    pub until: DateTime<Utc>,
}

/// The longest overlap a rotation may give the replaced secret.
pub const MAX_SECRET_OVERLAP: chrono::TimeDelta = chrono::TimeDelta::days(7);

impl WebhookConfig {
    /// The secrets an attempt at `now` is signed with: the current one, and
    /// the replaced one while its overlap lasts (Standard Webhooks receivers
    /// accept any one of several `v1,` signatures).
    pub fn signing_secrets(&self, now: DateTime<Utc>) -> impl Iterator<Item = &str> {
        let previous = self
            .previous_signing_secret
            .as_ref()
            .filter(|p| p.until > now)
            .map(|p| p.secret.as_str());
        std::iter::once(self.signing_secret.as_str()).chain(previous)
    }

    /// The replaced secret's end, while it still signs.
    pub fn overlap_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.previous_signing_secret
            .as_ref()
            .map(|p| p.until)
            .filter(|until| *until > now)
    }
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
    /// `envelope` or `raw` (docs/api.md#raw-format).
    #[serde(default)]
    pub format: Format,
    #[serde(flatten)]
    pub limits: Limits,
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
    /// `envelope` or `raw` (docs/api.md#raw-format).
    #[serde(default)]
    pub format: Format,
    #[serde(flatten)]
    pub limits: Limits,
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
    /// What the owner limited (docs/api.md#flow-control-and-fairness).
    pub fn limits(&self) -> &Limits {
        // A pull target's consumers set their own pace: it has no limits.
        static NONE: Limits = Limits {
            flow: None,
            breaker: None,
        };
        match self {
            TargetConfig::Webhook(c) => &c.limits,
            TargetConfig::Sqs(c) => &c.limits,
            TargetConfig::Sns(c) => &c.limits,
            TargetConfig::Pull(_) => &NONE,
        }
    }

    /// What its receiver is sent: the envelope, or the payload alone.
    pub fn format(&self) -> Format {
        match self {
            TargetConfig::Webhook(c) => c.format,
            TargetConfig::Sqs(c) => c.format,
            TargetConfig::Sns(c) => c.format,
            TargetConfig::Pull(_) => Format::Envelope,
        }
    }

    /// A pull target's config: its consumers receive its messages.
    pub fn pull(&self) -> Option<&PullConfig> {
        match self {
            TargetConfig::Pull(c) => Some(c),
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            TargetConfig::Webhook(_) => "webhook",
            TargetConfig::Sqs(_) => "sqs",
            TargetConfig::Sns(_) => "sns",
            TargetConfig::Pull(_) => "pull",
        }
    }

    /// The configuration with its secrets, as stored.
    pub fn to_stored_json(&self) -> Value {
        match self {
            TargetConfig::Webhook(c) => serde_json::to_value(c),
            TargetConfig::Sqs(c) => serde_json::to_value(c),
            TargetConfig::Sns(c) => serde_json::to_value(c),
            TargetConfig::Pull(c) => serde_json::to_value(c),
        }
        .expect("target configs serialize")
    }

    pub fn from_stored_json(kind: &str, v: Value) -> Result<Self, serde_json::Error> {
        Ok(match kind {
            "sqs" => TargetConfig::Sqs(serde_json::from_value(v)?),
            "sns" => TargetConfig::Sns(serde_json::from_value(v)?),
            "pull" => TargetConfig::Pull(serde_json::from_value(v)?),
            _ => TargetConfig::Webhook(serde_json::from_value(v)?),
        })
    }

    /// The configuration as a response shows it: every secret is `***`.
    pub fn to_public_json(&self) -> Value {
        let mut v = self.to_stored_json();
        if let Some(o) = v.as_object_mut() {
            o.remove(PREVIOUS_SECRET);
        }
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

/// Where a stored webhook config keeps the secret a rotation replaced.
pub(crate) const PREVIOUS_SECRET: &str = "previousSigningSecret";

/// The value at `path` in a JSON document.
pub(crate) fn pointer<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| cur.get(*key))
}

pub(crate) fn secret_paths(kind: &str) -> &'static [&'static [&'static str]] {
    match kind {
        "webhook" => &[&["signingSecret"], &["auth", "clientSecret"]],
        "pull" => &[],
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
mod rotation_tests {
    use super::*;

    #[test]
    fn a_replaced_secret_signs_only_until_its_overlap_ends() {
        let until: DateTime<Utc> = "2026-12-05T00:00:00Z".parse().unwrap();
        let config = TargetConfig::from_stored_json(
            "webhook",
            json!({"url": "https://example.com/hook", "signingSecret": "whsec_new",
                   "previousSigningSecret": {"secret": "whsec_old", "until": until}}),
        )
        .unwrap();
        let TargetConfig::Webhook(w) = &config else {
            unreachable!()
        };
        let second = chrono::TimeDelta::seconds(1);
        let during: Vec<_> = w.signing_secrets(until - second).collect();
        assert_eq!(during, ["whsec_new", "whsec_old"]);
        assert_eq!(w.overlap_until(until - second), Some(until));
        let after: Vec<_> = w.signing_secrets(until).collect();
        assert_eq!(after, ["whsec_new"]);
        assert_eq!(w.overlap_until(until), None);
        // A response never shows it, not even masked.
        assert!(config.to_public_json().get(PREVIOUS_SECRET).is_none());
    }
}

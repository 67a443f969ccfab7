//! The target form: one set of fields for webhook, SQS and SNS targets,
//! turned into the same JSON document the API takes, so that it is parsed
//! and checked by the same rules.

use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Map, Value};

pub(super) use self::input::{field, Field};
use super::{layout, session::Session};
use crate::domain::target::{
    gate::period, FieldError, Format, Target, TargetConfig, MASK, RAW_CONTENT_TYPE,
};

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TargetForm {
    pub csrf: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub enabled: Option<String>,
    pub url: String,
    pub timeout_ms: String,
    /// One `Name: value` per line.
    pub headers: String,
    pub signing_secret: String,
    pub auth_enabled: Option<String>,
    pub token_url: String,
    pub client_id: String,
    pub client_secret: String,
    /// Space-separated.
    pub scopes: String,
    pub queue_url: String,
    pub topic_arn: String,
    pub region: String,
    pub endpoint_url: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub message_group_id: String,
    /// `envelope` or `raw`; empty is the envelope.
    pub format: String,
    /// A raw webhook body's Content-Type; empty is the default.
    pub content_type: String,
    /// `flowControl` and `circuitBreaker`: empty means not set.
    pub parallelism: String,
    pub rate: String,
    pub period: String,
    pub failures: String,
    pub cooldown: String,
    /// A pull target's (docs/api.md#pull-targets); empty is the default.
    pub visibility_timeout: String,
    pub max_receive_count: String,
    pub retention: String,
}

fn opt(s: &str) -> Value {
    match s.trim() {
        "" => Value::Null,
        s => Value::String(s.to_string()),
    }
}

/// An empty secret field on an edit form keeps the stored secret.
fn secret(s: &str, editing: bool) -> Value {
    match s.trim() {
        "" if editing => Value::String(MASK.into()),
        "" => Value::Null,
        s => Value::String(s.to_string()),
    }
}

impl TargetForm {
    /// The form for a new target of a type.
    pub fn blank(kind: &str) -> Self {
        Self {
            kind: kind.to_string(),
            enabled: Some("on".into()),
            ..Self::default()
        }
    }

    /// The form showing a stored target; secrets are left empty (kept unless typed).
    pub fn from_target(t: &Target) -> Self {
        let mut f = Self {
            name: t.name.clone(),
            kind: t.config.kind().to_string(),
            enabled: t.enabled.then(|| "on".into()),
            ..Self::default()
        };
        f.format = match t.config.format() {
            Format::Envelope => "envelope",
            Format::Raw => "raw",
        }
        .into();
        let limits = t.config.limits();
        if let Some(flow) = limits.flow {
            f.parallelism = flow.parallelism.map(|n| n.to_string()).unwrap_or_default();
            f.rate = flow.rate.map(|n| n.to_string()).unwrap_or_default();
            f.period = period::format(flow.period_ms);
        }
        if let Some(b) = limits.breaker {
            f.failures = b.failures.to_string();
            f.cooldown = period::format(b.cooldown_ms);
        }
        let aws = |f: &mut Self,
                   region: &str,
                   endpoint: &Option<String>,
                   creds: &Option<_>,
                   group: &Option<String>| {
            f.region = region.to_string();
            f.endpoint_url = endpoint.clone().unwrap_or_default();
            if let Some(c) = creds {
                let c: &crate::domain::target::AwsCredentials = c;
                f.access_key_id = c.access_key_id.clone();
            }
            f.message_group_id = group.clone().unwrap_or_default();
        };
        match &t.config {
            TargetConfig::Webhook(w) => {
                f.url = w.url.clone();
                f.timeout_ms = w.timeout_ms.map(|t| t.to_string()).unwrap_or_default();
                f.content_type = w.content_type.clone().unwrap_or_default();
                f.headers = w
                    .headers
                    .keys()
                    .map(|k| format!("{k}: {MASK}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                if let Some(a) = &w.auth {
                    f.auth_enabled = Some("on".into());
                    f.token_url = a.token_url.clone();
                    f.client_id = a.client_id.clone();
                    f.scopes = a.scopes.join(" ");
                }
            }
            TargetConfig::Sqs(s) => {
                f.queue_url = s.queue_url.clone();
                aws(
                    &mut f,
                    &s.region,
                    &s.endpoint_url,
                    &s.credentials,
                    &s.message_group_id,
                );
            }
            TargetConfig::Sns(s) => {
                f.topic_arn = s.topic_arn.clone();
                aws(
                    &mut f,
                    &s.region,
                    &s.endpoint_url,
                    &s.credentials,
                    &s.message_group_id,
                );
            }
            TargetConfig::Pull(p) => {
                f.visibility_timeout = p.visibility_timeout.as_str().to_string();
                f.max_receive_count = p.max_receive_count.to_string();
                f.retention = p.retention.as_str().to_string();
            }
        }
        f
    }

    /// The document `POST /targets` would take. `editing`: empty secrets stand for the stored ones.
    pub fn to_document(&self, editing: bool) -> Result<Value, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut config = Map::new();
        match self.kind.as_str() {
            "webhook" => {
                config.insert("url".into(), Value::String(self.url.trim().to_string()));
                let timeout = self.timeout_ms.trim();
                if !timeout.is_empty() {
                    match timeout.parse::<u64>() {
                        Ok(ms) => {
                            config.insert("timeoutMs".into(), json!(ms));
                        }
                        Err(_) => errors.push(FieldError::new(
                            "config.timeoutMs",
                            "must be a whole number of milliseconds",
                        )),
                    }
                }
                let mut headers = Map::new();
                for (n, line) in self.headers.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() {
                        continue;
                    }
                    match line.split_once(':') {
                        Some((name, value)) if !name.trim().is_empty() => {
                            headers.insert(
                                name.trim().to_string(),
                                Value::String(value.trim().to_string()),
                            );
                        }
                        _ => errors.push(FieldError::new(
                            "config.headers",
                            format!("line {} must read `Name: value`", n + 1),
                        )),
                    }
                }
                config.insert("headers".into(), Value::Object(headers));
                config.insert("contentType".into(), opt(&self.content_type));
                let signing = secret(&self.signing_secret, editing);
                if !signing.is_null() {
                    config.insert("signingSecret".into(), signing);
                }
                if self.auth_enabled.is_some() {
                    config.insert(
                        "auth".into(),
                        json!({
                            "type": "oauth2ClientCredentials",
                            "tokenUrl": self.token_url.trim(),
                            "clientId": self.client_id.trim(),
                            "clientSecret": secret(&self.client_secret, editing),
                            "scopes": self.scopes.split_whitespace().collect::<Vec<_>>(),
                        }),
                    );
                } else {
                    config.insert("auth".into(), Value::Null);
                }
            }
            "sqs" | "sns" => {
                let (key, value) = if self.kind == "sqs" {
                    ("queueUrl", &self.queue_url)
                } else {
                    ("topicArn", &self.topic_arn)
                };
                config.insert(key.into(), Value::String(value.trim().to_string()));
                config.insert(
                    "region".into(),
                    Value::String(self.region.trim().to_string()),
                );
                config.insert("endpointUrl".into(), opt(&self.endpoint_url));
                config.insert("messageGroupId".into(), opt(&self.message_group_id));
                let key_id = self.access_key_id.trim();
                if key_id.is_empty() {
                    config.insert("credentials".into(), Value::Null);
                } else {
                    config.insert(
                        "credentials".into(),
                        json!({"accessKeyId": key_id, "secretAccessKey": secret(&self.secret_access_key, editing)}),
                    );
                }
            }
            "pull" => {
                for (key, value) in [
                    ("visibilityTimeout", &self.visibility_timeout),
                    ("retention", &self.retention),
                ] {
                    config.insert(key.into(), opt(value));
                }
                match self.max_receive_count.trim() {
                    "" => {}
                    n => match n.parse::<u64>() {
                        Ok(n) => {
                            config.insert("maxReceiveCount".into(), json!(n));
                        }
                        Err(_) => errors.push(FieldError::new(
                            "config.maxReceiveCount",
                            "must be a whole number",
                        )),
                    },
                }
            }
            _ => errors.push(FieldError::new("type", "must be webhook, sqs, sns or pull")),
        }
        // A pull target sends nothing: neither a format nor limits.
        if self.kind != "pull" {
            if !self.format.trim().is_empty() {
                config.insert("format".into(), json!(self.format.trim()));
            }
            self.limits_into(&mut config, &mut errors);
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(json!({
            "name": self.name.trim(),
            "type": self.kind,
            "enabled": self.enabled.is_some(),
            "config": Value::Object(config),
        }))
    }
}

impl TargetForm {
    /// `flowControl` and `circuitBreaker` from their fields: an object with
    /// what is filled in, or null (none) when every field is empty.
    fn limits_into(&self, config: &mut Map<String, Value>, errors: &mut Vec<FieldError>) {
        let mut number = |value: &str, field: &str| -> Option<Value> {
            match value.trim() {
                "" => None,
                v => match v.parse::<u64>() {
                    Ok(n) => Some(json!(n)),
                    Err(_) => {
                        errors.push(FieldError::new(field, "must be a whole number"));
                        None
                    }
                },
            }
        };
        let text = |value: &str| (!value.trim().is_empty()).then(|| json!(value.trim()));
        let members = |pairs: Vec<(&str, Option<Value>)>| -> Map<String, Value> {
            pairs
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                .collect()
        };
        let flow = members(vec![
            (
                "parallelism",
                number(&self.parallelism, "config.flowControl.parallelism"),
            ),
            ("rate", number(&self.rate, "config.flowControl.rate")),
            ("period", text(&self.period)),
        ]);
        let breaker = members(vec![
            (
                "failures",
                number(&self.failures, "config.circuitBreaker.failures"),
            ),
            ("cooldown", text(&self.cooldown)),
        ]);
        for (key, object) in [("flowControl", flow), ("circuitBreaker", breaker)] {
            let value = if object.is_empty() {
                Value::Null
            } else {
                Value::Object(object)
            };
            config.insert(key.into(), value);
        }
    }
}

/// The formats a target may receive, as the form offers them.
const FORMATS: [(&str, &str, &str); 2] = [
    ("envelope", "JSON envelope", "(the message's fields around its payload)"),
    ("raw", "Raw payload", "(the payload's characters alone; the fields go as dispatch-* headers or message attributes)"),
];

/// The fields of the form (inside a `<form>` the caller writes).
pub fn fields(session: &Session, f: &TargetForm, errors: &[FieldError], editing: bool) -> Markup {
    let keep = if editing {
        Some("Leave empty to keep the stored secret.")
    } else {
        None
    };
    let raw_hint = format!("Only for a raw body. Empty: {RAW_CONTENT_TYPE}.");
    let f_ = |name, label, value, hint, kind| {
        field(
            Field {
                name,
                label,
                value,
                hint,
                kind,
            },
            errors,
        )
    };
    html! {
        (layout::csrf_field(session))
        @if !errors.is_empty() {
            div.error-summary role="alert" tabindex="-1" {
                h2 { "The target was not saved" }
                ul { @for e in errors { li { code { (e.field) } " " (e.message) } } }
            }
        }
        (f_("name", "Name", &f.name, None, "text"))
        @if editing {
            input type="hidden" name="type" value=(f.kind);
            p { "Type: " strong { (f.kind) } }
        } @else {
            noscript {
                p { "Fields for: "
                    a href="/portal/targets/new?type=webhook" { "a webhook" } ", "
                    a href="/portal/targets/new?type=sqs" { "an SQS queue" } ", "
                    a href="/portal/targets/new?type=sns" { "an SNS topic" } ", "
                    a href="/portal/targets/new?type=pull" { "a pull queue" } "." }
            }
            fieldset.types {
                legend { "Type" }
                @for (value, label) in [("webhook", "Webhook"), ("sqs", "Amazon SQS queue"), ("sns", "Amazon SNS topic"), ("pull", "Pull queue (consumers receive over the API)")] {
                    label.radio {
                        input type="radio" name="type" value=(value) checked[f.kind == value] data-switch="type";
                        " " (label)
                    }
                }
            }
        }
        label.check {
            input type="checkbox" name="enabled" checked[f.enabled.is_some()];
            " Enabled (a disabled target keeps its messages until it is enabled)"
        }
        fieldset data-type="webhook" hidden[f.kind != "webhook"] {
            legend { "Webhook" }
            (f_("url", "URL", &f.url, Some("http:// or https://; requests are POSTed here."), "url"))
            (f_("timeoutMs", "Timeout (ms)", &f.timeout_ms, Some("Empty: the server's default."), "number"))
            (f_("headers", "Custom headers", &f.headers, Some("One `Name: value` per line. Values are secrets: *** keeps a stored value."), "textarea"))
            (f_("contentType", "Content-Type of a raw body", &f.content_type,
                Some(&raw_hint), "text"))
            (f_("signingSecret", "Signing secret", &f.signing_secret,
                Some(if editing { "Leave empty to keep the stored secret." } else { "Empty: one is generated and shown once." }), "password"))
            label.check {
                input type="checkbox" name="authEnabled" checked[f.auth_enabled.is_some()] data-auth-switch;
                " Authenticate with OAuth 2 client credentials"
            }
            div.auth data-auth {
                (f_("tokenUrl", "Token URL", &f.token_url, None, "url"))
                (f_("clientId", "Client id", &f.client_id, None, "text"))
                (f_("clientSecret", "Client secret", &f.client_secret, keep, "password"))
                (f_("scopes", "Scopes", &f.scopes, Some("Separated by spaces."), "text"))
            }
        }
        fieldset data-type="sqs" hidden[f.kind != "sqs"] {
            legend { "Amazon SQS" }
            (f_("queueUrl", "Queue URL", &f.queue_url, None, "url"))
        }
        fieldset data-type="sns" hidden[f.kind != "sns"] {
            legend { "Amazon SNS" }
            (f_("topicArn", "Topic ARN", &f.topic_arn, None, "text"))
        }
        fieldset data-type="sqs sns" hidden[f.kind != "sqs" && f.kind != "sns"] {
            legend { "AWS" }
            (f_("region", "Region", &f.region, Some("For example eu-north-1."), "text"))
            (f_("endpointUrl", "Endpoint URL", &f.endpoint_url, Some("Empty: AWS itself."), "url"))
            (f_("accessKeyId", "Access key id", &f.access_key_id, Some("Required, unless the operator lends this server's own AWS identity."), "text"))
            (f_("secretAccessKey", "Secret access key", &f.secret_access_key, keep, "password"))
            (f_("messageGroupId", "Message group id (FIFO)", &f.message_group_id, Some("Empty: the target id."), "text"))
        }
        fieldset data-type="pull" hidden[f.kind != "pull"] {
            legend { "Pull queue" }
            (f_("visibilityTimeout", "Visibility timeout", &f.visibility_timeout, Some("How long a received message stays hidden: 1s to 12h. Empty: 60s."), "text"))
            (f_("maxReceiveCount", "Receives before a dead letter", &f.max_receive_count, Some("Receives without an acknowledgement, 1 to 1000. Empty: 5."), "number"))
            (f_("retention", "Retention", &f.retention, Some("How long a message may wait to be received: 1m to 14d. Empty: 14d."), "text"))
        }
        fieldset data-type="webhook sqs sns" hidden[f.kind == "pull"] {
            legend { "Body" }
            @for (value, label, hint) in FORMATS {
                label.radio {
                    input type="radio" name="format" value=(value)
                        checked[f.format == value || (f.format.is_empty() && value == "envelope")];
                    " " (label) " " small { (hint) }
                }
            }
            @if let Some(e) = errors.iter().find(|e| e.field == "config.format") {
                span.error { (e.message) }
            }
        }
        fieldset data-type="webhook sqs sns" hidden[f.kind == "pull"] {
            legend { "Limits" }
            p.hint { "Held-back messages stay scheduled, consume no attempt and go in delivery-time order. Empty: no limit." }
            (f_("parallelism", "Attempts in flight at most", &f.parallelism, Some("Across every instance, 1 to 10000."), "number"))
            (f_("rate", "Attempts started per period at most", &f.rate, Some("1 to 1000000, in any window of one period."), "number"))
            (f_("period", "Period", &f.period, Some("A number and a unit: 500ms, 1s, 5m, 1h. Empty: 1s."), "text"))
        }
        fieldset data-type="webhook sqs sns" hidden[f.kind == "pull"] {
            legend { "Circuit breaker" }
            p.hint { "After this many retryable failures in a row, attempts stop for the cooldown; then one probe decides. Empty: off." }
            (f_("failures", "Failures in a row", &f.failures, Some("1 to 10000; 20 when only the cooldown is set."), "number"))
            (f_("cooldown", "Cooldown", &f.cooldown, Some("Doubles after each failed probe, up to 1h. Empty: 1m."), "text"))
        }
    }
}

mod input;
#[cfg(test)]
mod tests;

//! Target configuration parsed from JSON, every problem named by its field.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use url::Url;

use super::{
    generate_signing_secret, signing_key, AwsCredentials, FieldError, OAuthClientCredentials,
    SnsConfig, SqsConfig, TargetConfig, TargetSpec, WebhookConfig,
};

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

/// At most this many custom headers, and this many bytes of their names and
/// values together: they are sent with every attempt.
pub const MAX_HEADERS: usize = 32;
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// Names every string of the document (values and keys) that holds U+0000:
/// no store keeps it, and no receiver expects it.
fn nul_errors(v: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match v {
        Value::String(s) if s.contains('\0') => {
            errors.push(FieldError::new(path, "must not contain U+0000"))
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                nul_errors(item, &format!("{path}[{i}]"), errors);
            }
        }
        Value::Object(map) => {
            for (key, value) in map {
                let field = join(&key.replace('\0', "\\u0000"));
                if key.contains('\0') {
                    errors.push(FieldError::new(&field, "must not contain U+0000"));
                }
                nul_errors(value, &field, errors);
            }
        }
        _ => {}
    }
}

/// Parses a create request body (`{"name", "type", "config", "enabled"?}`).
pub fn parse_spec(body: &Value) -> Result<TargetSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    nul_errors(body, "", &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
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
            let bytes: usize = h
                .iter()
                .map(|(name, value)| name.len() + value.as_str().map_or(0, str::len))
                .sum();
            if h.len() > MAX_HEADERS {
                f.err(
                    "headers",
                    &format!("must hold at most {MAX_HEADERS} headers"),
                );
            } else if bytes > MAX_HEADER_BYTES {
                f.err(
                    "headers",
                    &format!("names and values must add up to at most {MAX_HEADER_BYTES} bytes"),
                );
            }
            for (name, value) in h {
                let field = format!("config.headers.{name}");
                let valid_name = super::headers::is_header_name(name);
                if !valid_name {
                    f.errors
                        .push(FieldError::new(field, "is not a valid header name"));
                } else if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    f.errors.push(FieldError::new(
                        field,
                        "is set by Dispatch and cannot be overridden",
                    ));
                } else if let Some(value) =
                    value.as_str().filter(|s| super::headers::is_header_text(s))
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
    if auth.is_some() {
        // With OAuth, Dispatch sends the bearer token itself.
        for name in headers.keys() {
            if name.eq_ignore_ascii_case("authorization") {
                f.errors.push(FieldError::new(
                    format!("config.headers.{name}"),
                    "is set by Dispatch when auth is set and cannot be overridden",
                ));
            }
        }
    }
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

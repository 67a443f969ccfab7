//! A target's secrets apart from the rest of its configuration, so that a
//! store can seal them (docs/operations.md#secrets-at-rest) and keep the rest readable.

use serde_json::{Map, Value};

use super::{pointer, secret_paths, TargetConfig, PREVIOUS_SECRET};

impl TargetConfig {
    /// The stored configuration with every secret masked (as a response
    /// shows it), and the secrets alone, nested as in the configuration:
    /// `{"signingSecret": …, "auth": {"clientSecret": …}, "headers": {…}}`.
    pub fn split_secrets(&self) -> (Value, Value) {
        let stored = self.to_stored_json();
        let mut secrets = Value::Object(Map::new());
        for path in secret_paths(self.kind()) {
            if let Some(value) = pointer(&stored, path).filter(|v| v.is_string()) {
                set_path(&mut secrets, path, value.clone());
            }
        }
        if let Some(headers @ Value::Object(_)) = stored.get("headers") {
            secrets["headers"] = headers.clone();
        }
        if let Some(previous) = stored.get(PREVIOUS_SECRET) {
            secrets[PREVIOUS_SECRET] = previous.clone();
        }
        (self.to_public_json(), secrets)
    }

    /// The configuration `split_secrets` took apart.
    pub fn join_secrets(
        kind: &str,
        mut masked: Value,
        secrets: Value,
    ) -> Result<Self, serde_json::Error> {
        overlay(&mut masked, secrets);
        Self::from_stored_json(kind, masked)
    }
}

fn set_path(root: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = root;
    for key in parents {
        cur = cur
            .as_object_mut()
            .expect("secrets are nested in objects")
            .entry(*key)
            .or_insert_with(|| Value::Object(Map::new()));
    }
    cur[*last] = value;
}

/// Puts every leaf of `top` into `base`, recursing where both hold objects.
fn overlay(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(base), Value::Object(top)) => {
            for (key, value) in top {
                match base.get_mut(&key) {
                    Some(slot) if slot.is_object() && value.is_object() => overlay(slot, value),
                    _ => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, top) => *base = top,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(kind: &str, config: Value) -> TargetConfig {
        TargetConfig::from_stored_json(kind, config).unwrap()
    }

    #[test]
    fn every_secret_is_split_off_and_joined_back() {
        let cases = [
            config(
                "webhook",
                json!({"url": "https://example.com/hook",
                       "headers": {"X-Api-Key": "header-secret", "X-Other": "other-secret"},
                       "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                       "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                                "clientId": "client-id", "clientSecret": "client-secret", "scopes": ["a"]}}),
            ),
            config(
                "webhook",
                json!({"url": "https://example.com/hook", "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
            ),
            config(
                "webhook",
                json!({"url": "https://example.com/hook", "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                       "previousSigningSecret": {"secret": "whsec_cHJldmlvdXMtc2VjcmV0LWtleQ==",
                                                 "until": "2026-12-05T00:00:00Z"}}),
            ),
            config(
                "sqs",
                json!({"queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/q", "region": "eu-north-1",
                       "credentials": {"accessKeyId": "AKIDEXAMPLE", "secretAccessKey": "aws-secret"}}),
            ),
            config(
                "sns",
                json!({"topicArn": "arn:aws:sns:us-east-1:123456789012:t", "region": "us-east-1"}),
            ),
        ];
        for original in cases {
            let (masked, secrets) = original.split_secrets();
            let text = masked.to_string();
            for secret in [
                "header-secret",
                "other-secret",
                "whsec_",
                "previous",
                "client-secret",
                "aws-secret",
            ] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            assert_eq!(masked, original.to_public_json());
            let joined = TargetConfig::join_secrets(original.kind(), masked, secrets).unwrap();
            assert_eq!(joined, original);
        }
    }

    #[test]
    fn the_secrets_alone_keep_the_configurations_nesting() {
        let c = config(
            "webhook",
            json!({"url": "https://example.com/hook", "headers": {"K": "v"},
                   "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                   "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                            "clientId": "client-id", "clientSecret": "s"}}),
        );
        assert_eq!(
            c.split_secrets().1,
            json!({"signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                   "auth": {"clientSecret": "s"}, "headers": {"K": "v"}})
        );
    }
}

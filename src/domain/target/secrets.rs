//! What a change to a target does to its stored secrets (docs/api.md#secrets-and-their-addresses).
//!
//! Secrets are write-only, so a client that edits a target cannot send them
//! back: a secret left out of a merge patch, or sent back as `***`, keeps its
//! stored value. That is safe only while the secret still goes where its
//! owner sent it. Header values go to `url`, the OAuth client secret to
//! `auth.tokenUrl`, the AWS secret key to `endpointUrl` in `region`: when
//! that address changes, a kept secret would follow an address the patcher
//! chose, so none is kept and each must be sent again in full.

use serde_json::Value;
use url::Url;

use super::{pointer, FieldError, MASK};

/// Applies the secret rule to `merged`, the stored config with the change
/// applied. `stored` is the config as stored, with its secrets; `sent` is
/// the config as the client sent it (the patch's `config`, or the whole
/// form), where a secret counts as sent again when it is a string other
/// than `***`. Afterwards `merged` holds real secrets only, or the errors
/// name every secret that must be sent again.
pub fn keep_secrets(
    kind: &str,
    merged: &mut Value,
    stored: &Value,
    sent: &Value,
) -> Result<(), Vec<FieldError>> {
    let resent = |path: &[&str]| {
        pointer(sent, path)
            .and_then(Value::as_str)
            .is_some_and(|s| s != MASK)
    };
    let mut errors = Vec::new();
    let mut keep = |merged: &mut Value, path: &[&str], address_kept: bool| {
        let Some(new) = pointer_mut(merged, path) else {
            return;
        };
        let field = format!("config.{}", path.join("."));
        if address_kept {
            if new.as_str() == Some(MASK) {
                match pointer(stored, path) {
                    Some(old) => *new = old.clone(),
                    None => errors.push(FieldError::new(
                        field,
                        "is `***`, which stands for a stored secret, and none is stored here",
                    )),
                }
            }
        } else if !resent(path) {
            errors.push(FieldError::new(
                field,
                "must be sent again in full: a secret is not kept when the address it goes to changes",
            ));
        }
    };
    match kind {
        "webhook" => {
            // The signing secret never leaves Dispatch: it is always kept.
            keep(merged, &["signingSecret"], true);
            let url_kept = same_origin(merged, stored, &["url"]);
            let names: Vec<String> = merged
                .get("headers")
                .and_then(Value::as_object)
                .map(|h| h.keys().cloned().collect())
                .unwrap_or_default();
            for name in &names {
                keep(merged, &["headers", name], url_kept);
            }
            let token_url_kept = same_origin(merged, stored, &["auth", "tokenUrl"]);
            keep(merged, &["auth", "clientSecret"], token_url_kept);
        }
        // A pull target keeps no secret.
        "pull" => {}
        _ => {
            // A merge patch removes a key sent as null: absent and null are the same.
            let value = |v: &Value, key: &str| pointer(v, &[key]).filter(|v| !v.is_null()).cloned();
            let aws_kept = value(merged, "endpointUrl") == value(stored, "endpointUrl")
                && value(merged, "region") == value(stored, "region");
            keep(merged, &["credentials", "secretAccessKey"], aws_kept);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Whether the URL at `path` has the same scheme, host and port in both
/// documents (both absent counts as the same).
fn same_origin(a: &Value, b: &Value, path: &[&str]) -> bool {
    let origin = |v: &Value| {
        pointer(v, path).and_then(Value::as_str).map(|s| {
            Url::parse(s).ok().map(|u| {
                (
                    u.scheme().to_string(),
                    u.host_str().map(str::to_ascii_lowercase),
                    u.port_or_known_default(),
                )
            })
        })
    };
    match (origin(a), origin(b)) {
        (None, None) => true,
        (Some(Some(x)), Some(Some(y))) => x == y,
        _ => false,
    }
}

fn pointer_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |cur, key| cur.get_mut(*key))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errors: Vec<FieldError>) -> Vec<String> {
        errors.into_iter().map(|e| e.field).collect()
    }

    /// The merge patch applied to `stored`, then the rule.
    fn patch(kind: &str, stored: Value, sent: Value) -> Result<Value, Vec<String>> {
        let mut merged = stored.clone();
        json_patch::merge(&mut merged, &sent);
        keep_secrets(kind, &mut merged, &stored, &sent)
            .map(|()| merged)
            .map_err(fields)
    }

    fn webhook() -> Value {
        json!({"url": "https://a.example/hook", "signingSecret": "whsec_old",
               "headers": {"X-Api-Key": "key", "X-Other": "other"},
               "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example/token",
                        "clientId": "c", "clientSecret": "s"}})
    }

    #[test]
    fn secrets_left_out_or_masked_are_kept_while_the_address_stays() {
        // Another path on the same origin is the same address.
        let merged = patch(
            "webhook",
            webhook(),
            json!({"url": "https://A.example:443/other", "headers": {"X-Api-Key": "***"},
                   "auth": {"clientSecret": "***", "scopes": ["x"]}}),
        )
        .unwrap();
        assert_eq!(
            merged["headers"],
            json!({"X-Api-Key": "key", "X-Other": "other"})
        );
        assert_eq!(merged["auth"]["clientSecret"], "s");
        assert_eq!(merged["signingSecret"], "whsec_old");
    }

    #[test]
    fn a_new_url_keeps_no_header_value_left_out_or_masked() {
        let err = patch(
            "webhook",
            webhook(),
            json!({"url": "https://elsewhere.example/", "headers": {"X-Api-Key": "***"}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            vec!["config.headers.X-Api-Key", "config.headers.X-Other"]
        );
        // The scheme and the port are part of the address too.
        for url in ["http://a.example/hook", "https://a.example:8443/hook"] {
            let err = patch("webhook", webhook(), json!({"url": url})).unwrap_err();
            assert_eq!(err.len(), 2, "{url}");
        }
    }

    #[test]
    fn a_new_url_with_every_header_sent_again_or_removed_is_accepted() {
        let merged = patch(
            "webhook",
            webhook(),
            json!({"url": "https://elsewhere.example/", "headers": {"X-Api-Key": "new", "X-Other": null}}),
        )
        .unwrap();
        assert_eq!(merged["headers"], json!({"X-Api-Key": "new"}));
        // The signing secret is kept: it is never sent anywhere.
        assert_eq!(merged["signingSecret"], "whsec_old");
        // The OAuth secret goes to the token URL, which did not change.
        assert_eq!(merged["auth"]["clientSecret"], "s");
    }

    #[test]
    fn a_new_token_url_needs_the_client_secret_again() {
        let err = patch(
            "webhook",
            webhook(),
            json!({"auth": {"tokenUrl": "https://evil.example/token"}}),
        )
        .unwrap_err();
        assert_eq!(err, vec!["config.auth.clientSecret"]);
        let err = patch(
            "webhook",
            webhook(),
            json!({"auth": {"tokenUrl": "https://evil.example/token", "clientSecret": "***"}}),
        )
        .unwrap_err();
        assert_eq!(err, vec!["config.auth.clientSecret"]);
        let merged = patch(
            "webhook",
            webhook(),
            json!({"auth": {"tokenUrl": "https://evil.example/token", "clientSecret": "s"}}),
        )
        .unwrap();
        assert_eq!(merged["auth"]["clientSecret"], "s");
    }

    #[test]
    fn a_mask_with_nothing_stored_behind_it_is_refused() {
        let err = patch("webhook", webhook(), json!({"headers": {"X-New": "***"}})).unwrap_err();
        assert_eq!(err, vec!["config.headers.X-New"]);
    }

    #[test]
    fn aws_secret_keys_travel_with_the_endpoint_and_the_region() {
        let stored = json!({"queueUrl": "https://sqs.eu-north-1.amazonaws.com/1/q", "region": "eu-north-1",
                            "endpointUrl": null,
                            "credentials": {"accessKeyId": "AK", "secretAccessKey": "SK"}});
        let kept = patch(
            "sqs",
            stored.clone(),
            json!({"credentials": {"secretAccessKey": "***"}}),
        )
        .unwrap();
        assert_eq!(kept["credentials"]["secretAccessKey"], "SK");
        // The whole config echoed back: its null endpointUrl is no change.
        let kept = patch(
            "sqs",
            stored.clone(),
            json!({"endpointUrl": null, "region": "eu-north-1",
                   "credentials": {"accessKeyId": "AK", "secretAccessKey": "***"}}),
        )
        .unwrap();
        assert_eq!(kept["credentials"]["secretAccessKey"], "SK");
        let kept = patch(
            "sqs",
            stored.clone(),
            json!({"queueUrl": "https://sqs.eu-north-1.amazonaws.com/1/r"}),
        )
        .unwrap();
        assert_eq!(kept["credentials"]["secretAccessKey"], "SK");
        for change in [
            json!({"endpointUrl": "https://evil.example/"}),
            json!({"region": "us-east-1"}),
        ] {
            let err = patch("sqs", stored.clone(), change.clone()).unwrap_err();
            assert_eq!(err, vec!["config.credentials.secretAccessKey"], "{change}");
        }
        let moved = patch(
            "sns",
            stored.clone(),
            json!({"region": "us-east-1", "credentials": {"secretAccessKey": "SK2"}}),
        )
        .unwrap();
        assert_eq!(moved["credentials"]["secretAccessKey"], "SK2");
        // Dropping the credentials needs no secret.
        patch(
            "sqs",
            stored,
            json!({"region": "us-east-1", "credentials": null}),
        )
        .unwrap();
    }

    #[test]
    fn a_whole_form_sent_again_counts_every_non_mask_secret_as_sent() {
        // The portal sends the whole document, secrets it did not change as ***.
        let stored = webhook();
        let mut form = stored.clone();
        form["url"] = json!("https://elsewhere.example/");
        form["headers"] = json!({"X-Api-Key": "new", "X-Other": "***"});
        form["auth"]["clientSecret"] = json!("***");
        let mut merged = form.clone();
        let err = keep_secrets("webhook", &mut merged, &stored, &form).unwrap_err();
        assert_eq!(fields(err), vec!["config.headers.X-Other"]);
    }
}

//! Request bodies deserialized into their wire types (the types the OpenAPI
//! document is generated from), with serde's errors turned into the
//! contract's field errors: `errors[].field` names the member, by its path.

use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{error::ApiError, extract::JsonBody};
use crate::{domain::target::FieldError, state::AppState};

/// A JSON object body, deserialized into `T`.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let JsonBody(value) = JsonBody::from_request(req, state).await?;
        parse(value)
            .map(Body)
            .map_err(|e| ApiError::Validation(vec![e]))
    }
}

/// As `Body`, for a body whose members may all be left out: a request
/// without a body (and without a `Content-Type`) reads as `{}`.
pub struct OptionalBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for OptionalBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        // No body: a length of 0 whatever the type, or neither a length,
        // a type nor a chunked body.
        let headers = req.headers();
        let length = headers.get(axum::http::header::CONTENT_LENGTH);
        let empty = length.is_some_and(|l| l.as_bytes() == b"0")
            || (length.is_none()
                && !headers.contains_key(axum::http::header::CONTENT_TYPE)
                && !headers.contains_key(axum::http::header::TRANSFER_ENCODING));
        if empty {
            return parse(Value::Object(Default::default()))
                .map(OptionalBody)
                .map_err(|e| ApiError::Validation(vec![e]));
        }
        // A body of `null` leaves every member out, as no body does.
        let bytes = super::extract::json_bytes(req, state).await?;
        let value = if bytes.trim_ascii() == b"null" {
            Value::Object(Default::default())
        } else {
            super::extract::json_object(&bytes)?
        };
        parse(value)
            .map(OptionalBody)
            .map_err(|e| ApiError::Validation(vec![e]))
    }
}

/// Deserializes a JSON value into `T`; the first problem, as a field error.
pub fn parse<T: DeserializeOwned>(value: Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        field_error(
            if path == "." { "" } else { &path },
            &e.into_inner().to_string(),
        )
    })
}

/// serde's words, in the contract's: `missing field `x`` names `x` as
/// required, `invalid type: null` is a missing value, and `expected a
/// string` says what the member must be.
fn field_error(path: &str, serde_message: &str) -> FieldError {
    let join = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    if let Some(rest) = serde_message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or_default();
        return FieldError::new(join(name), "is required");
    }
    if serde_message.starts_with("invalid type: null") {
        return FieldError::new(path, "is required");
    }
    if let Some(expected) = crate::wire::expected(serde_message) {
        return FieldError::new(path, format!("must be {expected}"));
    }
    FieldError::new(
        path,
        serde_message
            .split(" at line ")
            .next()
            .unwrap_or(serde_message),
    )
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Inner {
        delivery_time: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Outer {
        target_id: String,
        items: Vec<Inner>,
    }

    fn err(v: Value) -> (String, String) {
        let e = parse::<Outer>(v).unwrap_err();
        (e.field, e.message)
    }

    #[test]
    fn serde_errors_name_the_member_by_its_path() {
        assert_eq!(
            err(json!({"items": []})),
            ("targetId".into(), "is required".into())
        );
        assert_eq!(
            err(json!({"targetId": null, "items": []})),
            ("targetId".into(), "is required".into())
        );
        assert_eq!(
            err(json!({"targetId": 5, "items": []})),
            ("targetId".into(), "must be a string".into())
        );
        assert_eq!(
            err(json!({"targetId": "t", "items": [{"deliveryTime": "x"}, {}]})),
            ("items[1].deliveryTime".into(), "is required".into())
        );
        assert_eq!(
            err(json!({"targetId": "t", "items": [{"deliveryTime": []}]})),
            ("items[0].deliveryTime".into(), "must be a string".into())
        );
        assert!(parse::<Outer>(json!({"targetId": "t", "items": []})).is_ok());
    }
}

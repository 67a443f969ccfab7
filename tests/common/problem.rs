//! The one checker of RFC 9457 problem answers (docs/api.md#errors), used by every
//! suite, so that every error the API answers is held to the same contract:
//! the HTTP status, `Content-Type: application/problem+json`, and the members
//! `type`, `title`, `status` (equal to the HTTP status) and `detail`, plus a
//! well-formed `errors[]` when there is one.

use reqwest::{header::HeaderMap, Response};
use serde_json::Value;

/// Asserts that `r` is a problem answer with `status`; returns its body.
pub async fn assert_problem(r: Response, status: u16) -> Value {
    let got = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.bytes().await.expect("a readable body");
    assert_problem_parts(got, &headers, &body, status)
}

/// As [`assert_problem`], for an answer already taken apart.
pub fn assert_problem_parts(got: u16, headers: &HeaderMap, body: &[u8], status: u16) -> Value {
    let text = String::from_utf8_lossy(body);
    assert_eq!(
        got, status,
        "expected a {status} problem, got {got}: {text}"
    );
    let ct = headers
        .get("content-type")
        .map(|v| v.to_str().expect("an ASCII content type").to_string())
        .unwrap_or_default();
    let media_type = ct.split(';').next().unwrap_or("").trim();
    assert!(
        media_type.eq_ignore_ascii_case("application/problem+json"),
        "a {status} answered content-type {ct:?}, not application/problem+json: {text}"
    );
    let body: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("a {status} problem is not JSON ({e}): {text}"));
    assert_problem_body(&body, status);
    body
}

/// Asserts the members of a problem object with `status`, also one that is
/// not a whole answer (a batch item's `error`).
pub fn assert_problem_body(body: &Value, status: u16) {
    assert!(body.is_object(), "a problem is a JSON object: {body}");
    for member in ["type", "title", "detail"] {
        assert!(
            body[member].as_str().is_some_and(|s| !s.trim().is_empty()),
            "the problem's {member} is missing or empty: {body}"
        );
    }
    assert_eq!(
        body["status"].as_u64(),
        Some(u64::from(status)),
        "the problem's status member is not {status}: {body}"
    );
    if let Some(errors) = body.get("errors") {
        let errors = errors
            .as_array()
            .unwrap_or_else(|| panic!("errors is not a list: {body}"));
        assert!(!errors.is_empty(), "errors is present but empty: {body}");
        for e in errors {
            // An empty field names the body as a whole (not JSON, not an object).
            assert!(
                e["field"].is_string(),
                "an entry of errors has no field: {body}"
            );
            assert!(
                e["message"].as_str().is_some_and(|s| !s.is_empty()),
                "an entry of errors has no message: {body}"
            );
        }
    }
}

/// The field names of a validation problem's `errors`; panics when it has none.
pub fn error_fields(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("a validation problem lists errors[]: {problem}"))
        .iter()
        .map(|e| e["field"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Asserts a validation problem (400) whose `errors` name `field`; returns its body.
pub async fn assert_invalid(r: Response, field: &str) -> Value {
    let body = assert_problem(r, 400).await;
    assert_names_field(&body, field);
    body
}

/// Asserts that a problem's `errors` name `field`.
pub fn assert_names_field(problem: &Value, field: &str) {
    let fields = error_fields(problem);
    assert!(
        fields.iter().any(|f| f == field),
        "expected {field} among the fields {fields:?}: {problem}"
    );
}

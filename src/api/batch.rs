//! `POST /messages/batch`: up to 1,000 messages in one request and one
//! database transaction, each answered on its own.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::{
    error::{ApiError, ApiResult, Problem},
    extract::JsonBody,
    messages::{parse_message, MAX_IDEMPOTENCY_KEY},
    wire::MessageOut,
    AppState,
};
use crate::{
    auth::{Principal, Scope},
    domain::{target::FieldError, time},
    metrics as m,
    store::{BatchItem, InsertOutcome},
};

pub const MAX_BATCH: usize = 1000;

/// The messages to schedule: each as in `POST /messages`, with an optional
/// `idempotencyKey` of its own.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct BatchIn {
    /// 1 to 1,000 messages.
    #[schema(min_items = 1, max_items = 1000)]
    pub messages: Vec<BatchMessageIn>,
}

#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct BatchMessageIn {
    #[schema(example = "DI-T-aabbcc1122")]
    pub target_id: String,
    #[schema(example = "2020-07-01T12:34:00Z")]
    pub delivery_time: String,
    pub payload: String,
    /// As the `Idempotency-Key` header of `POST /messages` (at most 255
    /// characters, remembered 24 hours per account); within one batch a key
    /// names one request.
    pub idempotency_key: Option<String>,
}

/// One message's result, in the order sent.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchItemOut {
    /// 201 scheduled (or, with `replayed`, scheduled by an earlier request
    /// with the same key), 400 invalid, 409 key reused with another request.
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<MessageOut>)]
    pub message: Option<Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchOut {
    pub items: Vec<BatchItemOut>,
    /// Items answered 201.
    pub scheduled: usize,
    /// Items answered 400 or 409.
    pub failed: usize,
}

fn failed(e: ApiError) -> BatchItemOut {
    let problem = e.problem();
    BatchItemOut {
        status: problem.status,
        message: None,
        replayed: false,
        error: Some(problem),
    }
}

/// Prefixes each field with the item's place: `messages[3].payload`.
fn at(i: usize, errors: Vec<FieldError>) -> ApiError {
    ApiError::Validation(
        errors
            .into_iter()
            .map(|e| match e.field.as_str() {
                "" => FieldError::new(format!("messages[{i}]"), e.message),
                field => FieldError::new(format!("messages[{i}].{field}"), e.message),
            })
            .collect(),
    )
}

/// Schedule up to 1,000 messages at once.
///
/// One transaction for all; each message is validated and answered on its
/// own (`items[i]` answers `messages[i]`), so one invalid message does not
/// stop the others. The request as a whole answers 400 only when it is not
/// a list of 1 to 1,000 messages.
#[utoipa::path(
    post, path = "/messages/batch", tag = "messages", request_body = BatchIn,
    responses(
        (status = 200, description = "Each message's result", body = BatchOut),
        (status = 400, description = "Not a list of 1 to 1,000 messages", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:write"]))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<BatchOut>> {
    principal.require(Scope::MessagesWrite)?;
    let list = match body.get("messages") {
        Some(Value::Array(list)) if !list.is_empty() && list.len() <= MAX_BATCH => list,
        Some(Value::Array(list)) => {
            return Err(ApiError::field(
                "messages",
                format!("must hold 1 to {MAX_BATCH} messages, not {}", list.len()),
            ))
        }
        _ => {
            return Err(ApiError::field(
                "messages",
                "is required: a list of messages",
            ))
        }
    };
    let now = time::now();
    let mut items: Vec<Option<BatchItemOut>> = Vec::with_capacity(list.len());
    let mut batch = Vec::new();
    let mut places = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let key = match entry.get("idempotencyKey") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(k)) if !k.is_empty() && k.chars().count() <= MAX_IDEMPOTENCY_KEY => {
                Ok(Some(k.clone()))
            }
            Some(_) => Err(vec![FieldError::new(
                "idempotencyKey",
                "must be a string of 1 to 255 characters",
            )]),
        };
        let parsed = if entry.is_object() {
            key.and_then(|key| parse_message(entry, &principal.account, key, now))
        } else {
            Err(vec![FieldError::new("", "must be an object")])
        };
        match parsed {
            Ok((message, response, idempotency)) => {
                items.push(None);
                // Where the item stands, and the 201 body parse_message already made.
                places.push((i, response));
                batch.push(BatchItem {
                    message,
                    idempotency,
                });
            }
            Err(errors) => items.push(Some(failed(at(i, errors)))),
        }
    }
    let outcomes = state.store.insert_batch(&batch).await?;
    let mut scheduled_now = 0;
    let mut earliest = None;
    for ((i, response), outcome) in places.into_iter().zip(outcomes) {
        items[i] = Some(match outcome {
            InsertOutcome::Created(created) => {
                scheduled_now += 1;
                earliest = Some(earliest.map_or(created.delivery_time, |e: DateTime<Utc>| {
                    e.min(created.delivery_time)
                }));
                BatchItemOut {
                    status: 201,
                    message: Some(response),
                    replayed: false,
                    error: None,
                }
            }
            InsertOutcome::Replayed { status, response } => BatchItemOut {
                status,
                message: Some(response),
                replayed: true,
                error: None,
            },
            InsertOutcome::KeyConflict => failed(ApiError::Conflict(format!(
                "messages[{i}].idempotencyKey was used with a different request within the last 24 hours"
            ))),
            InsertOutcome::UnknownTarget => failed(at(
                i,
                vec![FieldError::new("targetId", "is not a known target")],
            )),
        });
    }
    if let Some(at) = earliest {
        metrics::counter!(m::SCHEDULED).increment(scheduled_now);
        state.wake.due(at);
    }
    let items: Vec<BatchItemOut> = items.into_iter().map(|i| i.expect("answered")).collect();
    let scheduled = items.iter().filter(|i| i.status == 201).count();
    Ok(Json(BatchOut {
        failed: items.len() - scheduled,
        scheduled,
        items,
    }))
}

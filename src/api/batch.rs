//! `POST /messages/batch`: up to 1,000 messages in one request and one
//! database transaction, each answered on its own.

use axum::{
    body::Bytes,
    extract::{FromRequest, Request, State},
    http::header,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{value::RawValue, Value};

use super::{
    body,
    error::{ApiError, ApiResult},
    extract,
    messages::schedule_request,
};
use crate::{
    domain::target::FieldError,
    service::{messages::Scheduled, Conflict, IdempotencyKey, ServiceError},
    service::{Actor, Permission},
    state::AppState,
    wire::{
        batch::{BatchIn, BatchItemOut, BatchMessageIn, BatchOut, ItemMessage, MAX_BATCH},
        problem::Problem,
        Field,
    },
};

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

/// The body of a batch, read once: each message is read from the JSON text
/// it was sent as straight into a `BatchMessageIn`, without a JSON tree of
/// the whole body in between (a third of the service's time on a batch of
/// 1,000 went to building and walking that tree). Whatever that direct
/// reading does not accept is read again the general way (a tree, then the
/// type), so every error and every odd but valid input (a member given
/// twice: the last one counts) is answered exactly as by the other bodies.
/// Two differences are left: a member the API does not know is skipped
/// without a tree, so it may nest deeper than the tree's 128 levels, or
/// hold a number no float can, and the message is scheduled; and as a
/// message is read from its own text, its depth counts from there: a known
/// member nested within two levels of the limit answers 400 in its item
/// rather than for the whole body.
pub struct BatchBody(Bytes);

impl FromRequest<AppState> for BatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        extract::json_bytes(req, state).await.map(BatchBody)
    }
}

/// The direct reading of a batch: the messages' texts.
#[derive(Deserialize)]
struct RawBatch<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

/// serde reads a struct from an array too; only objects take the direct way.
fn is_object(text: &[u8]) -> bool {
    text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

impl BatchBody {
    /// Each message, read on its own (a message that is not one answers in
    /// its item); `Err` for a body that is no batch, or holds JSON that no
    /// tree takes (a number out of range), which the whole body answers.
    fn messages(&self) -> Result<Vec<Result<BatchMessageIn, FieldError>>, ApiError> {
        if is_object(&self.0) {
            if let Ok(batch) = serde_json::from_slice::<RawBatch>(&self.0) {
                return batch.messages.into_iter().map(|m| self.read(m)).collect();
            }
        }
        let value = extract::json_object(&self.0)?;
        let batch: BatchIn = body::parse(value).map_err(|e| ApiError::Validation(vec![e]))?;
        Ok(batch.messages.into_iter().map(body::parse).collect())
    }

    /// One message from its text: directly, or else the general way.
    fn read(&self, raw: &RawValue) -> Result<Result<BatchMessageIn, FieldError>, ApiError> {
        if is_object(raw.get().as_bytes()) {
            if let Ok(m) = serde_json::from_str::<BatchMessageIn>(raw.get()) {
                return Ok(Ok(m));
            }
        }
        match serde_json::from_str::<Value>(raw.get()) {
            Ok(value) => Ok(body::parse(value)),
            Err(_) => Err(extract::json_object(&self.0)
                .err()
                .unwrap_or_else(|| ApiError::field("", "the body is not valid JSON"))),
        }
    }
}

/// One item, read on its own.
fn item(
    m: Result<BatchMessageIn, FieldError>,
) -> Result<crate::service::messages::ScheduleRequest, Vec<FieldError>> {
    let m = m.map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let key = match m.idempotency_key {
        Field::Missing => None,
        sent => match sent.take("idempotencyKey", &mut errors) {
            Some(k) => Some(
                IdempotencyKey::parse(&k)
                    .map_err(|rule| vec![FieldError::new("idempotencyKey", rule)])?,
            ),
            None => return Err(errors),
        },
    };
    schedule_request(m.message, key)
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
    actor: Actor,
    body: BatchBody,
) -> ApiResult<Response> {
    // The whole body is read before anything else is judged, as for the
    // other bodies (a body that is not JSON answers 400 before a missing scope).
    let read = body.messages()?;
    state.service.check(&actor, Permission::ChangeMessages)?;
    if read.is_empty() || read.len() > MAX_BATCH {
        return Err(ApiError::field(
            "messages",
            format!("must hold 1 to {MAX_BATCH} messages, not {}", read.len()),
        ));
    }
    let requests = read.into_iter().map(item).collect();
    let answers = state.service.schedule_batch(&actor, requests).await?;
    let items: Vec<BatchItemOut> = answers
        .into_iter()
        .enumerate()
        .map(|(i, answer)| match answer {
            Ok(Scheduled::Created { message }) => BatchItemOut {
                status: 201,
                message: Some(ItemMessage::Created(message)),
                replayed: false,
                error: None,
            },
            Ok(Scheduled::Replayed { status, response }) => BatchItemOut {
                status,
                message: Some(ItemMessage::Replayed(response)),
                replayed: true,
                error: None,
            },
            Err(ServiceError::Invalid(errors)) => failed(at(i, errors)),
            Err(ServiceError::Conflict(Conflict::KeyReused)) => failed(ApiError::Conflict(format!(
                "messages[{i}].idempotencyKey was used with a different request within the last 24 hours"
            ))),
            Err(e) => failed(e.into()),
        })
        .collect();
    let scheduled = items.iter().filter(|i| i.status == 201).count();
    let out = BatchOut {
        failed: items.len() - scheduled,
        scheduled,
        items,
    };
    // Written once into a buffer of about its size: growing one from
    // nothing copies an answer of 1,000 messages (some 450 KB) a dozen times.
    let size: usize = out
        .items
        .iter()
        .map(|i| match &i.message {
            Some(ItemMessage::Replayed(raw)) => raw.get().len() + 40,
            Some(ItemMessage::Created(m)) => m.payload.as_str().len() + 460,
            None => 340,
        })
        .sum();
    let mut body = Vec::with_capacity(size + 64);
    serde_json::to_writer(&mut body, &out).expect("a batch's answer serialises to JSON");
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

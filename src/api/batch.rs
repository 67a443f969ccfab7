//! `POST /messages/batch`: up to 1,000 messages in one request and one
//! database transaction, each answered on its own.

use axum::{
    body::Bytes,
    extract::{FromRequest, Request, State},
    http::header,
    response::{IntoResponse, Response},
};

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
        batch::{
            BatchIn, BatchItemOut, BatchMessageIn, BatchOut, DirectBatch, ItemMessage, MAX_BATCH,
        },
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

/// The body of a batch, read once: straight from its text into its
/// messages (`DirectBatch`), without a JSON tree of the whole body in
/// between (a third of the service's time on a batch of 1,000 went to
/// building and walking that tree). That reading takes only bodies the
/// general one (a tree, then each message read from it) takes, and reads
/// them alike: every value whole, as a tree would, to the same depth, a
/// member given twice counting last. What it cannot answer alike it
/// refuses (an item that is neither an object nor a list of five values,
/// JSON a tree refuses, serde_json's name for raw JSON text first in an
/// object), and the body is read the general way, which answers every
/// error. The test below runs both on every class of input.
pub struct BatchBody(Bytes);

impl FromRequest<AppState> for BatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        extract::json_bytes(req, state).await.map(BatchBody)
    }
}

impl BatchBody {
    /// Each message, read on its own (a message that is not one answers in
    /// its item); `Err` for a body that is no batch, or holds JSON that no
    /// tree takes (a number out of range), which the whole body answers.
    fn messages(&self) -> Result<Vec<Result<BatchMessageIn, FieldError>>, ApiError> {
        match serde_json::from_slice::<DirectBatch>(&self.0) {
            Ok(DirectBatch(messages)) => Ok(messages.into_iter().map(Ok).collect()),
            Err(_) => read_generally(&self.0),
        }
    }
}

/// The general reading of a batch, as of any body: a tree, then each
/// message read from it on its own.
fn read_generally(text: &[u8]) -> Result<Vec<Result<BatchMessageIn, FieldError>>, ApiError> {
    let value = extract::json_object(text)?;
    let batch: BatchIn = body::parse(value).map_err(|e| ApiError::Validation(vec![e]))?;
    Ok(batch.messages.into_iter().map(body::parse).collect())
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
        (status = 409, description = "The batch would pass limits.scheduled_messages (problem type …/quota); none of it was made", body = Problem, content_type = "application/problem+json"),
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

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: &str = r#""targetId":"DI-T-aabbcc1122""#;
    const AT: &str = r#""deliveryTime":"2030-01-01T00:00:00Z""#;
    /// serde_json's name for raw JSON text: a tree reads an object whose
    /// first member has this name as the JSON text the member holds.
    const RAW: &str = "$serde_json::private::RawValue";

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    /// A message with these members besides a target and a time.
    fn message(members: &str) -> String {
        format!("{{{TARGET},{AT},{members}}}")
    }

    fn batch(items: &[String]) -> String {
        format!(r#"{{"messages":[{}]}}"#, items.join(","))
    }

    /// A batch of one message with these members besides a target and a time.
    fn one(members: &str) -> String {
        batch(&[message(members)])
    }

    /// A body of every class of input a batch's reading meets: valid ones,
    /// oddly written ones, and each way a body or an item can be wrong.
    fn bodies() -> Vec<Vec<u8>> {
        let fine = message(r#""payload":"p""#);
        let mut texts = vec![
            // Valid, with and without the optional members.
            one(r#""payload":"p""#),
            batch(&[fine.clone(), fine.clone(), fine.clone()]),
            one(r#""payload":"p","idempotencyKey":"k-1","orderingKey":"o-1""#),
            one(r#""payload":"p","idempotencyKey":null,"orderingKey":null"#),
            format!(r#"{{"messages":[{{"payload":"p",{AT},"orderingKey":"o",{TARGET}}}]}}"#),
            batch(&vec![fine.clone(); 1000]),
            batch(&vec![fine.clone(); 1001]),
            // Whitespace wherever JSON allows it.
            format!(" \n\t\r{{ \"messages\" :\n[ {fine} ,\r\n\t{fine} ] }} \n"),
            format!("{{\"messages\":[{{ {TARGET} , {AT} ,\n\"payload\"\t:\r\"p\" }}]}}"),
            // Strings written with escapes, numbers of every form.
            one(r#""payload":"a\"b\\c\/\n\t\u00e9\ud83d\ude00 é""#),
            format!(
                r#"{{"mess\u0061ges":[{{"t\u0061rgetId":"DI-T-aabbcc1122",{AT},"payl\u006fad":"p"}}]}}"#
            ),
            one(r#""payload":"p","idempotencyKey":"\u0000""#),
            one(r#""payload":5"#),
            one(r#""payload":-0"#),
            one(r#""payload":1.5e3"#),
            one(r#""payload":1E2"#),
            one(r#""payload":18446744073709551615"#),
            one(r#""payload":18446744073709551616"#),
            one(r#""payload":-9223372036854775808"#),
            one(r#""payload":1e308"#),
            one(r#""payload":1e400"#),
            one(r#""payload":-1e400"#),
            one(r#""payload":01"#),
            one(r#""payload":.5"#),
            one(r#""payload":-"#),
            // Members of the wrong type, or missing.
            one(r#""payload":[]"#),
            one(r#""payload":{}"#),
            one(r#""payload":true"#),
            one(r#""payload":"p","idempotencyKey":7"#),
            one(r#""payload":"p","orderingKey":false"#),
            one(r#""payload":null"#),
            batch(&[r#"{"targetId":5,"deliveryTime":{},"payload":[]}"#.into()]),
            batch(&["{}".into()]),
            // Items that are not objects.
            batch(&["7".into(), "\"text\"".into(), "null".into(), "true".into()]),
            batch(&["[]".into(), fine.clone()]),
            batch(&[r#"["DI-T-aabbcc1122","2030-01-01T00:00:00Z","a list"]"#.into()]),
            batch(&[r#"["DI-T-aabbcc1122","2030-01-01T00:00:00Z","p","k","o"]"#.into()]),
            batch(&[r#"["DI-T-aabbcc1122","2030-01-01T00:00:00Z","p",null,null]"#.into()]),
            batch(&[r#"["DI-T-aabbcc1122","2030-01-01T00:00:00Z","p","k","o",6]"#.into()]),
            batch(&[fine.clone(), "7".into(), fine.clone()]),
            // Members the API does not know, of every kind.
            one(r#""payload":"p","extra":1"#),
            one(r#""payload":"p","extra":{"a":[1,2,{"b":null}],"c":"d"}"#),
            one(r#""payload":"p","messages":[1]"#),
            one(r#""payload":"p","extra":1e400"#),
            one(r#""payload":"p","extra":"\ud800""#),
            one(r#""payload":"p","extra":"\x""#),
            format!(r#"{{"messages":[{fine}],"extra":1}}"#),
            format!(r#"{{"extra":{{"a":[true]}},"messages":[{fine}]}}"#),
            format!(r#"{{"extra":1e400,"messages":[{fine}]}}"#),
            format!(r#"{{"messages":[{fine}],"extra":"\ud800"}}"#),
            // A member given twice: the last one counts.
            one(r#""payload":"first","payload":"last""#),
            one(r#""payload":5,"payload":"fixed""#),
            one(r#""payload":"fine","payload":5"#),
            one(r#""payload":"p","orderingKey":"a","orderingKey":null"#),
            format!(r#"{{"messages":[7],"messages":[{fine}]}}"#),
            format!(r#"{{"messages":[{fine}],"messages":5}}"#),
            format!(r#"{{"messages":[{fine}],"messages":[{fine},{fine}]}}"#),
            // serde_json's name for raw JSON text, where a tree reads it.
            batch(&[format!(
                r#"{{"{RAW}":"{{\"targetId\":\"DI-T-aabbcc1122\",\"deliveryTime\":\"2030-01-01T00:00:00Z\",\"payload\":\"raw\"}}"}}"#
            )]),
            batch(&[format!(r#"{{{TARGET},"{RAW}":"5",{AT},"payload":"p"}}"#)]),
            one(&format!(r#""payload":{{"{RAW}":"\"hidden\""}}"#)),
            one(&format!(r#""payload":"p","extra":{{"{RAW}":"1e400"}}"#)),
            format!(r#"{{"{RAW}":"{{\"messages\":[]}}"}}"#),
            format!(r#"{{"{RAW}":"{{\"messages\":[]}}","messages":[{fine}]}}"#),
            format!(r#"{{"messages":[{fine}],"{RAW}":"1"}}"#),
            // Bodies that are no batch.
            "[]".into(),
            format!("[{fine}]"),
            "7".into(),
            "\"messages\"".into(),
            "null".into(),
            "{}".into(),
            r#"{"messages":null}"#.into(),
            r#"{"messages":5}"#.into(),
            r#"{"messages":{}}"#.into(),
            r#"{"messages":"[]"}"#.into(),
            r#"{"messages":[]}"#.into(),
            r#"{"other":[]}"#.into(),
            // Text that is no JSON.
            String::new(),
            " ".into(),
            "{".into(),
            format!(r#"{{"messages":[{fine},]}}"#),
            format!(r#"{{"messages":[{fine}],}}"#),
            format!(r#"{{"messages":[{fine}]}}x"#),
            format!(r#"{{"messages":[{fine}]}} {{}}"#),
            format!(r#"{{"messages":[{fine}"#),
            format!(r#"/* c */{{"messages":[{fine}]}}"#),
            format!(r#"{{'messages':[{fine}]}}"#),
            format!("\u{feff}{{\"messages\":[{fine}]}}"),
            one("\"payload\":\"a\tb\""),
            one("\"payload\":\"a\u{1}b\""),
        ];
        // Nesting on either side of serde_json's limit of 128 levels, in a
        // member the API reads, in one it does not, and beside the messages.
        for levels in [1, 120, 123, 124, 125, 126, 127, 128, 200] {
            texts.push(one(&format!(r#""payload":{}"#, nested(levels))));
            texts.push(one(&format!(r#""payload":"p","extra":{}"#, nested(levels))));
            texts.push(format!(
                r#"{{"messages":[{fine}],"extra":{}}}"#,
                nested(levels)
            ));
            texts.push(batch(&[fine.clone(), nested(levels)]));
        }
        let mut bodies: Vec<Vec<u8>> = texts.into_iter().map(String::into_bytes).collect();
        // Bytes that are no UTF-8 (for `@`): in a member read, in one
        // skipped, in a name, beside the messages.
        for text in [
            one(r#""payload":"a@b""#),
            one(r#""payload":"p","extra":"a@b""#),
            one(r#""payload":"p","ex@tra":1"#),
            format!(r#"{{"messages":[{fine}],"x":"a@"}}"#),
            format!(r#"{{"messages":[{fine}],"x@":1}}"#),
        ] {
            bodies.push(text.replace('@', "\u{ff}").into_bytes());
            let bytes = text.bytes().map(|b| if b == b'@' { 0xff } else { b });
            bodies.push(bytes.collect());
        }
        bodies
    }

    /// The direct reading of `body`, where it takes the body.
    fn directly(body: &[u8]) -> Option<Vec<BatchMessageIn>> {
        serde_json::from_slice::<DirectBatch>(body)
            .ok()
            .map(|DirectBatch(messages)| messages)
    }

    #[test]
    fn the_direct_reading_answers_as_the_general_one_on_every_class_of_input() {
        let bodies = bodies();
        let mut direct = 0;
        for body in &bodies {
            let general = format!("{:?}", read_generally(body));
            let read = format!("{:?}", BatchBody(Bytes::from(body.clone())).messages());
            assert_eq!(read, general, "{}", String::from_utf8_lossy(body));
            direct += usize::from(directly(body).is_some());
        }
        // The comparison covers the direct reading only where it takes a
        // body: it takes every batch of messages that are objects (or lists
        // of five), however written, and refuses the rest.
        assert!(direct > bodies.len() / 3, "{direct} of {}", bodies.len());
        let fine = message(r#""payload":"p""#);
        for taken in [
            batch(&vec![fine.clone(); 1000]),
            one(r#""payload":"first","payload":"last""#),
            one(r#""payload":"p","extra":{"a":[1]}"#),
            format!(r#"{{"extra":1,"messages":[{fine}]}}"#),
            batch(&[r#"["DI-T-aabbcc1122","2030-01-01T00:00:00Z","p","k","o"]"#.into()]),
        ] {
            assert!(directly(taken.as_bytes()).is_some(), "{taken}");
        }
        for refused in [
            batch(&[fine.clone(), "7".into()]),
            one(r#""payload":"p","extra":1e400"#),
            format!(r#"{{"{RAW}":"{{\"messages\":[]}}","messages":[{fine}]}}"#),
        ] {
            assert!(directly(refused.as_bytes()).is_none(), "{refused}");
        }
    }
}

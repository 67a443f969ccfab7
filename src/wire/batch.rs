//! The body of `POST /messages/batch` and its answer: up to 1,000 messages,
//! each a `MessageIn` with an idempotency key of its own, each answered on
//! its own.

use serde::{Deserialize, Serialize};
use serde_json::{value::RawValue, Value};
use utoipa::ToSchema;

use super::{problem::Problem, Field, MessageOut};
use crate::domain::message::Message;

/// Messages one batch may hold.
pub const MAX_BATCH: usize = 1000;

/// The messages to schedule: each as in `POST /messages`, with an optional
/// `idempotencyKey` of its own. Each is read and answered on its own, so the
/// list is read as JSON values first.
#[derive(Debug, Deserialize, ToSchema)]
pub struct BatchIn {
    /// 1 to 1,000 messages, each a `BatchMessageIn`. An item that is not one
    /// is answered in its own item (400 naming `messages[i].…`), not by
    /// refusing the request: the list is read as any JSON values.
    #[schema(schema_with = batch_messages_schema)]
    pub messages: Vec<Value>,
}

fn batch_messages_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, SchemaType};
    ArrayBuilder::new()
        .min_items(Some(1))
        .max_items(Some(MAX_BATCH))
        .items(
            AnyOfBuilder::new()
                .item(utoipa::openapi::Ref::from_schema_name("BatchMessageIn"))
                .item(
                    ObjectBuilder::new()
                        .schema_type(SchemaType::AnyValue)
                        .description(Some("Any other value: its item answers 400")),
                ),
        )
        .build()
}

/// One message of a batch: a `MessageIn` with an `idempotencyKey` of its own.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchMessageIn {
    #[schema(value_type = String, required = true, example = "DI-T-aabbcc1122", pattern = "^DI-T-[0-9a-f]{10}$")]
    pub target_id: Field<String>,
    /// RFC 3339 with an offset; a past time is delivered at once.
    #[schema(value_type = String, required = true, example = "2020-07-01T12:34:00Z", format = DateTime)]
    pub delivery_time: Field<String>,
    /// At most 61,440 characters (Unicode scalar values).
    #[schema(value_type = String, required = true, example = "Hello, World!", max_length = 61440)]
    pub payload: Field<String>,
    /// As the `Idempotency-Key` header of `POST /messages` (1 to 255
    /// characters, no control characters, remembered 24 hours per account,
    /// the same key space); within one batch a key names one request.
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub idempotency_key: Field<String>,
    /// As `orderingKey` of `POST /messages` (docs/api.md#ordering-keys).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255, example = "order-1234",
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub ordering_key: Field<String>,
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
    pub message: Option<ItemMessage>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// An item's message: scheduled now, written straight into the answer, or
/// the answer first given for its key (as the store keeps it).
#[derive(Debug)]
pub enum ItemMessage {
    Created(Box<Message>),
    Replayed(Box<RawValue>),
}

impl Serialize for ItemMessage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ItemMessage::Created(m) => MessageOut::new(m).serialize(s),
            ItemMessage::Replayed(raw) => raw.serialize(s),
        }
    }
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

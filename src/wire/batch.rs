//! The body of `POST /messages/batch` and its answer: up to 1,000 messages,
//! each a `MessageIn` with an idempotency key of its own, each answered on
//! its own.

use std::{borrow::Cow, collections::HashMap, fmt};

use serde::{
    de::{self, MapAccess, SeqAccess, Visitor},
    Deserialize, Deserializer, Serialize,
};
use serde_json::{value::RawValue, Value};
use utoipa::{
    openapi::{
        schema::{ObjectBuilder, Schema, SchemaType, Type},
        RefOr,
    },
    PartialSchema, ToSchema,
};

use super::{problem::Problem, Field, MessageIn, MessageOut};
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
///
/// Read and documented by hand rather than with `#[serde(flatten)]`, which
/// would answer otherwise: serde reads a struct with a flattened member only
/// from an object, while an item sent as a list of five values is read as
/// the members in their order (and a shorter list answers "must be struct
/// BatchMessageIn with 5 elements"); and utoipa documents a flattened member
/// as an `allOf` rather than as one object with the members' properties.
#[derive(Debug, Default)]
pub struct BatchMessageIn {
    pub message: MessageIn,
    pub idempotency_key: Field<String>,
}

/// The members of a message of a batch, in the order a list gives them.
const MEMBERS: [&str; 5] = [
    "targetId",
    "deliveryTime",
    "payload",
    "idempotencyKey",
    "orderingKey",
];

/// serde_json's name for raw JSON text: a tree (`Value`) reads an object
/// whose first member has this name as the JSON that member's text holds.
const RAW_VALUE: &str = "$serde_json::private::RawValue";

impl BatchMessageIn {
    /// The member of this name, if a message has one.
    fn member(&mut self, name: &str) -> Option<&mut Field<String>> {
        Some(match name {
            "targetId" => &mut self.message.target_id,
            "deliveryTime" => &mut self.message.delivery_time,
            "payload" => &mut self.message.payload,
            "idempotencyKey" => &mut self.idempotency_key,
            "orderingKey" => &mut self.message.ordering_key,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for BatchMessageIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("BatchMessageIn", &MEMBERS, MessageVisitor)
    }
}

/// Reads a message as serde's derive read the struct of five members it
/// was: from an object, or from a list of its members in order.
struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = BatchMessageIn;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct BatchMessageIn")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut list: A) -> Result<BatchMessageIn, A::Error> {
        let mut m = BatchMessageIn::default();
        for (i, name) in MEMBERS.into_iter().enumerate() {
            let value = list.next_element()?.ok_or_else(|| {
                de::Error::invalid_length(i, &"struct BatchMessageIn with 5 elements")
            })?;
            *m.member(name).expect("MEMBERS are members") = value;
        }
        Ok(m)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<BatchMessageIn, A::Error> {
        let mut m = BatchMessageIn::default();
        each_member(map, |name, map| match m.member(name) {
            Some(field) => {
                *field = map.next_value()?;
                Ok(())
            }
            None => skip(map),
        })?;
        Ok(m)
    }
}

/// A batch read straight from its text into its messages, in one pass:
/// what `BatchIn` and then each message read from it would give, where the
/// body is an object whose `messages` are all objects (or lists of five
/// members). It refuses the rest, which the door then reads the general way.
pub struct DirectBatch(pub Vec<BatchMessageIn>);

impl<'de> Deserialize<'de> for DirectBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Body;
        impl<'de> Visitor<'de> for Body {
            type Value = DirectBatch;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a batch")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DirectBatch, A::Error> {
                let mut messages = None;
                each_member(map, |name, map| match name {
                    "messages" => {
                        messages = Some(map.next_value()?);
                        Ok(())
                    }
                    _ => skip(map),
                })?;
                let messages = messages.ok_or_else(|| de::Error::missing_field("messages"))?;
                Ok(DirectBatch(messages))
            }
        }
        d.deserialize_map(Body)
    }
}

/// Calls `read` with each member's name, to read its value; the last of a
/// name given twice counts, as in a tree. An object whose first member is
/// named `RAW_VALUE` is refused: a tree reads it as the JSON it holds.
fn each_member<'de, A: MapAccess<'de>>(
    mut map: A,
    mut read: impl FnMut(&str, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    let mut first = true;
    while let Some(Name(name)) = map.next_key()? {
        if first && name == RAW_VALUE {
            return Err(de::Error::custom("raw JSON text, which a tree reads"));
        }
        first = false;
        read(&name, &mut map)?;
    }
    Ok(())
}

/// A member the API does not know: read whole, as a tree reads it, so that
/// what a tree refuses (a number out of range, a lone surrogate, nesting
/// past the limit) is refused here too.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<Value>().map(drop)
}

/// A member's name, borrowed from the body's text where it can be.
struct Name<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = Name<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member's name")
            }

            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(name)))
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(name.to_string())))
            }
        }
        d.deserialize_identifier(Names)
    }
}

impl PartialSchema for BatchMessageIn {
    /// `MessageIn`'s object with the `idempotencyKey` property, the
    /// properties in the order of `MEMBERS`.
    fn schema() -> RefOr<Schema> {
        let RefOr::T(Schema::Object(mut one)) = MessageIn::schema() else {
            unreachable!("a MessageIn is documented as an object")
        };
        one.description = Some(
            "One message of a batch: a `MessageIn` with an `idempotencyKey` of its own.".into(),
        );
        let mut properties: HashMap<String, RefOr<Schema>> =
            std::mem::take(&mut one.properties).into_iter().collect();
        properties.insert("idempotencyKey".into(), idempotency_key_schema());
        for name in MEMBERS {
            let property = properties.remove(name).expect("every member is documented");
            one.properties.insert(name.into(), property);
        }
        Schema::Object(one).into()
    }
}

impl ToSchema for BatchMessageIn {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("BatchMessageIn")
    }
}

fn idempotency_key_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .description(Some(
            "As the `Idempotency-Key` header of `POST /messages` (1 to 255\n\
             characters, no control characters, remembered 24 hours per account,\n\
             the same key space); within one batch a key names one request.",
        ))
        .min_length(Some(1))
        .max_length(Some(255))
        .pattern(Some("^[^\\u0000-\\u001f\\u007f-\\u009f]*$"))
        .into()
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// As serde's derive read the struct of five members a message was: an
    /// object by the members' names, a list by their places; anything else
    /// is refused naming the struct.
    #[test]
    fn a_message_is_read_from_an_object_or_from_a_list_of_its_five_members() {
        let named: BatchMessageIn =
            serde_json::from_value(json!({"payload": 5, "idempotencyKey": "k", "other": [1]}))
                .unwrap();
        assert_eq!(named.message.target_id, Field::Missing);
        assert_eq!(named.message.payload, Field::Invalid("a string".into()));
        assert_eq!(named.idempotency_key, Field::Valid("k".into()));
        let listed: BatchMessageIn =
            serde_json::from_value(json!(["t", "d", "p", "k", "o"])).unwrap();
        let valid = |s: &str| Field::Valid(s.to_string());
        assert_eq!(
            [
                listed.message.target_id,
                listed.message.delivery_time,
                listed.message.payload,
                listed.idempotency_key,
                listed.message.ordering_key
            ],
            [valid("t"), valid("d"), valid("p"), valid("k"), valid("o")]
        );
        for (value, says) in [
            (
                json!(["t", "d", "p"]),
                "invalid length 3, expected struct BatchMessageIn with 5 elements",
            ),
            (
                json!(7),
                "invalid type: integer `7`, expected struct BatchMessageIn",
            ),
        ] {
            let e = serde_json::from_value::<BatchMessageIn>(value).unwrap_err();
            assert_eq!(e.to_string(), says);
        }
    }

    #[test]
    fn a_message_is_documented_as_one_object_with_its_members_in_order() {
        let RefOr::T(Schema::Object(one)) = BatchMessageIn::schema() else {
            panic!("not an object")
        };
        let names: Vec<&str> = one.properties.keys().map(String::as_str).collect();
        assert_eq!(names, MEMBERS);
        assert_eq!(one.required, ["targetId", "deliveryTime", "payload"]);
    }
}

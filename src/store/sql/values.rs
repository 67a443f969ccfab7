//! Values stored differently by the two databases, bound and read the same
//! way by the shared bodies: times (`At`), message ids (`Uid`) and payload
//! text (`Text`). JSON goes through sqlx's own `Json`, which is `jsonb` in
//! PostgreSQL and text in SQLite. The domain's text values that Dispatch
//! checks before it writes them (`AccountId`, `OrderingKey`) are bound as
//! their text and read back trusted.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::{
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef},
    sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef},
    Decode, Encode, Postgres, Sqlite, Type,
};
use uuid::Uuid;

use crate::domain::{ids::AccountId, message::OrderingKey};

/// Implements `Type`, `Encode` and `Decode` for a wrapper, by backend, as
/// another type that the driver knows, converted on the way in and out.
macro_rules! stored_as {
    ($wrapper:ty, $db:ty, $buf:ty, $vref:ty, $info:ty, $as:ty,
     encode: |$e:ident| $enc:expr, decode: |$d:ident| $dec:expr) => {
        impl Type<$db> for $wrapper {
            fn type_info() -> $info {
                <$as as Type<$db>>::type_info()
            }

            fn compatible(ty: &$info) -> bool {
                <$as as Type<$db>>::compatible(ty)
            }
        }

        impl<'q> Encode<'q, $db> for $wrapper {
            fn encode_by_ref(&self, buf: &mut $buf) -> Result<IsNull, BoxDynError> {
                let $e = self;
                <$as as Encode<'q, $db>>::encode($enc, buf)
            }
        }

        impl<'r> Decode<'r, $db> for $wrapper {
            fn decode(value: $vref) -> Result<Self, BoxDynError> {
                let $d = <$as as Decode<'r, $db>>::decode(value)?;
                $dec
            }
        }
    };
}

/// A stored time: `timestamptz` in PostgreSQL, integer milliseconds since
/// the epoch in SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At(pub DateTime<Utc>);

impl From<At> for DateTime<Utc> {
    fn from(at: At) -> Self {
        at.0
    }
}

stored_as!(At, Postgres, PgArgumentBuffer, PgValueRef<'r>, PgTypeInfo, DateTime<Utc>,
    encode: |a| a.0, decode: |t| Ok(At(t)));
stored_as!(At, Sqlite, Vec<SqliteArgumentValue<'q>>, SqliteValueRef<'r>, SqliteTypeInfo, i64,
    encode: |a| a.0.timestamp_millis(),
    decode: |ms| Ok(At(Utc.timestamp_millis_opt(ms).single().unwrap_or_default())));

/// A message id: `uuid` in PostgreSQL, its hyphenated text in SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Uid(pub Uuid);

stored_as!(Uid, Postgres, PgArgumentBuffer, PgValueRef<'r>, PgTypeInfo, Uuid,
    encode: |u| u.0, decode: |u| Ok(Uid(u)));
stored_as!(Uid, Sqlite, Vec<SqliteArgumentValue<'q>>, SqliteValueRef<'r>, SqliteTypeInfo, String,
    encode: |u| u.0.hyphenated().to_string(),
    decode: |s| Ok(Uid(Uuid::parse_str(&s)?)));

/// Text kept as its UTF-8 bytes (`bytea`) in PostgreSQL and as text in
/// SQLite: a message's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text(pub String);

stored_as!(Text, Postgres, PgArgumentBuffer, PgValueRef<'r>, PgTypeInfo, Vec<u8>,
    encode: |t| t.0.as_bytes().to_vec(), decode: |b| Ok(Text(String::from_utf8(b)?)));
stored_as!(Text, Sqlite, Vec<SqliteArgumentValue<'q>>, SqliteValueRef<'r>, SqliteTypeInfo, String,
    encode: |t| t.0.clone(), decode: |s| Ok(Text(s)));

/// Text the domain checked before Dispatch wrote it: `text` in both
/// databases, bound without a copy where the driver allows (PostgreSQL),
/// read back with `from_trusted`.
macro_rules! trusted_text {
    ($t:ty) => {
        stored_as!($t, Postgres, PgArgumentBuffer, PgValueRef<'r>, PgTypeInfo, &str,
            encode: |v| v.as_str(), decode: |s| Ok(<$t>::from_trusted(s)));
        stored_as!($t, Sqlite, Vec<SqliteArgumentValue<'q>>, SqliteValueRef<'r>, SqliteTypeInfo, String,
            encode: |v| v.as_str().to_owned(), decode: |s| Ok(<$t>::from_trusted(s)));
    };
}

trusted_text!(AccountId);
trusted_text!(OrderingKey);

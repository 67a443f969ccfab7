//! The forms of a target body's strings as the document states them
//! (patterns the server's rules accept) and the schemas `derive(ToSchema)`
//! cannot write by itself (the headers map, the scopes, a media type).

use utoipa::openapi::{
    schema::{
        AdditionalProperties, ArrayBuilder, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
    },
    RefOr,
};

use crate::domain::target::rules;

/// No string of a target may hold U+0000.
pub(in crate::wire) const NO_NUL: &str = "^[^\\u0000]*$";
/// What `rules::is_name` accepts, for the document.
pub(in crate::wire) const NAME: &str =
    "^[^\\u0000]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000]*$";
pub(in crate::wire) const HEADER_NAME: &str = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";
pub(in crate::wire) const HEADER_VALUE: &str = "^[\\t\\u0020-\\u007e]*$";

/// What `rules::is_media_type` accepts, for the document.
pub(in crate::wire) const MEDIA_TYPE: &str = concat!(
    "^[!#$%&'*+.^_`|~0-9A-Za-z-]+/[!#$%&'*+.^_`|~0-9A-Za-z-]+",
    "([ \\t]*;[ \\t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+=",
    "([!#$%&'*+.^_`|~0-9A-Za-z-]+|\"[\\t !#-:<-\\[\\]-~]*\"))*$"
);

/// What a string that holds U+0000 answers: no store keeps it, and no
/// receiver expects it. Members the server does not read are ignored,
/// whatever they hold.
pub(in crate::wire) const NUL: &str = "must not contain U+0000";

pub(super) fn string_schema(pattern: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
}

pub(super) fn headers_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .max_properties(Some(rules::MAX_HEADERS))
        .property_names(Some(
            string_schema(HEADER_NAME).format(Some(SchemaFormat::Custom("header-name".into()))),
        ))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(
            string_schema(HEADER_VALUE).build().into(),
        ))))
        .build()
        .into()
}

pub(super) fn content_type_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .pattern(Some(MEDIA_TYPE))
        .min_length(Some(3))
        .max_length(Some(rules::MAX_MEDIA_TYPE))
        .examples(["application/json; charset=utf-8"])
        .build()
        .into()
}

pub(super) fn scopes_schema() -> Schema {
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(string_schema(NO_NUL).min_length(Some(1)))
        .build()
        .into()
}

//! The document's view of a target body: the forms `derive(ToSchema)`
//! cannot say (the create body's variants by `type`, the headers map, the
//! merge patch).

use utoipa::{
    openapi::{
        schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type},
        Discriminator, Ref, RefOr,
    },
    PartialSchema, ToSchema,
};

use super::{
    forms::{string_schema, NAME},
    types::{PullConfigIn, SnsConfigIn, SqsConfigIn, TargetIn, TargetPatchIn, WebhookConfigIn},
};
use crate::domain::target::rules;

/// One variant of the create body, for the document.
fn variant(kind: &str, config: &str) -> Schema {
    ObjectBuilder::new()
        .property(
            "name",
            string_schema(NAME)
                .min_length(Some(1))
                .max_length(Some(rules::MAX_NAME_CHARS))
                .description(Some("1 to 200 characters, not only white space")),
        )
        .required("name")
        .property(
            "type",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([kind])),
        )
        .required("type")
        .property("config", RefOr::Ref(Ref::from_schema_name(config)))
        .required("config")
        .property(
            "enabled",
            ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
                .description(Some("Defaults to true (also when null)")),
        )
        .build()
        .into()
}

/// The create body's variants, one component each: `type` says which.
const VARIANTS: [(&str, &str, &str); 4] = [
    ("webhook", "WebhookTargetIn", "WebhookConfigIn"),
    ("sqs", "SqsTargetIn", "SqsConfigIn"),
    ("sns", "SnsTargetIn", "SnsConfigIn"),
    ("pull", "PullTargetIn", "PullConfigIn"),
];

fn component(name: &str) -> String {
    format!("#/components/schemas/{name}")
}

impl PartialSchema for TargetIn {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new().description(Some(
            "Create a target: its `config` is that of its `type`. Strings must not hold U+0000.",
        ));
        for (_, variant, _) in VARIANTS {
            one_of = one_of.item(Ref::from_schema_name(variant));
        }
        one_of
            .discriminator(Some(Discriminator::with_mapping(
                "type",
                VARIANTS.map(|(kind, variant, _)| (kind, component(variant))),
            )))
            .into()
    }
}

impl ToSchema for TargetIn {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for (kind, variant_name, config) in VARIANTS {
            schemas.push((variant_name.into(), variant(kind, config).into()));
        }
        for (name, schema) in [
            ("WebhookConfigIn", WebhookConfigIn::schema()),
            ("SqsConfigIn", SqsConfigIn::schema()),
            ("SnsConfigIn", SnsConfigIn::schema()),
            ("PullConfigIn", PullConfigIn::schema()),
        ] {
            schemas.push((name.into(), schema));
        }
        WebhookConfigIn::schemas(schemas);
        SqsConfigIn::schemas(schemas);
        SnsConfigIn::schemas(schemas);
        PullConfigIn::schemas(schemas);
    }
}

impl PartialSchema for TargetPatchIn {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property(
                "name",
                string_schema(NAME)
                    .min_length(Some(1))
                    .max_length(Some(rules::MAX_NAME_CHARS)),
            )
            .property(
                "enabled",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null])),
            )
            .property(
                "config",
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .description(Some(
                        "Merged into the config member by member, recursively; `null` removes a \
                     member. The result must be a valid config of the target's type. A secret \
                     left out or sent back as `***` is kept while its address stays; when the \
                     address changes, each secret that goes to it must be sent again.",
                    )),
            )
            .description(Some("A JSON merge patch of the target"))
            .into()
    }
}

impl ToSchema for TargetPatchIn {}

//! A target as a client sends it (docs/api.md#targets). `TargetIn` is what a create
//! body deserializes into, and what the stored target with a merge patch
//! applied deserializes into: the document is generated from these types,
//! and `parse` turns them into a `TargetSpec` by the domain's rules
//! (`domain::target::rules`), naming every problem by its field at once.
//!
//! The document gives each string its form: a pattern where one says it
//! exactly, and otherwise a named `format` (`http-url`, `header-name`,
//! `webhook-secret`) that the description defines.

use serde_json::{Map, Value};

use self::{forms::NUL, read::err};
use super::Field;
use crate::domain::target::{rules, FieldError, TargetConfig, TargetSpec};

mod forms;
mod pull;
mod read;
mod schema;
#[cfg(test)]
mod tests;
mod types;

pub use types::*;

/// Reads a target document (a create body, or a stored target with a merge
/// patch applied) by the rules of docs/api.md#targets.
pub fn parse(doc: &Value) -> Result<TargetSpec, Vec<FieldError>> {
    if !doc.is_object() {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    }
    let body: TargetIn = serde_json::from_value(doc.clone()).unwrap_or_default();
    body.into_spec()
}

impl TargetIn {
    pub fn into_spec(self) -> Result<TargetSpec, Vec<FieldError>> {
        let mut errors = Vec::new();
        let e = &mut errors;
        let name = match self.name {
            Field::Valid(s) if s.contains('\0') => err(e, "name", NUL),
            Field::Valid(s) if rules::is_name(&s) => Some(s),
            Field::Valid(_) => err(
                e,
                "name",
                "must be 1 to 200 characters, not only white space",
            ),
            Field::Missing => err(e, "name", "is required"),
            Field::Invalid(_) => err(e, "name", "must be a string"),
        };
        let enabled = match self.enabled {
            Field::Valid(b) => b,
            Field::Missing => true,
            Field::Invalid(_) => {
                err::<()>(e, "enabled", "must be a boolean");
                true
            }
        };
        let kind = match self.kind {
            Field::Valid(kind) => Some(kind),
            Field::Missing => err(e, "type", "is required: webhook, sqs, sns or pull"),
            Field::Invalid(_) => err(e, "type", "must be one of webhook, sqs, sns, pull"),
        };
        let config = match self.config {
            Field::Valid(map) => Value::Object(map),
            Field::Missing => err(e, "config", "is required").unwrap_or_default(),
            Field::Invalid(_) => err(e, "config", "must be an object").unwrap_or_default(),
        };
        let mut generated_secret = false;
        let config = kind.and_then(|kind| {
            // Every member is a `Field`: an object always deserializes.
            let config = if config.is_object() {
                config
            } else {
                Value::Object(Map::new())
            };
            match kind {
                TargetKindIn::Webhook => serde_json::from_value::<WebhookConfigIn>(config)
                    .unwrap_or_default()
                    .read(e, &mut generated_secret)
                    .map(TargetConfig::Webhook),
                TargetKindIn::Sqs => serde_json::from_value::<SqsConfigIn>(config)
                    .unwrap_or_default()
                    .read(e)
                    .map(TargetConfig::Sqs),
                TargetKindIn::Sns => serde_json::from_value::<SnsConfigIn>(config)
                    .unwrap_or_default()
                    .read(e)
                    .map(TargetConfig::Sns),
                TargetKindIn::Pull => pull::read(&config, e).map(TargetConfig::Pull),
            }
        });
        match (name, config) {
            (Some(name), Some(config)) if errors.is_empty() => Ok(TargetSpec {
                name,
                enabled,
                config,
                generated_secret,
            }),
            _ => Err(errors),
        }
    }
}

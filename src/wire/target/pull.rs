//! A pull target's config read by the domain's rules (docs/api.md#pull-targets).

use serde_json::Value;

use super::{read::err, types::PullConfigIn};
use crate::{
    domain::target::{
        pull::{self, PullConfig, Span},
        FieldError,
    },
    wire::Field,
};

/// Reads `config` (an object) as a pull target's config, naming each problem.
pub(super) fn read(config: &Value, e: &mut Vec<FieldError>) -> Option<PullConfig> {
    // Members that limit sending: a pull target sends nothing.
    for member in ["flowControl", "circuitBreaker"] {
        if config.get(member).is_some_and(|v| !v.is_null()) {
            err::<()>(
                e,
                format!("config.{member}"),
                "does not apply to a pull target: its consumers set their own pace",
            );
        }
    }
    let body: PullConfigIn = serde_json::from_value(config.clone()).unwrap_or_default();
    let defaults = PullConfig::default();
    let visibility_timeout = span(
        body.visibility_timeout,
        "config.visibilityTimeout",
        pull::VISIBILITY_MS,
        "from 1s to 12h",
        e,
    )
    .map(|s| s.unwrap_or(defaults.visibility_timeout));
    let max_receive_count = match body.max_receive_count {
        Field::Missing => Some(defaults.max_receive_count),
        Field::Valid(n)
            if n.fract() == 0.0
                && n >= f64::from(*pull::MAX_RECEIVE_COUNT.start())
                && n <= f64::from(*pull::MAX_RECEIVE_COUNT.end()) =>
        {
            Some(n as u32)
        }
        _ => err(
            e,
            "config.maxReceiveCount",
            "must be an integer from 1 to 1000",
        ),
    };
    let retention = span(
        body.retention,
        "config.retention",
        pull::RETENTION_MS,
        "from 1m to 14d",
        e,
    )
    .map(|s| s.unwrap_or(defaults.retention));
    Some(PullConfig {
        visibility_timeout: visibility_timeout?,
        max_receive_count: max_receive_count?,
        retention: retention?,
    })
}

/// A duration member within `range` (milliseconds); `Some(None)` when absent.
pub(in crate::wire) fn span(
    f: Field<String>,
    field: &str,
    range: std::ops::RangeInclusive<u64>,
    within: &str,
    e: &mut Vec<FieldError>,
) -> Option<Option<Span>> {
    let problem =
        format!("must be a duration {within}: a whole number and a unit (ms, s, m, h, d)");
    match f {
        Field::Missing => Some(None),
        Field::Valid(s) => match Span::parse(&s) {
            Some(span) if range.contains(&span.ms()) => Some(Some(span)),
            _ => err(e, field, &problem),
        },
        Field::Invalid(_) => err(e, field, &problem),
    }
}

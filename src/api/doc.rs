//! The OpenAPI document: its operations (`ApiDoc`), the handler that serves
//! it, and what every operation shares, added in one place rather than
//! repeated on each handler: the answers of the extractors
//! (401, 403, 429 for a token; 400, 413, 415 for a JSON body; 404 for an id
//! in the path), the bounds of `limit` and the values of `state`, and links from the operations that
//! create ids to those that take them.

use axum::{
    response::{IntoResponse, Response as HttpResponse},
    Json,
};
use utoipa::{
    openapi::{
        header::HeaderBuilder,
        link::LinkBuilder,
        path::{Operation, ParameterIn},
        schema::{ObjectBuilder, Type},
        security::{Http, HttpAuthScheme, SecurityScheme},
        Content, OpenApi, Ref, RefOr, Response, ResponseBuilder,
    },
    Modify,
};

use super::extract::MAX_LIMIT;

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document")))]
pub async fn openapi() -> HttpResponse {
    static DOCUMENT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    Json(DOCUMENT.get_or_init(document)).into_response()
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.bearer_format = Some("JWT".into());
        http.description =
            Some("An access token from POST /oauth/token (client credentials grant)".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(http));
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "Dispatch", description = "Scheduled delivery to webhooks, Amazon SQS and Amazon SNS, with a retry ladder and dead letters."),
    paths(
        super::oauth::token,
        super::targets::create, super::targets::list, super::targets::get, super::targets::patch,
        super::targets::enable, super::targets::disable, super::targets::rotate_secret, super::targets::delete,
        super::messages::create, super::batch::create, super::messages::list, super::messages::get, super::messages::attempts,
        super::messages::cancel, super::messages::reschedule,
        super::bulk::redrive, super::bulk::cancel, super::bulk::replay,
        super::schedules::create, super::schedules::list, super::schedules::get, super::schedules::patch,
        super::schedules::pause, super::schedules::resume, super::schedules::delete,
        super::events::create_subscription, super::events::list_subscriptions, super::events::get_subscription,
        super::events::patch_subscription, super::events::delete_subscription,
        super::events::publish, super::events::get_event, super::events::list_events, super::events::replay,
        super::pull::receive, super::pull::ack, super::pull::nack, super::pull::visibility,
        super::ops::live, super::ops::ready, super::ops::metrics, openapi,
    ),
    components(schemas(crate::wire::batch::BatchMessageIn)),
    modifiers(&BearerAuth, &CommonResponses, &Links),
    tags(
        (name = "auth", description = "OAuth 2 client credentials"),
        (name = "targets", description = "Where messages go"),
        (name = "messages", description = "What is delivered, and when"),
        (name = "schedules", description = "Recurring schedules: one message per run"),
        (name = "events", description = "Events by type, and the subscriptions that fan them out to targets"),
        (name = "pull", description = "Pull targets: consumers receive, ack and nack their messages"),
        (name = "operations", description = "Health, metrics, this document"),
    )
)]
pub struct ApiDoc;

fn problem(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/problem+json",
        Content::new(Some(Ref::from_schema_name("Problem"))),
    )
}

fn integer_header(description: &str) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::Integer))
        .description(Some(description))
        .build()
}

fn add(op: &mut Operation, status: &str, response: &Response) {
    op.responses
        .responses
        .entry(status.to_string())
        .or_insert_with(|| response.clone().into());
}

/// The document as served. utoipa (5.5) writes a link's fields in
/// snake_case (`operation_ref`); OpenAPI spells them in camelCase.
pub fn document() -> serde_json::Value {
    use utoipa::OpenApi as _;
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
    if let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) {
        let responses = paths
            .values_mut()
            .filter_map(|item| item.as_object_mut())
            .flat_map(|item| item.values_mut())
            .filter_map(|op| op.get_mut("responses").and_then(|r| r.as_object_mut()))
            .flat_map(|r| r.values_mut());
        for response in responses {
            let links = response.get_mut("links").and_then(|l| l.as_object_mut());
            for link in links.into_iter().flat_map(|l| l.values_mut()) {
                let Some(link) = link.as_object_mut() else {
                    continue;
                };
                for (snake, camel) in [
                    ("operation_ref", "operationRef"),
                    ("operation_id", "operationId"),
                    ("request_body", "requestBody"),
                ] {
                    if let Some(v) = link.remove(snake) {
                        link.insert(camel.to_string(), v);
                    }
                }
            }
        }
    }
    doc
}

/// The forms of ids and cursors in queries, so that a generated value is one
/// the server can read (it may still name nothing: an empty page). An empty
/// value is the same as none.
const TARGET_ID: &str = "^(DI-T-[0-9a-f]{10})?$";
const MESSAGES_CURSOR: &str =
    "^(DI-M-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$";
const TARGETS_CURSOR: &str = "^([0-9]{1,15}[.]DI-T-[0-9a-f]{10})?$";
const SCHEDULE_ID: &str = "^(DI-S-[0-9a-f]{10})?$";
const SCHEDULES_CURSOR: &str = "^([0-9]{1,15}[.]DI-S-[0-9a-f]{10})?$";
const ATTEMPTS_CURSOR: &str = "^([0-9]{1,9})?$";
const SUBSCRIPTIONS_CURSOR: &str = "^([0-9]{1,15}[.]DI-U-[0-9a-f]{10})?$";
const EVENT_ID: &str = "^(DI-E-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$";
const EVENTS_CURSOR: &str =
    "^([0-9]{1,15}[.]DI-E-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$";
/// An event type (docs/api.md#types-and-patterns), or nothing.
const EVENT_TYPE: &str = "^([A-Za-z0-9_-]+([.][A-Za-z0-9_-]+)*)?$";

pub struct CommonResponses;

/// A path segment or query parameter: any text without a control character.
const NO_CONTROL_CHARACTERS: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        let unauthorized = problem(
            "No token, or a malformed, expired or revoked one (WWW-Authenticate says which)",
        )
        .header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .description(Some(
                    "Bearer, with error=\"invalid_token\" when a token was sent",
                ))
                .build(),
        )
        .build();
        let forbidden = problem("The token lacks the scope this operation needs").build();
        let rate_limited = problem(
            "Rate limited: over `api.rate_limit` requests a second for this client \
             (bursts of twice that); retry after the Retry-After delay",
        )
        .header("Retry-After", integer_header("Seconds to wait"))
        .build();
        let invalid = problem("Invalid input; errors[].field names each field").build();
        let too_large = problem("The body is over `server.max_body_bytes`").build();
        let too_slow = problem("The body did not arrive within `server.body_timeout`").build();
        let control = problem(
            "A control character (such as U+0000) in a path segment; errors[].field is `path`",
        )
        .build();
        let media_type = problem("The body is not application/json").build();
        let not_found = problem("Unknown id, or an id of another account").build();

        for (path, item) in openapi.paths.paths.iter_mut() {
            let has_id = path.contains('{');
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    add(op, "401", &unauthorized);
                    add(op, "403", &forbidden);
                    add(op, "429", &rate_limited);
                }
                let json_body = op
                    .request_body
                    .as_ref()
                    .is_some_and(|b| b.content.keys().any(|ct| ct.contains("json")));
                if json_body {
                    add(op, "400", &invalid);
                    add(op, "408", &too_slow);
                    add(op, "413", &too_large);
                    add(op, "415", &media_type);
                }
                let has_query = op
                    .parameters
                    .as_ref()
                    .is_some_and(|ps| ps.iter().any(|p| p.parameter_in == ParameterIn::Query));
                if has_query {
                    add(op, "400", &invalid);
                }
                if has_id && op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    add(op, "404", &not_found);
                }
                if has_id {
                    add(op, "400", &control);
                }
                for p in op.parameters.iter_mut().flatten() {
                    if p.name == "state" && p.parameter_in == ParameterIn::Query {
                        p.schema = Some(RefOr::T(
                            ObjectBuilder::new()
                                .schema_type(Type::String)
                                .enum_values(Some([
                                    "Scheduled",
                                    "Delivered",
                                    "Cancelled",
                                    "DeadLetter",
                                ]))
                                .into(),
                        ));
                    }
                    let pattern = match (p.name.as_str(), path.as_str()) {
                        ("targetId", _) => Some(TARGET_ID),
                        ("scheduleId", _) => Some(SCHEDULE_ID),
                        ("cursor", "/targets") => Some(TARGETS_CURSOR),
                        ("cursor", "/schedules") => Some(SCHEDULES_CURSOR),
                        ("cursor", "/messages") => Some(MESSAGES_CURSOR),
                        ("cursor", "/subscriptions") => Some(SUBSCRIPTIONS_CURSOR),
                        ("cursor", "/events") => Some(EVENTS_CURSOR),
                        ("eventId", _) => Some(EVENT_ID),
                        ("type", _) => Some(EVENT_TYPE),
                        ("cursor", _) => Some(ATTEMPTS_CURSOR),
                        _ => None,
                    };
                    if let (Some(pattern), ParameterIn::Query) = (pattern, &p.parameter_in) {
                        let max = (p.name == "type").then_some(255);
                        p.schema = Some(RefOr::T(
                            ObjectBuilder::new()
                                .schema_type(Type::String)
                                .pattern(Some(pattern))
                                .max_length(max)
                                .into(),
                        ));
                    }
                    if matches!(p.name.as_str(), "from" | "to")
                        && p.parameter_in == ParameterIn::Query
                    {
                        p.schema = Some(RefOr::T(
                            ObjectBuilder::new()
                                .schema_type(Type::String)
                                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                                    utoipa::openapi::KnownFormat::DateTime,
                                )))
                                .into(),
                        ));
                    }
                    if p.name == "limit" && p.parameter_in == ParameterIn::Query {
                        p.schema = Some(RefOr::T(
                            ObjectBuilder::new()
                                .schema_type(Type::Integer)
                                .minimum(Some(1))
                                .maximum(Some(MAX_LIMIT))
                                .default(Some(super::extract::DEFAULT_LIMIT.into()))
                                .into(),
                        ));
                    }
                    // No path segment or query parameter holds a control
                    // character (400): text without a pattern of its own
                    // says so.
                    if let Some(RefOr::T(utoipa::openapi::schema::Schema::Object(o))) =
                        &mut p.schema
                    {
                        let text = o.schema_type
                            == utoipa::openapi::schema::SchemaType::Type(Type::String);
                        if text && o.pattern.is_none() {
                            o.pattern = Some(NO_CONTROL_CHARACTERS.into());
                        }
                    }
                }
            }
        }
    }
}

/// Links from a created target or message to the operations that take its id,
/// so that a client (or a fuzzer) can follow them.
pub struct Links;

impl Modify for Links {
    fn modify(&self, openapi: &mut OpenApi) {
        let link_all = |openapi: &mut OpenApi,
                        from: &str,
                        status: &str,
                        param: &str,
                        body_field: &str,
                        to: &[(&str, &str, &str)]| {
            let Some(op) = openapi
                .paths
                .paths
                .get_mut(from)
                .and_then(|i| i.post.as_mut())
            else {
                return;
            };
            let Some(RefOr::T(response)) = op.responses.responses.get_mut(status) else {
                return;
            };
            for (name, path, method) in to {
                let pointer = format!("#/paths/{}/{method}", path.replace('/', "~1"));
                response.links.insert(
                    name.to_string(),
                    LinkBuilder::new()
                        .operation_ref(pointer)
                        .parameter(param, format!("$response.body#/{body_field}"))
                        .build()
                        .into(),
                );
            }
        };
        link_all(
            openapi,
            "/targets",
            "201",
            "targetId",
            "targetId",
            &[
                ("GetTarget", "/targets/{targetId}", "get"),
                ("PatchTarget", "/targets/{targetId}", "patch"),
                ("EnableTarget", "/targets/{targetId}/enable", "post"),
                ("DisableTarget", "/targets/{targetId}/disable", "post"),
                (
                    "RotateTargetSecret",
                    "/targets/{targetId}/rotate-secret",
                    "post",
                ),
                ("DeleteTarget", "/targets/{targetId}", "delete"),
            ],
        );
        link_all(
            openapi,
            "/schedules",
            "201",
            "scheduleId",
            "scheduleId",
            &[
                ("GetSchedule", "/schedules/{scheduleId}", "get"),
                ("PatchSchedule", "/schedules/{scheduleId}", "patch"),
                ("PauseSchedule", "/schedules/{scheduleId}/pause", "post"),
                ("ResumeSchedule", "/schedules/{scheduleId}/resume", "post"),
                ("DeleteSchedule", "/schedules/{scheduleId}", "delete"),
            ],
        );
        link_all(
            openapi,
            "/messages",
            "201",
            "messageId",
            "messageId",
            &[
                ("GetMessage", "/messages/{messageId}", "get"),
                ("ListAttempts", "/messages/{messageId}/attempts", "get"),
                ("CancelMessage", "/messages/{messageId}/cancel", "post"),
                (
                    "RescheduleMessage",
                    "/messages/{messageId}/reschedule",
                    "post",
                ),
            ],
        );
    }
}

//! The OpenAPI document says what each operation can answer, the bounds of
//! its parameters, and how the ids that one operation creates reach the
//! operations that take them (links), so that clients and fuzzers can
//! follow them.

mod common;

use common::TestApp;
use serde_json::{json, Value};

async fn document() -> Value {
    let app = TestApp::spawn().await;
    let doc = document_of(&app).await;
    app.shutdown().await;
    doc
}

async fn document_of(app: &TestApp) -> Value {
    let r = app.http.get(app.url("/openapi.json")).send().await.unwrap();
    r.json().await.unwrap()
}

fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            out.push((path.clone(), method.clone(), op.clone()));
        }
    }
    out
}

fn statuses(op: &Value) -> Vec<&str> {
    op["responses"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// The API's resources: every operation under them needs a token.
const RESOURCES: [&str; 5] = [
    "/targets",
    "/messages",
    "/schedules",
    "/subscriptions",
    "/events",
];

/// Operations that read a JSON body, whatever else takes one.
const JSON_BODIES: [(&str, &str); 14] = [
    ("post", "/targets"),
    ("patch", "/targets/{targetId}"),
    ("post", "/messages"),
    ("post", "/messages/batch"),
    ("post", "/messages/redrive"),
    ("post", "/messages/cancel"),
    ("post", "/messages/replay"),
    ("post", "/messages/{messageId}/reschedule"),
    ("post", "/schedules"),
    ("patch", "/schedules/{scheduleId}"),
    ("post", "/subscriptions"),
    ("patch", "/subscriptions/{subscriptionId}"),
    ("post", "/events"),
    ("post", "/events/replay"),
];

#[tokio::test]
async fn every_operation_lists_the_answers_its_extractors_can_give() {
    let doc = document().await;
    let mut authenticated = std::collections::BTreeSet::new();
    let mut with_path_ids = 0;
    let mut json_bodies = std::collections::BTreeSet::new();
    for (path, method, op) in operations(&doc) {
        let codes = statuses(&op);
        let needs_token = op["security"].as_array().is_some_and(|s| !s.is_empty());
        let resource = RESOURCES
            .iter()
            .any(|r| path == *r || path.starts_with(&format!("{r}/")));
        assert_eq!(
            needs_token, resource,
            "{method} {path} needs a token: {resource}"
        );
        if needs_token {
            authenticated.insert((method.clone(), path.clone()));
            for code in ["401", "403", "429"] {
                assert!(
                    codes.contains(&code),
                    "{method} {path} lacks {code}: {codes:?}"
                );
            }
            assert!(
                op["responses"]["401"]["headers"]["WWW-Authenticate"].is_object(),
                "{method} {path}"
            );
            if path.contains('{') {
                with_path_ids += 1;
                assert!(codes.contains(&"404"), "{method} {path} lacks 404");
            }
        }
        let json_body = op["requestBody"]["content"]
            .as_object()
            .is_some_and(|c| c.keys().any(|k| k.contains("json")));
        if json_body {
            json_bodies.insert((method.clone(), path.clone()));
            for code in ["400", "413", "415"] {
                assert!(
                    codes.contains(&code),
                    "{method} {path} lacks {code}: {codes:?}"
                );
            }
        }
    }
    // The loops above checked what the name says, not nothing: every
    // resource's operations, those with ids in their path, and every
    // operation known to read JSON.
    for resource in RESOURCES {
        for method in ["get", "post"] {
            assert!(
                authenticated.contains(&(method.to_string(), resource.to_string())),
                "{method} {resource} is documented and needs a token: {authenticated:?}"
            );
        }
    }
    assert!(authenticated.len() >= 20, "{authenticated:?}");
    assert!(with_path_ids >= 12, "{with_path_ids} operations take an id");
    for (method, path) in JSON_BODIES {
        assert!(
            json_bodies.contains(&(method.to_string(), path.to_string())),
            "{method} {path} reads JSON: {json_bodies:?}"
        );
    }
}

#[tokio::test]
async fn list_limits_and_states_are_bounded_as_the_parser_bounds_them() {
    let doc = document().await;
    for path in ["/messages", "/targets"] {
        let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
        let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
        assert_eq!(limit["schema"]["minimum"], 1, "{path}");
        assert_eq!(limit["schema"]["maximum"], 1000, "{path}");
        assert_eq!(limit["schema"]["default"], 50, "{path}");
    }
    let params = doc["paths"]["/messages"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let state = params.iter().find(|p| p["name"] == "state").unwrap();
    assert_eq!(
        state["schema"]["enum"],
        serde_json::json!(["Scheduled", "Delivered", "Cancelled", "DeadLetter"])
    );
    let batch = &doc["components"]["schemas"]["BatchIn"]["properties"]["messages"];
    assert_eq!(
        (batch["minItems"].as_u64(), batch["maxItems"].as_u64()),
        (Some(1), Some(1000))
    );
    let message = &doc["components"]["schemas"]["MessageIn"]["properties"];
    assert_eq!(message["payload"]["maxLength"], 61440);
}

#[tokio::test]
async fn created_ids_link_to_the_operations_that_take_them() {
    let doc = document().await;
    for (from, param, targets) in [
        (
            "/targets",
            "targetId",
            &[
                ("/targets/{targetId}", "get"),
                ("/targets/{targetId}", "patch"),
                ("/targets/{targetId}", "delete"),
                ("/targets/{targetId}/enable", "post"),
                ("/targets/{targetId}/disable", "post"),
            ][..],
        ),
        (
            "/messages",
            "messageId",
            &[
                ("/messages/{messageId}", "get"),
                ("/messages/{messageId}/attempts", "get"),
                ("/messages/{messageId}/cancel", "post"),
                ("/messages/{messageId}/reschedule", "post"),
            ][..],
        ),
    ] {
        let links = doc["paths"][from]["post"]["responses"]["201"]["links"]
            .as_object()
            .unwrap_or_else(|| panic!("POST {from} 201 has no links"));
        let refs: Vec<&str> = links
            .values()
            .map(|l| {
                assert_eq!(
                    l["parameters"][param],
                    format!("$response.body#/{param}"),
                    "{l}"
                );
                l["operationRef"]
                    .as_str()
                    .expect("operationRef, in camelCase")
            })
            .collect();
        for (path, method) in targets {
            let pointer = format!("#/paths/{}/{method}", path.replace('/', "~1"));
            assert!(
                refs.contains(&pointer.as_str()),
                "{pointer} not in {refs:?}"
            );
            // The pointer resolves in the document.
            let resolved = doc.pointer(pointer.trim_start_matches('#')).is_some();
            assert!(resolved, "{pointer} does not resolve");
        }
    }
}

/// The pattern the document gives a list's `cursor`.
fn cursor_pattern(doc: &Value, path: &str) -> regex::Regex {
    let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
    let cursor = params.iter().find(|p| p["name"] == "cursor").unwrap();
    regex::Regex::new(cursor["schema"]["pattern"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn the_cursors_a_list_issues_have_the_form_its_document_gives_and_any_such_form_is_read() {
    let doc = document().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for name in ["a", "b"] {
        let r = api
            .post(
                "/targets",
                serde_json::json!({"name": name, "type": "webhook", "config": {"url": "http://127.0.0.1:9/hook"}}),
            )
            .await;
        assert_eq!(r.status(), 201);
        let target = r.json::<Value>().await.unwrap()["targetId"]
            .as_str()
            .unwrap()
            .to_string();
        let r = api
            .post(
                "/messages",
                serde_json::json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": name}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    for (path, well_formed_unknown) in [
        ("/targets", "0.DI-T-0000000000"),
        ("/messages", "DI-M-00000000-0000-0000-0000-000000000000"),
    ] {
        let pattern = cursor_pattern(&doc, path);
        let page: Value = api
            .get(&format!("{path}?limit=1"))
            .await
            .json()
            .await
            .unwrap();
        let cursor = page["nextCursor"].as_str().expect("a second page");
        assert!(
            pattern.is_match(cursor),
            "{path}: {cursor} is not {pattern}"
        );
        let next = api.get(&format!("{path}?limit=1&cursor={cursor}")).await;
        assert_eq!(next.status(), 200, "{path}");
        assert!(pattern.is_match(well_formed_unknown));
        let r = api
            .get(&format!("{path}?cursor={well_formed_unknown}"))
            .await;
        assert_eq!(
            r.status(),
            200,
            "{path}: a cursor of the documented form is read"
        );
        let r = api.get(&format!("{path}?cursor=not-a-cursor")).await;
        assert_eq!(r.status(), 400, "{path}");
        assert!(!pattern.is_match("not-a-cursor"));
    }
    app.shutdown().await;
}

/// The component a `$ref` names.
fn named<'a>(doc: &'a Value, reference: &Value) -> (&'a str, &'a Value) {
    let name = reference.as_str().unwrap().rsplit('/').next().unwrap();
    let name = doc["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.as_str() == name)
        .unwrap_or_else(|| panic!("no component {name}"));
    (name, &doc["components"]["schemas"][name])
}

#[tokio::test]
async fn each_target_type_has_its_own_config_schema_whose_required_members_are_the_parsers() {
    let app = TestApp::spawn_with(|c| c.aws.allow_default_credentials = true).await;
    let doc = document_of(&app).await;
    let api = app.api("acme").await;
    let target_in = &doc["components"]["schemas"]["TargetIn"];
    assert_eq!(target_in["discriminator"]["propertyName"], "type");
    let mapping = target_in["discriminator"]["mapping"].as_object().unwrap();
    assert_eq!(
        mapping.keys().collect::<Vec<_>>(),
        ["pull", "sns", "sqs", "webhook"]
    );
    for (kind, reference) in mapping {
        let (_, variant) = named(&doc, reference);
        assert_eq!(variant["properties"]["type"]["enum"], json!([kind]));
        let (config_name, config) = named(&doc, &variant["properties"]["config"]["$ref"]);
        // An object, or an allOf of objects (members shared between types).
        let parts: Vec<&Value> = match config["allOf"].as_array() {
            Some(all) => all
                .iter()
                .map(|p| match p.get("$ref") {
                    Some(r) => named(&doc, r).1,
                    None => p,
                })
                .collect(),
            None => vec![config],
        };
        // A config of the required members, each its documented example, is accepted.
        let required: Vec<&str> = parts
            .iter()
            .flat_map(|p| p["required"].as_array().into_iter().flatten())
            .map(|n| n.as_str().unwrap())
            .collect();
        if kind == "pull" {
            // Every member of a pull target's config has a default.
            assert!(required.is_empty(), "{config_name} requires {required:?}");
            let r = api
                .post(
                    "/targets",
                    json!({"name": kind, "type": kind, "config": {}}),
                )
                .await;
            assert_eq!(r.status(), 201, "{kind}: {}", r.text().await.unwrap());
            continue;
        }
        assert!(!required.is_empty(), "{config_name} requires members");
        let mut body = serde_json::Map::new();
        for name in &required {
            let member = parts
                .iter()
                .map(|p| &p["properties"][*name])
                .find(|m| m.is_object());
            let example = &member.unwrap()["example"];
            assert!(example.is_string(), "{config_name}.{name} has no example");
            body.insert(name.to_string(), example.clone());
        }
        let r = api
            .post(
                "/targets",
                json!({"name": kind, "type": kind, "config": body}),
            )
            .await;
        let status = r.status();
        assert_eq!(status, 201, "{kind}: {}", r.text().await.unwrap());
        // Without any one of them it is refused, naming that member.
        for name in &required {
            let mut less = body.clone();
            less.remove(*name);
            let r = api
                .post(
                    "/targets",
                    json!({"name": kind, "type": kind, "config": less}),
                )
                .await;
            assert_eq!(r.status(), 400, "{kind} without {name}");
            let problem: Value = r.json().await.unwrap();
            assert_eq!(
                problem["errors"][0]["field"],
                format!("config.{name}"),
                "{problem}"
            );
        }
    }
    app.shutdown().await;
}

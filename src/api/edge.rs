//! Checks every request passes before any route: a control character
//! (U+0000 to U+001F, U+007F to U+009F) in a path segment or a query
//! parameter, once percent-decoded, names nothing the service holds, so it
//! answers 400 naming the parameter on every store, before any handler or
//! database sees it.

use axum::{
    extract::Request,
    middleware::Next,
    response::{IntoResponse, Response},
};
use percent_encoding::percent_decode_str;

use super::error::ApiError;

pub async fn refuse_control_characters(req: Request, next: Next) -> Response {
    match control_character_in(req.uri().path(), req.uri().query()) {
        Some(field) => ApiError::field(&field, "must not hold a control character such as U+0000")
            .into_response(),
        None => next.run(req).await,
    }
}

fn has_control(decoded: &str) -> bool {
    decoded.chars().any(char::is_control)
}

/// The first place that holds a control character: `path`, or the query
/// parameter's name (`query` when the name itself holds one).
fn control_character_in(path: &str, query: Option<&str>) -> Option<String> {
    if has_control(&percent_decode_str(path).decode_utf8_lossy()) {
        return Some("path".into());
    }
    let query = query?;
    url::form_urlencoded::parse(query.as_bytes()).find_map(|(name, value)| {
        if has_control(&name) {
            Some("query".into())
        } else if has_control(&value) {
            Some(name.into_owned())
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::control_character_in;

    #[test]
    fn control_characters_anywhere_in_the_path_or_query_are_named() {
        assert_eq!(control_character_in("/messages", None), None);
        assert_eq!(
            control_character_in("/messages", Some("orderingKey=a%00b")),
            Some("orderingKey".into())
        );
        assert_eq!(
            control_character_in("/messages", Some("state=Scheduled&type=a%0Ab")),
            Some("type".into())
        );
        assert_eq!(
            control_character_in("/messages", Some("a%7Fb=1")),
            Some("query".into())
        );
        assert_eq!(
            control_character_in("/messages/DI-M-%00", None),
            Some("path".into())
        );
        // C1 controls, encoded as UTF-8.
        assert_eq!(
            control_character_in("/targets", Some("name=%C2%85")),
            Some("name".into())
        );
        // What is not a control character passes: spaces, `+`, Unicode.
        assert_eq!(
            control_character_in("/portal/messages", Some("key=a+b%20c&q=%C3%A9")),
            None
        );
    }
}

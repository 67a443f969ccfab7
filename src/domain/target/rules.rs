//! The rules a target's configuration must meet (docs/api.md#targets), as plain
//! functions: the wire layer reads a body and names each field, these say
//! whether a value is allowed and why not.

use url::Url;

pub use super::headers::{is_header_name, is_header_text, is_media_type, MAX_MEDIA_TYPE};

/// Headers a target may not set: Dispatch owns them.
pub const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "user-agent",
    "host",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "transfer-encoding",
    "connection",
];

/// At most this many custom headers, and this many bytes of their names and
/// values together: they are sent with every attempt.
pub const MAX_HEADERS: usize = 32;
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// A webhook's attempt timeout, in milliseconds.
pub const TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=300_000;

/// A target's name: 1 to 200 characters.
pub const MAX_NAME_CHARS: usize = 200;

pub fn is_reserved_header(name: &str) -> bool {
    RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
}

/// A name people can read: at most 200 characters, one of which is neither
/// white space nor a control character.
pub fn is_name(name: &str) -> bool {
    name.chars().count() <= MAX_NAME_CHARS
        && name.chars().any(|c| !c.is_whitespace() && !c.is_control())
}

/// Why `s` is not an http(s) URL with a host and without credentials, if
/// it is not. A URL is shown to every role and logged; credentials go in
/// `headers` or `auth`, where they are secrets.
pub fn http_url_problem(s: &str) -> Option<String> {
    match Url::parse(s) {
        Ok(u) if !u.username().is_empty() || u.password().is_some() => Some(
            "must not hold credentials (user:password@): send them in headers or auth, where they are kept secret"
                .into(),
        ),
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some_and(|h| !h.is_empty()) =>
        {
            None
        }
        Ok(_) => Some("must be an http or https URL with a host".into()),
        Err(e) => Some(format!("is not a valid URL: {e}")),
    }
}

/// An AWS region name: `eu-north-1`, `us-gov-west-1`, `cn-north-1`.
pub fn is_region(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

/// An SNS topic ARN: `arn:aws:sns:<region>:<12-digit account>:<name>`.
pub fn is_sns_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.split(':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "sns"
        && is_region(parts[3])
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && !parts[5].is_empty()
        && parts[5].len() <= 256
        && parts[5]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A FIFO message group id: 1 to 128 printable ASCII characters.
pub fn is_message_group_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_need_something_visible() {
        for ok in ["orders", " a ", "ä", &"x".repeat(200)] {
            assert!(is_name(ok), "{ok:?}");
        }
        for bad in ["", "   ", "\u{1c}\u{1f}", "\t\n", &"x".repeat(201)] {
            assert!(!is_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn regions_arns_and_group_ids() {
        for ok in ["eu-north-1", "us-gov-west-1", "cn-north-1"] {
            assert!(is_region(ok), "{ok}");
        }
        for bad in [
            "eu-north",
            "EU-north-1",
            "eun-north-1",
            "eu--1",
            "eu-north-x",
        ] {
            assert!(!is_region(bad), "{bad}");
        }
        assert!(is_sns_arn(
            "arn:aws:sns:eu-north-1:123456789012:orders.fifo"
        ));
        assert!(!is_sns_arn("arn:aws:sqs:eu-north-1:123456789012:orders"));
        assert!(!is_sns_arn("arn:aws:sns:eu-north-1:12345:orders"));
        assert!(is_message_group_id("g-1"));
        assert!(!is_message_group_id("g 1"));
        assert!(!is_message_group_id(&"g".repeat(129)));
    }

    #[test]
    fn urls_must_be_http_with_a_host() {
        assert_eq!(http_url_problem("https://example.com/hook"), None);
        assert!(http_url_problem("ftp://example.com").is_some());
        assert!(http_url_problem("not a url").is_some());
        for with_credentials in [
            "https://user:pass@example.com/hook",
            "https://user@example.com/hook",
            "https://:pass@example.com/hook",
            "http://u%40x:p@127.0.0.1:9/",
        ] {
            let problem = http_url_problem(with_credentials).expect(with_credentials);
            assert!(problem.contains("credentials"), "{problem}");
        }
        assert_eq!(http_url_problem("https://example.com/a@b?c=d@e"), None);
    }
}

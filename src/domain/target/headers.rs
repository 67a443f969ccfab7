//! What a custom header may be, without an HTTP library: the domain stays pure.

/// A header name: an RFC 9110 token.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header value Dispatch can send as text: visible ASCII, spaces and tabs.
pub fn is_header_text(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// The longest `contentType` a target may name.
pub const MAX_MEDIA_TYPE: usize = 255;

/// A media type as a `Content-Type` header carries it (RFC 9110 §8.3.1):
/// `type/subtype`, then parameters `; name=value`, each value a token or a
/// quoted string of visible ASCII and spaces (no escapes).
pub fn is_media_type(s: &str) -> bool {
    let token = |t: &str| is_header_name(t);
    let blank: &[char] = &[' ', '\t'];
    if s.len() > MAX_MEDIA_TYPE {
        return false;
    }
    let segments: Vec<&str> = s.split(';').collect();
    let last = segments.len() - 1;
    // White space may stand on either side of each `;`, nowhere else.
    let segment = |i: usize| {
        let mut seg = segments[i];
        if i > 0 {
            seg = seg.trim_start_matches(blank);
        }
        if i < last {
            seg = seg.trim_end_matches(blank);
        }
        seg
    };
    let Some((kind, subtype)) = segment(0).split_once('/') else {
        return false;
    };
    token(kind)
        && token(subtype)
        && (1..=last).all(|i| {
            let Some((name, value)) = segment(i).split_once('=') else {
                return false;
            };
            let quoted = value.len() >= 2
                && value.starts_with('"')
                && value.ends_with('"')
                && value[1..value.len() - 1]
                    .bytes()
                    .all(|b| b == b'\t' || ((0x20..0x7f).contains(&b) && !b"\"\\;".contains(&b)));
            token(name) && (token(value) || quoted)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_are_type_subtype_and_parameters() {
        for ok in [
            "text/plain",
            "application/json",
            "text/plain; charset=utf-8",
            "application/vnd.acme+json;v=2",
            "text/plain ; charset=\"utf 8\"",
            "multipart/form-data; boundary=x; a=b",
        ] {
            assert!(is_media_type(ok), "{ok:?}");
        }
        for bad in [
            "",
            "text",
            "text/",
            "/plain",
            "text/plain;",
            "text/plain; charset",
            "text/plain; charset=",
            "text/plain; charset=\"a\\\"b\"",
            "text/plain; a=\"x;y\"",
            "text/plain ",
            "text/plain; charset=utf-8 ",
            "text/pl ain",
            "text/plain\r\nX: y",
            "text/plainé",
            &format!("text/{}", "x".repeat(251)),
        ] {
            assert!(!is_media_type(bad), "{bad:?}");
        }
    }

    #[test]
    fn header_names_are_tokens_and_values_visible_ascii() {
        for ok in ["X-Api-Key", "x_trace.id", "A!#$%&'*+-.^_`|~9"] {
            assert!(is_header_name(ok), "{ok}");
        }
        for bad in ["", "X Key", "X:Key", "Ключ", "X\nKey", "(x)"] {
            assert!(!is_header_name(bad), "{bad:?}");
        }
        for ok in ["", "secret value", "a\tb", "~!@#"] {
            assert!(is_header_text(ok), "{ok:?}");
        }
        for bad in ["a\nb", "a\rb", "nul\0", "del\u{7f}", "é"] {
            assert!(!is_header_text(bad), "{bad:?}");
        }
    }
}

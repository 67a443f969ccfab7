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

#[cfg(test)]
mod tests {
    use super::*;

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

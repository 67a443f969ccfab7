//! The message payload: any string of at most 61,440 Unicode scalar values.

use std::fmt;

pub const MAX_PAYLOAD_CHARS: usize = 61_440;

#[derive(Clone, PartialEq, Eq)]
pub struct Payload(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("must be at most {MAX_PAYLOAD_CHARS} characters, got {0}")]
    TooLong(usize),
}

impl Payload {
    pub fn parse(s: String) -> Result<Self, PayloadError> {
        // Cheap bound first: a string of at most N bytes has at most N chars.
        if s.len() > MAX_PAYLOAD_CHARS {
            let chars = s.chars().count();
            if chars > MAX_PAYLOAD_CHARS {
                return Err(PayloadError::TooLong(chars));
            }
        }
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

/// Payloads never reach the logs whole.
impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_counts_characters_not_bytes() {
        assert!(Payload::parse("a".repeat(MAX_PAYLOAD_CHARS)).is_ok());
        assert_eq!(
            Payload::parse("a".repeat(MAX_PAYLOAD_CHARS + 1)),
            Err(PayloadError::TooLong(MAX_PAYLOAD_CHARS + 1))
        );
        // 61,440 three-byte characters are 184,320 bytes and still allowed.
        assert!(Payload::parse("€".repeat(MAX_PAYLOAD_CHARS)).is_ok());
        assert!(Payload::parse("€".repeat(MAX_PAYLOAD_CHARS + 1)).is_err());
        assert!(Payload::parse(String::new()).is_ok());
    }
}

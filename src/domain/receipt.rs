//! A receipt handle (docs/api.md#pull-targets): names one receive of one
//! message. It carries the message's id and the receive's token, opaque to
//! the consumer; the store holds the latest receive's token, so a handle of
//! any earlier receive, or of another target's message, matches nothing and
//! is answered as stale.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64, Engine};
use uuid::Uuid;

use super::ids::MessageId;

/// The longest text that can be a handle: anything longer is stale unread.
pub const MAX_HANDLE_CHARS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptHandle {
    pub message: MessageId,
    pub token: Uuid,
}

impl ReceiptHandle {
    /// The handle as a consumer sees it: 43 characters of URL-safe base64.
    pub fn encode(&self) -> String {
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(self.message.0.as_bytes());
        bytes[16..].copy_from_slice(self.token.as_bytes());
        B64.encode(bytes)
    }

    /// A handle this server made, or `None` (which a consumer is told is stale).
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() > MAX_HANDLE_CHARS {
            return None;
        }
        let bytes = B64.decode(s).ok()?;
        let bytes: [u8; 32] = bytes.try_into().ok()?;
        let (m, t) = bytes.split_at(16);
        Some(Self {
            message: MessageId(Uuid::from_slice(m).ok()?),
            token: Uuid::from_slice(t).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_reads_back_as_itself_and_nothing_else_reads() {
        let h = ReceiptHandle {
            message: MessageId(Uuid::now_v7()),
            token: Uuid::new_v4(),
        };
        let text = h.encode();
        assert_eq!(text.len(), 43);
        assert_eq!(ReceiptHandle::parse(&text), Some(h));
        for bad in [
            "",
            "x",
            "not a handle",
            &text[1..],
            &format!("{text}A"),
            &"A".repeat(500),
        ] {
            assert_eq!(ReceiptHandle::parse(bad), None, "{bad:?}");
        }
    }
}

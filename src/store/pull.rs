//! What the pull capability takes and answers (docs/api.md#pull-targets).

use chrono::{DateTime, TimeDelta, Utc};

use crate::domain::{message::Message, receipt::ReceiptHandle};

/// One receive's ask: at most `max` messages, each hidden for `visibility`;
/// a message's `max_receives`-th receive is its last.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveAsk {
    pub max: u32,
    pub visibility: TimeDelta,
    pub max_receives: u32,
    /// Whether the caller will wait for more: only then is `Receipt::next_at`
    /// read (one statement more).
    pub then_wait: bool,
}

/// A message as a receive hands it out.
#[derive(Debug, Clone)]
pub struct ReceivedItem {
    pub message: Message,
    pub handle: ReceiptHandle,
    /// Receives since the message's ladder last started, this one included.
    pub receive_count: u32,
}

/// What a receive took, and what a consumer that waits needs to know.
#[derive(Debug, Clone, Default)]
pub struct Receipt {
    pub items: Vec<ReceivedItem>,
    /// When the target next has something receivable, if it is not now: the
    /// earliest due time or end of a visibility among its waiting messages.
    /// Read only when the receive took fewer than it asked for and the
    /// caller will wait (`ReceiveAsk::then_wait`).
    pub next_at: Option<DateTime<Utc>>,
    /// The earliest end of a last allowed receive's visibility made now:
    /// its message is a dead letter then, unless acked.
    pub last_until: Option<DateTime<Utc>>,
}

/// A pull target's queue at a glance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Depth {
    /// Receivable now.
    pub due: u64,
    /// Received and hidden.
    pub hidden: u64,
    /// Scheduled for later, or waiting behind an earlier message of their key.
    pub later: u64,
    pub dead: u64,
    /// The delivery time of the oldest message receivable now.
    pub oldest_due: Option<DateTime<Utc>>,
    /// Receives recorded for the target's messages that are still kept.
    pub receives: u64,
}

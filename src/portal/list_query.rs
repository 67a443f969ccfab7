//! The messages list's query (filters, search, paging, a notice after an
//! action), read by the list, its quick ranges and the bulk actions.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{layout, when};
use crate::{
    domain::{
        ids::{ScheduleId, TargetId},
        message::State as MsgState,
    },
    store::MessageFilter,
};

/// The list's query: filters, search, paging, and a notice after an action.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct ListQuery {
    pub state: String,
    pub target: String,
    /// An orderingKey.
    pub key: String,
    /// A schedule id: the messages of its runs.
    pub schedule: String,
    pub from: String,
    pub to: String,
    pub tz: String,
    pub q: String,
    /// Text the payload holds, searched among a bounded number of messages.
    pub text: String,
    pub cursor: String,
    pub notice: Option<String>,
    pub n: Option<u64>,
}

impl ListQuery {
    /// The filter the query names; a field that does not parse is an error to show.
    pub fn filter(&self) -> Result<MessageFilter, String> {
        let state = match self.state.trim() {
            "" => None,
            s => Some(MsgState::parse(s).ok_or_else(|| format!("`{s}` is not a state"))?),
        };
        let target_id = match self.target.trim() {
            "" => None,
            t => Some(
                t.parse::<TargetId>()
                    .map_err(|_| format!("`{t}` is not a target id"))?,
            ),
        };
        let bound = |s: &str| -> Result<Option<DateTime<Utc>>, String> {
            if s.trim().is_empty() {
                Ok(None)
            } else {
                when::resolve(s, &self.tz, Utc::now()).map(Some)
            }
        };
        Ok(MessageFilter {
            target_id,
            state,
            delivery_from: bound(&self.from)?,
            delivery_to: bound(&self.to)?,
            ordering_key: Some(self.key.trim())
                .filter(|k| !k.is_empty())
                .map(str::to_string),
            schedule_id: match self.schedule.trim() {
                "" => None,
                s => Some(
                    s.parse::<ScheduleId>()
                        .map_err(|_| format!("`{s}` is not a schedule id"))?,
                ),
            },
            event_id: None,
            event_type: None,
        })
    }

    /// The query string of the filters (for links that keep them).
    pub fn filter_query(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("state", &self.state),
            ("target", &self.target),
            ("key", &self.key),
            ("schedule", &self.schedule),
            ("from", &self.from),
            ("to", &self.to),
            ("tz", &self.tz),
            ("text", &self.text),
        ] {
            if !v.trim().is_empty() {
                parts.push(format!("{k}={}", layout::encode(v.trim())));
            }
        }
        parts.join("&")
    }
}

//! The account's targets as the pages read them (all of them, one by the id
//! in a path, where one delivers to) and the query the target pages share;
//! the pages are in `target_pages`, the actions on one in `target_actions`.

use serde::Deserialize;

use super::{session::Session, PortalError, PortalResult};
use crate::{
    domain::{
        ids::TargetId,
        target::{Target, TargetConfig},
    },
    service::{Reads, ServiceResult},
    state::AppState,
    store::TargetCursor,
};

/// Every target of the account, newest first.
pub async fn all_targets(reads: Reads<'_>) -> ServiceResult<Vec<Target>> {
    let mut all = Vec::new();
    let mut after: Option<TargetCursor> = None;
    loop {
        let page = reads.targets(after.as_ref(), 1000).await?;
        let done = page.len() < 1000;
        after = page.last().map(TargetCursor::after);
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

pub async fn load(state: &AppState, session: &Session, id: &str) -> PortalResult<Target> {
    let id: TargetId = id.parse().map_err(|_| PortalError::NotFound)?;
    session
        .reads(state)
        .target(&id)
        .await?
        .ok_or(PortalError::NotFound)
}

/// Where a target delivers to, in one line.
pub fn destination(config: &TargetConfig) -> &str {
    match config {
        TargetConfig::Webhook(w) => &w.url,
        TargetConfig::Sqs(s) => &s.queue_url,
        TargetConfig::Sns(s) => &s.topic_arn,
        TargetConfig::Pull(_) => "received by its consumers",
    }
}

/// The target pages' query: a notice after an action (with its count), and
/// the type a new target's form starts with.
#[derive(Debug, Default, Deserialize)]
pub struct NoticeQuery {
    pub notice: Option<String>,
    pub n: Option<u64>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

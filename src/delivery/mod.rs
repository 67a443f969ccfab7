//! Delivery to targets: one attempt in, one classified result out.

pub mod signing;
pub mod ssrf;
pub mod webhook;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::{
    domain::{
        ids::{MessageId, TargetId},
        retry::AttemptOutcome,
        target::TargetConfig,
        time,
    },
    store::Claimed,
};

/// The JSON body every target receives (API.md §5).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope<'a> {
    pub message_id: &'a MessageId,
    pub target_id: &'a TargetId,
    pub original_delivery_time: String,
    pub delivery_time: String,
    pub payload: &'a str,
}

impl<'a> Envelope<'a> {
    pub fn new(claimed: &'a Claimed, now: DateTime<Utc>) -> Self {
        Self {
            message_id: &claimed.id,
            target_id: &claimed.target_id,
            original_delivery_time: time::format(&claimed.delivery_time),
            delivery_time: time::format(&now),
            payload: &claimed.payload,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("envelopes serialize")
    }
}

/// What one attempt came to, before the ladder decides what follows.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub outcome: AttemptOutcome,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub response_body: Option<String>,
}

impl Delivered {
    pub fn failure(outcome: AttemptOutcome, error: impl Into<String>) -> Self {
        Self {
            outcome,
            status_code: None,
            error: Some(error.into()),
            response_body: None,
        }
    }
}

/// Holds the long-lived clients; one per process, shared by every delivery.
pub struct Deliverer {
    webhook: webhook::WebhookClient,
}

impl Deliverer {
    pub fn new(webhook: webhook::WebhookClient) -> Self {
        Self { webhook }
    }

    pub async fn deliver(&self, claimed: &Claimed) -> Delivered {
        let envelope = Envelope::new(claimed, time::now());
        match &claimed.target {
            TargetConfig::Webhook(config) => {
                self.webhook
                    .deliver(config, &claimed.id, &envelope.to_bytes())
                    .await
            }
            TargetConfig::Sqs(_) | TargetConfig::Sns(_) => Delivered::failure(
                AttemptOutcome::RetryableFailure,
                "SQS and SNS delivery is not available in this version",
            ),
        }
    }
}

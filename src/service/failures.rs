//! Failed token requests counted in the database, so that every instance
//! holds back the same clients and addresses (docs/api.md#abuse-limits):
//! `auth.token_attempts` failures per client id, five times as many per
//! address, within `auth.token_window`. Each instance's memory
//! (`limits::api`) still answers a flood at once, before any query; the
//! database makes N instances count as one. Keys are hashes: a client id or
//! an address is never stored as sent.

use std::{net::IpAddr, time::Duration};

use sha2::{Digest, Sha256};
use tracing::warn;

use super::Service;

fn key(kind: &str, value: &str) -> String {
    let digest = Sha256::digest(value.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{kind}:{hex}")
}

impl Service {
    /// How long token requests for `client_id` or from `address` are held
    /// back by the failures all instances counted; None when they are not
    /// (or when the count cannot be read: the memory limits still hold).
    pub async fn token_held(&self, client_id: &str, address: IpAddr) -> Option<Duration> {
        let (attempts, window) = (
            self.config.auth.token_attempts,
            self.config.auth.token_window,
        );
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let now = self.now().timestamp_millis();
        let keys = [
            key("client", client_id),
            key("address", &address.to_string()),
        ];
        let counts = match self
            .store
            .token_failures(&keys, now.saturating_sub(window_ms))
            .await
        {
            Ok(counts) => counts,
            Err(e) => {
                warn!(error = %e, "reading the failed token requests failed");
                return None;
            }
        };
        let limits = [u64::from(attempts), u64::from(attempts).saturating_mul(5)];
        counts
            .into_iter()
            .zip(limits)
            .filter(|((n, _), limit)| n >= limit)
            .map(|((_, oldest), _)| {
                // Free again once the oldest failure leaves the window.
                let free_at = oldest.unwrap_or(now).saturating_add(window_ms);
                Duration::from_millis(u64::try_from(free_at - now).unwrap_or(0))
                    .max(Duration::from_secs(1))
            })
            .max()
    }

    /// Counts a failed token request (for a client id, when one was given)
    /// where every instance sees it.
    pub async fn token_failed(&self, client_id: Option<&str>, address: IpAddr) {
        let mut keys = vec![key("address", &address.to_string())];
        keys.extend(client_id.map(|id| key("client", id)));
        let now = self.now().timestamp_millis();
        if let Err(e) = self.store.add_token_failure(&keys, now).await {
            warn!(error = %e, "counting a failed token request failed");
        }
    }
}

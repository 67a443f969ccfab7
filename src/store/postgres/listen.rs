//! Forwards `NOTIFY dispatch_wake` from other instances to this sweeper.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::{postgres::PgListener, PgPool};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::WAKE_CHANNEL;
use crate::wake::Wake;

pub async fn forward_wakeups(pool: PgPool, wake: Arc<Wake>, shutdown: CancellationToken) {
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot listen for wake-ups; retrying");
                if wait(&shutdown, Duration::from_secs(1)).await {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = listener.listen(WAKE_CHANNEL).await {
            warn!(error = %e, "LISTEN failed; retrying");
            if wait(&shutdown, Duration::from_secs(1)).await {
                return;
            }
            continue;
        }
        // Anything announced while we were not listening: look now.
        wake.now();
        loop {
            tokio::select! {
                n = listener.try_recv() => match n {
                    // The payload is the due time in milliseconds since the epoch.
                    Ok(Some(n)) => match n.payload().parse().ok().and_then(DateTime::<Utc>::from_timestamp_millis) {
                        Some(at) => wake.due(at),
                        None => wake.now(),
                    },
                    // The connection was lost; sqlx reconnects on the next call.
                    Ok(None) => wake.now(),
                    Err(e) => {
                        warn!(error = %e, "wake-up listener failed; reconnecting");
                        break;
                    }
                },
                _ = shutdown.cancelled() => return,
            }
        }
        if wait(&shutdown, Duration::from_millis(500)).await {
            return;
        }
    }
}

async fn wait(shutdown: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = shutdown.cancelled() => true,
    }
}

//! Connecting to PostgreSQL and applying the migrations.

use std::{sync::Arc, time::Duration};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::{map_err, PgStore};
use crate::{
    auth::sealing::Sealer,
    store::{StoreError, StoreResult},
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

impl PgStore {
    pub async fn connect(
        url: &str,
        max_connections: u32,
        wake_horizon: Duration,
    ) -> StoreResult<Self> {
        let options: PgConnectOptions = url.parse().map_err(StoreError::Unavailable)?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(options.application_name("dispatch"))
            .await
            .map_err(map_err)?;
        Ok(Self {
            pool,
            wake_horizon: chrono::TimeDelta::from_std(wake_horizon)
                .unwrap_or(chrono::TimeDelta::seconds(5)),
            sealer: None,
        })
    }

    /// Secrets written from now on are sealed with `sealer`'s current key;
    /// secrets sealed under it or its previous keys read.
    pub fn with_sealer(mut self, sealer: Sealer) -> Self {
        self.sealer = Some(Arc::new(sealer));
        self
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await.map_err(StoreError::Migrate)
    }
}

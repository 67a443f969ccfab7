//! Connecting to PostgreSQL and applying the migrations.

use std::{sync::Arc, time::Duration};

use sqlx::{
    migrate::MigrateDatabase,
    postgres::{PgConnectOptions, PgPoolOptions},
    PgPool, Postgres,
};

use super::{map_err, PgStore};
use crate::{
    domain::limits::Limits,
    sealing::Sealer,
    store::{StoreError, StoreResult},
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

impl PgStore {
    /// Connects, and creates the database first when it does not exist and
    /// the server lets this user create it (as `createdb` would); when it
    /// may not, the error says how to create it.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        wake_horizon: Duration,
    ) -> StoreResult<Self> {
        let options: PgConnectOptions = url.parse().map_err(StoreError::Unavailable)?;
        // The migrations' `IF NOT EXISTS` and the like make notices that
        // tell an operator nothing: only warnings and errors come back.
        let options = options
            .application_name("dispatch")
            .options([("client_min_messages", "warning")]);
        let pool = match open_pool(&options, max_connections).await {
            Err(e) if is_missing_database(&e) => {
                create_database(url, &options).await?;
                open_pool(&options, max_connections).await
            }
            other => other,
        }
        .map_err(map_err)?;
        Ok(Self {
            pool,
            wake_horizon: chrono::TimeDelta::from_std(wake_horizon)
                .unwrap_or(chrono::TimeDelta::seconds(5)),
            sealer: None,
            limits: Limits::default(),
            instance: crate::store::sql::keeps::new_instance(),
        })
    }

    /// Secrets written from now on are sealed with `sealer`'s current key;
    /// secrets sealed under it or its previous keys read.
    pub fn with_sealer(mut self, sealer: Sealer) -> Self {
        self.sealer = Some(Arc::new(sealer));
        self
    }

    /// Refuses writes that would take an account past `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await.map_err(StoreError::Migrate)
    }
}

async fn open_pool(options: &PgConnectOptions, max_connections: u32) -> sqlx::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options.clone())
        .await
}

/// SQLSTATE 3D000, invalid_catalog_name: the database does not exist.
fn is_missing_database(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("3D000"))
}

/// Creates the database `options` names, from the server's maintenance
/// database. Another instance creating it at the same moment is no error.
async fn create_database(url: &str, options: &PgConnectOptions) -> StoreResult<()> {
    let name = options.get_database().unwrap_or(options.get_username());
    match Postgres::create_database(url).await {
        Ok(()) => {
            tracing::info!(database = name, "created the database, which did not exist");
            Ok(())
        }
        // 42P04, duplicate_database: created meanwhile.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P04") => Ok(()),
        Err(e) => {
            let why = match &e {
                sqlx::Error::Database(db) => db.message().to_string(),
                other => other.to_string(),
            };
            let (host, port, user) = (
                options.get_host(),
                options.get_port(),
                options.get_username(),
            );
            Err(StoreError::Setup(format!(
                "the database \"{name}\" does not exist on {host}:{port}, and it could not be \
                 created as user \"{user}\" ({why}). Create it as a user who may, for \
                 example `createdb -h {host} -p {port} -U postgres -O {user} {name}` (the \
                 database owned by \"{user}\"), or point DATABASE_URL at a database that exists"
            )))
        }
    }
}

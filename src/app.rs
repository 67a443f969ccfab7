//! Start-up and graceful shutdown.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::info;

use crate::{
    api,
    auth::tokens::TokenService,
    clock::{Clock, SystemClock},
    config::Config,
    delivery::{aws::AwsClients, guard::GuardedResolver, webhook::WebhookClient, Deliverer},
    domain::retry::RetryPolicy,
    limits::{ApiLimits, SignInLimits},
    metrics, portal, retention,
    service::{GroupCommits, Service},
    state::AppState,
    store::{postgres::PgStore, sqlite::SqliteStore, Store},
    sweeper::Sweeper,
};

/// Where the embedded store lives when no database is configured.
pub const EMBEDDED_PATH: &str = "data/dispatch.db";

/// An opened store: PostgreSQL (several instances) or the embedded SQLite (one process).
pub enum Backend {
    Postgres(PgStore),
    Sqlite(SqliteStore),
}

impl Backend {
    /// The store, and the PostgreSQL pool when there is one (for LISTEN).
    pub fn into_parts(self) -> (Arc<dyn Store>, Option<sqlx::PgPool>) {
        match self {
            Backend::Postgres(s) => {
                let pool = s.pool().clone();
                (Arc::new(s), Some(pool))
            }
            Backend::Sqlite(s) => (Arc::new(s), None),
        }
    }

    pub fn is_embedded(&self) -> bool {
        matches!(self, Backend::Sqlite(_))
    }
}

/// Opens the configured store to serve it and applies its migrations:
/// `postgres://…`, `sqlite://PATH`, or (empty) the embedded store under
/// `./data`, which then admits no second serving process. Target secrets
/// and signing keys are sealed when `secrets.encryption_key` is set.
pub async fn open_store(config: &Config) -> anyhow::Result<Backend> {
    open_store_as(config, true).await
}

/// Opens the configured store for an admin command (clients, users,
/// targets, secrets), which may run while an instance serves the same
/// embedded store.
pub async fn open_store_admin(config: &Config) -> anyhow::Result<Backend> {
    open_store_as(config, false).await
}

async fn open_store_as(config: &Config, serving: bool) -> anyhow::Result<Backend> {
    let url = config.database.url.trim();
    let sealer = config.secrets.sealer()?;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut store = PgStore::connect(
            url,
            config.database.max_connections,
            config.sweeper.poll_interval,
        )
        .await
        .map_err(|e| connect_error(url, e))?;
        store.migrate().await.context("applying migrations")?;
        store = store.with_limits(config.limits);
        if let Some(sealer) = sealer {
            store = store.with_sealer(sealer);
        }
        return Ok(Backend::Postgres(store));
    }
    let path = if url.is_empty() {
        std::path::PathBuf::from(EMBEDDED_PATH)
    } else {
        SqliteStore::path_from_url(url).with_context(|| {
            format!("database.url must be postgres://… or sqlite://PATH, not `{url}`")
        })?
    };
    let opened = if serving {
        SqliteStore::open(&path).await
    } else {
        SqliteStore::open_admin(&path).await
    };
    let mut store =
        opened.with_context(|| format!("opening the embedded store {}", path.display()))?;
    store = store.with_limits(config.limits);
    if let Some(sealer) = sealer {
        store = store.with_sealer(sealer);
    }
    Ok(Backend::Sqlite(store))
}

/// Why PostgreSQL could not be opened, as one sentence with what to check:
/// the server's own message once (a database error's text is both the
/// error and its source, which `{:#}` would print twice), and the address
/// without its password.
fn connect_error(url: &str, e: crate::store::StoreError) -> anyhow::Error {
    use crate::store::StoreError;
    let where_ = redacted_url(url);
    let (sqlx_error, hint) = match &e {
        StoreError::Setup(text) => return anyhow::anyhow!("{text}"),
        StoreError::Unavailable(s) | StoreError::Database(s) => {
            let hint = match s {
                sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("28")) => {
                    "check the user and password in DATABASE_URL"
                }
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => {
                    "is PostgreSQL running there, and does it accept TCP connections?"
                }
                _ => "check DATABASE_URL",
            };
            (s, hint)
        }
        _ => return anyhow::Error::new(e).context(format!("connecting to PostgreSQL at {where_}")),
    };
    let text = match sqlx_error {
        sqlx::Error::Database(db) => db.message().to_string(),
        other => other.to_string(),
    };
    anyhow::anyhow!("connecting to PostgreSQL at {where_}: {text}; {hint}")
}

/// A database URL to show: without its password, in the user part or in a
/// `password` query parameter; one that does not parse is not shown at all.
pub fn redacted_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "(database.url, which does not parse as a URL)".into();
    };
    let _ = parsed.set_password(None);
    if parsed.query().is_some() {
        let kept: Vec<(String, String)> = parsed
            .query_pairs()
            .filter(|(k, _)| !k.to_ascii_lowercase().contains("password"))
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if kept.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(kept);
        }
    }
    parsed.to_string()
}

/// A running instance: API, sweeper, schedules, retention, wake-up listener.
pub struct Running {
    pub addr: SocketAddr,
    pub state: AppState,
    /// The whole store: the doors reach it only through the use cases.
    pub store: Arc<dyn Store>,
    pub sweeper: Sweeper,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Running {
    /// Asks every part to stop and waits for them: no new claims, attempts in
    /// flight finish and are recorded.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Stops at once, as a crash would: nothing is finished or recorded.
    pub fn abort(self) {
        self.shutdown.cancel();
    }

    pub fn token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub async fn wait(self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

pub async fn start(config: Config) -> anyhow::Result<Running> {
    let store = open_store(&config).await?;
    let listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    start_with(config, store, listener).await
}

pub async fn start_with(
    config: Config,
    backend: Backend,
    listener: TcpListener,
) -> anyhow::Result<Running> {
    let addr = listener.local_addr()?;
    let wake = Arc::new(crate::wake::Wake::default());
    if let Backend::Sqlite(s) = &backend {
        s.wakes(wake.clone());
    }
    let (store, pool) = backend.into_parts();
    let config = Arc::new(config);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let tokens = TokenService::new(store.clone(), &config.auth, clock.now())
        .await
        .context("loading token signing keys")?;
    // What the sweeper claims ahead of its time; the service takes messages
    // back from it before their attempt.
    let held = Arc::new(crate::sweeper::ahead::Held::default());
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let commits = GroupCommits::start(
        store.clone(),
        &crate::service::events::render,
        &tasks,
        shutdown.clone(),
    );
    let state = AppState {
        service: Service::new(
            store.clone(),
            config.clone(),
            wake.clone(),
            held.clone(),
            Some(Arc::new(commits)),
            clock.clone(),
        ),
        tokens: Arc::new(tokens),
        limits: Arc::new(ApiLimits::new(&config)),
        sign_ins: Arc::new(SignInLimits::new(&config.portal)),
        config: config.clone(),
        metrics: metrics::handle(),
    };
    // This instance is noted before its sweeper claims anything: a lease
    // whose token names no instance serving is given back (see `instances`).
    let instances = crate::instances::Instances {
        store: store.clone(),
        clock: clock.clone(),
        leases_reach: config.sweeper.lease + config.sweeper.claim_ahead + Duration::from_secs(1),
        noted: Arc::new(crate::instances::Noted::default()),
    };
    match instances.note(true).await {
        Ok(seen) => state.limits.set_instances(seen.serving),
        Err(e) => tracing::warn!(error = %e, "noting this instance as serving failed"),
    }
    tasks.spawn(
        instances
            .clone()
            .run(state.limits.clone(), wake.clone(), shutdown.clone()),
    );
    let max_timeout = config
        .sweeper
        .lease
        .saturating_sub(Duration::from_secs(1))
        .max(Duration::from_millis(100));
    let deliverer = Deliverer::new(
        WebhookClient::new(
            config.webhook.timeout,
            max_timeout,
            config.webhook.connect_timeout,
            config.webhook.allow_private_networks,
            config.guard_names(),
        ),
        AwsClients::new(
            config.aws.timeout.min(max_timeout),
            (!config.webhook.allow_private_networks)
                .then(|| GuardedResolver::new(config.guard_names())),
            config.aws.allow_default_credentials,
        ),
        config.aws.sqs_batch,
        clock.clone(),
    );
    let sweeper = Sweeper {
        store: store.clone(),
        deliverer: Arc::new(deliverer),
        policy: RetryPolicy::from(&config.retry),
        config: config.sweeper.clone(),
        wake: wake.clone(),
        held,
        clock: clock.clone(),
        noted: instances.noted.clone(),
    };

    tasks.spawn(crate::serve::serve(
        listener,
        router(state.clone()),
        crate::serve::Connections::from_config(&config.server),
        shutdown.clone(),
    ));
    tasks.spawn(crate::schedules::run(
        store.clone(),
        clock.clone(),
        wake.clone(),
        config.schedules.clone(),
        shutdown.clone(),
    ));
    if config.sweeper.enabled {
        tasks.spawn(sweeper.clone().run(shutdown.clone()));
    }
    // Other instances' announcements wake this sweeper and the consumers
    // waiting here on pull targets.
    if let Some(pool) = pool {
        tasks.spawn(crate::store::postgres::listen::forward_wakeups(
            pool,
            wake.clone(),
            shutdown.clone(),
        ));
    }
    let pulls = state.service.pull_watch().clone();
    tasks.spawn(pulls.clone().run(
        store.clone(),
        wake.clone(),
        clock.clone(),
        config.sweeper.poll_interval,
        shutdown.clone(),
    ));
    tasks.spawn(pulls.janitor(
        store.clone(),
        wake.clone(),
        clock.clone(),
        config.sweeper.poll_interval,
        shutdown.clone(),
    ));
    tasks.spawn(retention::run(
        store.clone(),
        clock,
        config.retention.clone(),
        config.auth.token_window,
        shutdown.clone(),
    ));
    info!(%addr, sweeper = config.sweeper.enabled, "dispatch is serving");
    Ok(Running {
        addr,
        state,
        store,
        sweeper,
        shutdown,
        tasks,
    })
}

/// Both doors, the API and the portal, with the fallbacks and the layers
/// every request passes through.
pub fn router(state: AppState) -> axum::Router {
    use axum::{extract::DefaultBodyLimit, extract::Request, http::HeaderName};
    use tower_http::{
        request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
        trace::TraceLayer,
    };
    let request_id = HeaderName::from_static("x-request-id");
    let max_body = state.config.server.max_body_bytes;
    api::routes()
        .merge(portal::router(state.clone()))
        .fallback(api::ops::not_found)
        .method_not_allowed_fallback(api::ops::method_not_allowed)
        .layer(axum::middleware::from_fn(
            api::edge::refuse_control_characters,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request| {
                let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
                tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

//! `dispatch serve` (the default command): the API, the portal and the
//! delivery of messages, with a development client on a first start.

use std::net::SocketAddr;

use clap::Args;

use super::common::refused;
use crate::{app, config::Config, domain::ids::AccountId};

/// `dispatch serve`.
#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// The address to listen on, as HOST:PORT (127.0.0.1:8080,
    /// 0.0.0.0:8080). Without it: server.listen from the configuration
    /// (the --config file, or DISPATCH_SERVER__LISTEN), else
    /// 127.0.0.1:8080. Port 0 takes a free port, which the log names.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
}

pub(super) async fn serve(config: Config) -> anyhow::Result<()> {
    match config.secrets.sealer()? {
        None => tracing::warn!(
            "secrets are stored unencrypted; set secrets.encryption_key (or \
             secrets.encryption_key_file) to encrypt target secrets and token-signing keys at rest"
        ),
        Some(sealer) => tracing::info!(
            key_id = sealer.current_key_id(),
            "secrets at rest are encrypted"
        ),
    }
    // The address first: a second `serve` beside a running one (a quick
    // start left running, say) fails here, before it touches any store.
    let listener = bind(config.server.listen).await?;
    let backend = app::open_store(&config).await?;
    let url = config.database.url.trim();
    let embedded_default = backend.is_embedded() && url.is_empty();
    let store_name = if embedded_default {
        format!("Embedded store at ./{}", app::EMBEDDED_PATH)
    } else if backend.is_embedded() {
        format!("Embedded store at {url}")
    } else {
        format!("PostgreSQL at {}", app::redacted_url(url))
    };
    let running = app::start_with(config, backend, listener).await?;
    offer_first_client(&running, embedded_default, &store_name).await?;
    app::shutdown_signal().await;
    tracing::info!("shutting down: finishing attempts in flight");
    running.shutdown().await;
    Ok(())
}

/// Binds the API's address, saying what to do when it is taken.
async fn bind(addr: std::net::SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "{addr} is in use: another program listens there (another `dispatch serve`?). \
                 Stop it, or serve on another address with --listen or server.listen \
                 (DISPATCH_SERVER__LISTEN)"
            )
        } else {
            anyhow::Error::new(e).context(format!("binding {addr}"))
        }
    })
}

/// The account the development client acts for, here and in the README.
pub const DEMO_ACCOUNT: &str = "demo";

/// On a first start (a store without clients), a client with every scope,
/// its credentials printed once: for trying Dispatch out. On the embedded
/// default store always; on any other store only for a person at a
/// terminal, since a supervised service's standard error is a log, where a
/// secret has no place: there it says how to make one instead.
async fn offer_first_client(
    running: &app::Running,
    embedded_default: bool,
    store_name: &str,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if running.state.service.has_clients().await.map_err(refused)? {
        return Ok(());
    }
    if !embedded_default && !std::io::stderr().is_terminal() {
        tracing::info!(
            "no OAuth clients yet: create one with `dispatch clients create --account NAME --name NAME` \
             run with this instance's configuration (DATABASE_URL)"
        );
        return Ok(());
    }
    let demo = AccountId::parse(DEMO_ACCOUNT).expect("a valid account name");
    let client = running
        .state
        .service
        .create_client(&demo, "development", &[])
        .await
        .map_err(refused)?;
    let (client_id, secret) = (client.record.client_id, client.secret);
    let base = format!("http://{}", running.addr);
    eprintln!(
        "\n  {store_name}, first start: created a development client for the account `{DEMO_ACCOUNT}`.\n  \
         It is shown this once:\n\n    client id:     {client_id}\n    client secret: {secret}\n\n  \
         Get a token:  curl -s -u '{client_id}:{secret}' -d grant_type=client_credentials {base}/oauth/token\n"
    );
    Ok(())
}

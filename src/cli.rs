//! The command line: `serve` (default), `migrate`, `clients create`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::{
    app,
    auth::{parse_scopes, secrets, SCOPES},
    config::Config,
    store::{ClientRecord, Store},
};

#[derive(Debug, Parser)]
#[command(
    name = "dispatch",
    version,
    about = "Scheduled delivery to webhooks, Amazon SQS and Amazon SNS"
)]
pub struct Cli {
    /// A TOML file layered over config/default.toml (and under DISPATCH_* variables).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API and deliver messages (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Manage OAuth 2 clients.
    #[command(subcommand)]
    Clients(ClientsCommand),
}

#[derive(Debug, Subcommand)]
pub enum ClientsCommand {
    /// Create a client; prints its id and secret once, as JSON.
    Create(CreateClient),
}

#[derive(Debug, Args)]
pub struct CreateClient {
    /// The account the client acts for (created on first use).
    #[arg(long)]
    pub account: String,
    /// A name to recognise the client by.
    #[arg(long)]
    pub name: String,
    /// A scope to grant; repeat for several. Default: all four.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(cli.config.as_deref())?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(config).await,
        Command::Migrate => {
            app::open_store(&config).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Clients(ClientsCommand::Create(args)) => create_client(config, args).await,
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let running = app::start(config).await?;
    app::shutdown_signal().await;
    tracing::info!("shutting down: finishing attempts in flight");
    running.shutdown().await;
    Ok(())
}

async fn create_client(config: Config, args: CreateClient) -> anyhow::Result<()> {
    let account = args.account.trim();
    if account.is_empty() || account.len() > 200 {
        anyhow::bail!("--account must be 1 to 200 characters");
    }
    let scopes = if args.scopes.is_empty() {
        SCOPES.iter().map(|s| s.to_string()).collect()
    } else {
        parse_scopes(&args.scopes.join(" ")).map_err(|s| {
            anyhow::anyhow!("unknown scope {s}; known scopes: {}", SCOPES.join(", "))
        })?
    };
    let store = app::open_store(&config).await?;
    let (client_id, secret) = secrets::generate_client_credentials();
    let record = ClientRecord {
        client_id: client_id.clone(),
        account: account.to_string(),
        name: args.name,
        secret_hash: secrets::hash_secret(&secret),
        scopes: scopes.clone(),
    };
    store
        .create_client(&record)
        .await
        .context("saving the client")?;
    println!(
        "{}",
        json!({"clientId": client_id, "clientSecret": secret, "account": account, "scopes": scopes})
    );
    Ok(())
}

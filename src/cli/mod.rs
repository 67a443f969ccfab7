//! The command line: `serve` (default), `migrate`, `clients
//! create|list|revoke`, `messages list|get|cancel|reschedule|redrive`,
//! `targets create|list|get|disable|enable`, `schedules list`, `users
//! create|list`, `secrets rotate`, `listen` (docs/operations.md#commands).
//! Each command lives in the module of its resource below.

mod clients;
mod common;
mod messages;
mod people;
mod schedules;
mod secrets;
mod serve;
mod store_line;
mod table;
mod targets;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{app, config::Config};

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
    /// Serve the API and the portal, and deliver messages (the default).
    Serve(serve::ServeArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Manage OAuth 2 clients: the credentials programs get tokens with.
    #[command(subcommand)]
    Clients(clients::ClientsCommand),
    /// An account's messages: list, show, cancel, reschedule, redrive.
    #[command(subcommand)]
    Messages(messages::MessagesCommand),
    /// An account's targets: create (for provisioning), list, show,
    /// disable, enable.
    #[command(subcommand)]
    Targets(targets::TargetsCommand),
    /// An account's recurring schedules.
    #[command(subcommand)]
    Schedules(schedules::SchedulesCommand),
    /// The people who sign in to the web portal.
    #[command(subcommand)]
    Users(people::UsersCommand),
    /// Secrets at rest (target secrets, token-signing keys).
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// Receive webhooks here and print them, checking their signatures: a
    /// target to try Dispatch with, or to see what a target receives.
    Listen(crate::listen::ListenArgs),
}

impl Default for Command {
    fn default() -> Self {
        Command::Serve(serve::ServeArgs::default())
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(Command::Listen(args)) = cli.command {
        // A receiver needs no configuration and no database.
        return crate::listen::listen(args).await;
    }
    let config = Config::load(cli.config.as_deref())?;
    run_configured(cli.command, config).await
}

/// A command with its configuration loaded: what `run` does next. A test
/// runs a command here with a configuration only code can give (its own
/// resolver, see `Config::resolver`).
pub async fn run_configured(command: Option<Command>, mut config: Config) -> anyhow::Result<()> {
    match command.unwrap_or_default() {
        Command::Serve(args) => {
            // The flag wins over the configuration.
            if let Some(listen) = args.listen {
                config.server.listen = listen;
            }
            serve::serve(config).await
        }
        Command::Migrate => {
            eprintln!("{}", store_line::describe(&config));
            let _ = app::open_store(&config).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Clients(command) => clients::run(config, command).await,
        Command::Messages(command) => messages::run(config, command).await,
        Command::Targets(command) => targets::run(config, command).await,
        Command::Schedules(command) => schedules::run(config, command).await,
        Command::Users(command) => people::run(config, command).await,
        Command::Secrets(command) => secrets::run(config, command).await,
        Command::Listen(_) => unreachable!("answered above"),
    }
}

//! The command line: `serve` (default), `migrate`, `clients
//! create|list|revoke`, `messages list|get|cancel|reschedule|redrive`,
//! `targets create|list|get|disable|enable`, `schedules list`, `users
//! create|list`, `secrets rotate`, `listen` (docs/operations.md#commands).
//! The operator commands live in the modules below, one per resource.

mod common;
mod messages;
mod people;
mod schedules;
mod store_line;
mod table;
mod targets;

use crate::service::Actor;
use std::{net::SocketAddr, path::PathBuf};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::{
    app,
    auth::{parse_scopes, SCOPES},
    config::Config,
    domain::ids::AccountId,
    service::{identities::MIN_PASSWORD, Service, ServiceError},
    store::{portal::Role, ClientSummary},
    wire::TargetOut,
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
    /// Serve the API and the portal, and deliver messages (the default).
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Manage OAuth 2 clients: the credentials programs get tokens with.
    #[command(subcommand)]
    Clients(ClientsCommand),
    /// An account's messages: list, show, cancel, reschedule, redrive.
    #[command(subcommand)]
    Messages(messages::MessagesCommand),
    /// An account's targets: create (for provisioning), list, show,
    /// disable, enable.
    #[command(subcommand)]
    Targets(TargetsCommand),
    /// An account's recurring schedules.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// The people who sign in to the web portal.
    #[command(subcommand)]
    Users(UsersCommand),
    /// Secrets at rest (target secrets, token-signing keys).
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Receive webhooks here and print them, checking their signatures: a
    /// target to try Dispatch with, or to see what a target receives.
    Listen(crate::listen::ListenArgs),
}

impl Default for Command {
    fn default() -> Self {
        Command::Serve(ServeArgs::default())
    }
}

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

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List the account's schedules, newest first, a page at a time.
    List(schedules::ListSchedules),
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Re-encrypt every stored secret under secrets.encryption_key, while
    /// instances keep serving; then the keys in secrets.previous_keys can go.
    Rotate,
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a portal user. The password is prompted for on a terminal, read
    /// from standard input with --password-stdin, or else generated and printed once.
    Create(CreateUser),
    /// List the account's portal users (email, role, since when), oldest first.
    List(people::ListUsers),
}

#[derive(Debug, Args)]
pub struct CreateUser {
    /// The account whose data the user sees (created on first use).
    #[arg(long)]
    pub account: String,
    /// The email the person signs in with (stored lower-cased; one sign-in
    /// per email across all accounts).
    #[arg(long)]
    pub email: String,
    /// Read the password from the first line of standard input.
    #[arg(long, conflicts_with = "generate_password")]
    pub password_stdin: bool,
    /// Generate a password and print it once, even on a terminal.
    #[arg(long)]
    pub generate_password: bool,
    /// What the person may do: viewer (reads), operator (also cancels,
    /// reschedules, redrives, replays) or admin (also targets and people).
    #[arg(long, default_value = "admin", value_parser = ["viewer", "operator", "admin"])]
    pub role: String,
}

#[derive(Debug, Subcommand)]
pub enum TargetsCommand {
    /// Create a target; prints it as JSON (a generated signing secret in full, once).
    Create(CreateTarget),
    /// List the account's targets, newest first, a page at a time.
    List(targets::ListTargets),
    /// Show one target; its secrets show as ***.
    Get(targets::OneTarget),
    /// Disable a target: it receives nothing, and its messages wait,
    /// Scheduled, without using up their retries.
    Disable(targets::OneTarget),
    /// Enable a target: its waiting messages are delivered, oldest first.
    Enable(targets::OneTarget),
}

#[derive(Debug, Args)]
pub struct CreateTarget {
    /// The account the target belongs to (created on first use).
    #[arg(long)]
    pub account: String,
    /// A name to recognise the target by (--unless-exists looks it up).
    #[arg(long)]
    pub name: String,
    /// What it delivers to: webhook, sqs or sns.
    #[arg(long = "type", value_name = "TYPE")]
    pub kind: String,
    /// The target's config as JSON, as in POST /targets.
    #[arg(long = "target-config", value_name = "JSON")]
    pub target_config: String,
    /// When the account has a target of this name already, print it and
    /// create none: for provisioning that runs more than once.
    #[arg(long)]
    pub unless_exists: bool,
}

#[derive(Debug, Subcommand)]
pub enum ClientsCommand {
    /// Create a client; prints its id and secret once, as JSON.
    Create(CreateClient),
    /// List an account's clients, revoked ones too: a table on a terminal,
    /// else a JSON array (no secrets, no hashes).
    List(ListClients),
    /// Revoke a client: its token requests are refused at once, the tokens
    /// it holds within seconds on every instance.
    Revoke(RevokeClient),
}

#[derive(Debug, Args)]
pub struct ListClients {
    /// The account whose clients to list.
    #[arg(long)]
    pub account: String,
    /// Print the JSON array, even on a terminal.
    #[arg(long, conflicts_with = "table")]
    pub json: bool,
    /// Print the table, even when standard output is not a terminal.
    #[arg(long)]
    pub table: bool,
}

#[derive(Debug, Args)]
pub struct RevokeClient {
    /// The id of the client to revoke.
    #[arg(value_name = "CLIENT_ID")]
    pub client_id: String,
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
    /// Print shell `export` lines (DISPATCH_CLIENT_ID, DISPATCH_CLIENT_SECRET)
    /// instead of JSON, for `eval "$(dispatch clients create … --shell)"`.
    #[arg(long)]
    pub shell: bool,
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
            serve(config).await
        }
        Command::Migrate => {
            eprintln!("{}", store_line::describe(&config));
            let _ = app::open_store(&config).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Clients(ClientsCommand::Create(args)) => create_client(config, args).await,
        Command::Clients(ClientsCommand::List(args)) => list_clients(config, args).await,
        Command::Clients(ClientsCommand::Revoke(args)) => revoke_client(config, args).await,
        Command::Messages(command) => messages::run(config, command).await,
        Command::Targets(TargetsCommand::Create(args)) => create_target(config, args).await,
        Command::Targets(TargetsCommand::List(args)) => targets::list(config, args).await,
        Command::Targets(TargetsCommand::Get(args)) => targets::get(config, args).await,
        Command::Targets(TargetsCommand::Disable(args)) => {
            targets::set_enabled(config, args, false).await
        }
        Command::Targets(TargetsCommand::Enable(args)) => {
            targets::set_enabled(config, args, true).await
        }
        Command::Schedules(SchedulesCommand::List(args)) => schedules::list(config, args).await,
        Command::Users(UsersCommand::Create(args)) => create_user(config, args).await,
        Command::Users(UsersCommand::List(args)) => people::list(config, args).await,
        Command::Secrets(SecretsCommand::Rotate) => rotate_secrets(config).await,
        Command::Listen(_) => unreachable!("answered above"),
    }
}

async fn rotate_secrets(config: Config) -> anyhow::Result<()> {
    let Some(sealer) = config.secrets.sealer()? else {
        anyhow::bail!(
            "secrets rotate needs secrets.encryption_key (or secrets.encryption_key_file): \
             the key to encrypt every stored secret under"
        );
    };
    let current_key = sealer.current_key_id().to_string();
    let done = admin_service(config)
        .await?
        .reseal_secrets()
        .await
        .map_err(refused)
        .context("re-encrypting stored secrets")?;
    println!(
        "re-encrypted {} rows under key id {} ({} target secrets, {} token-signing keys)",
        done.targets + done.signing_keys,
        current_key,
        done.targets,
        done.signing_keys
    );
    if done.unsettled > 0 {
        anyhow::bail!(
            "{} rows changed while they were being re-encrypted; is an instance still writing \
             under another key? Give every instance the new key, then run rotate again",
            done.unsettled
        );
    }
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
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

/// A service for an admin command: beside a running `serve`, on the same data.
async fn admin_service(config: Config) -> anyhow::Result<Service> {
    let (store, _) = store_line::open_admin(&config).await?.into_parts();
    Ok(Service::admin(store, std::sync::Arc::new(config)))
}

fn account(arg: &str) -> anyhow::Result<AccountId> {
    AccountId::parse(arg).map_err(|_| anyhow::anyhow!("--account must be 1 to 200 characters"))
}

/// A refusal of a use case, as one line.
fn refused(e: ServiceError) -> anyhow::Error {
    match e {
        ServiceError::Invalid(errors) => invalid(errors),
        other => anyhow::Error::new(other),
    }
}

async fn create_client(config: Config, args: CreateClient) -> anyhow::Result<()> {
    let account = account(&args.account)?;
    let scopes = parse_scopes(&args.scopes.join(" "))
        .map_err(|s| anyhow::anyhow!("unknown scope {s}; known scopes: {}", SCOPES.join(", ")))?;
    let service = admin_service(config).await?;
    let client = service
        .create_client(&account, &args.name, &scopes)
        .await
        .map_err(refused)
        .context("saving the client")?;
    if args.shell {
        // Ids and secrets are URL-safe text: single quotes need no escaping.
        println!("export DISPATCH_CLIENT_ID='{}'", client.record.client_id);
        println!("export DISPATCH_CLIENT_SECRET='{}'", client.secret);
    } else {
        println!(
            "{}",
            json!({"clientId": client.record.client_id, "clientSecret": client.secret,
                   "account": account.as_str(), "scopes": client.record.scopes})
        );
    }
    Ok(())
}

fn invalid(errors: Vec<crate::domain::target::FieldError>) -> anyhow::Error {
    let lines: Vec<String> = errors
        .iter()
        .map(|e| {
            if e.field.is_empty() {
                e.message.clone()
            } else {
                format!("{} {}", e.field, e.message)
            }
        })
        .collect();
    anyhow::anyhow!("invalid: {}", lines.join("; "))
}

fn client_json(c: &ClientSummary) -> serde_json::Value {
    use crate::domain::time::format;
    json!({
        "clientId": c.client_id,
        "name": c.name,
        "account": c.account,
        "scopes": c.scopes,
        "createdAt": format(&c.created_at),
        "revokedAt": c.revoked_at.as_ref().map(format),
    })
}

async fn list_clients(config: Config, args: ListClients) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let clients = admin_service(config)
        .await?
        .clients(args.account.trim())
        .await
        .map_err(refused)
        .context("listing the clients")?;
    // What a script reads (the JSON array) unless a person reads it.
    let as_table = args.table || (!args.json && std::io::stdout().is_terminal());
    if !as_table {
        let out: Vec<serde_json::Value> = clients.iter().map(client_json).collect();
        println!("{}", serde_json::Value::Array(out));
        return Ok(());
    }
    let mut t = table::Table::new(&["CLIENT ID", "NAME", "SCOPES", "CREATED", "REVOKED"]);
    for c in &clients {
        t.row(vec![
            c.client_id.clone(),
            c.name.clone(),
            c.scopes.join(" "),
            table::time(Some(&c.created_at)),
            table::time(c.revoked_at.as_ref()),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

async fn revoke_client(config: Config, args: RevokeClient) -> anyhow::Result<()> {
    let revoked = match admin_service(config)
        .await?
        .revoke_client(&args.client_id)
        .await
    {
        Ok(revoked) => revoked,
        Err(ServiceError::NotFound) => {
            anyhow::bail!("there is no client with the id {}", args.client_id)
        }
        Err(e) => return Err(refused(e).context("revoking the client")),
    };
    println!("{}", client_json(&revoked));
    eprintln!(
        "{} is revoked: its token requests are refused, and its tokens within seconds",
        revoked.client_id
    );
    Ok(())
}

async fn create_target(config: Config, args: CreateTarget) -> anyhow::Result<()> {
    let account = account(&args.account)?;
    let target_config: serde_json::Value = serde_json::from_str(&args.target_config)
        .context("--target-config must be a JSON object")?;
    let spec = crate::wire::target::parse(
        &json!({"name": args.name, "type": args.kind, "config": target_config}),
    )
    .map_err(invalid)?;
    let service = admin_service(config).await?;
    if args.unless_exists {
        if let Some(t) = service
            .target_named(&Actor::operator(account.clone()), &args.name)
            .await
            .map_err(refused)?
        {
            println!("{}", serde_json::to_string(&TargetOut::new(&t))?);
            eprintln!("{} is named {:?} already: nothing created", t.id, t.name);
            return Ok(());
        }
    }
    let saved = service
        .create_target(&Actor::operator(account.clone()), spec)
        .await
        .map_err(refused)?;
    let out = TargetOut::with_generated_secret(&saved.target, saved.generated_secret);
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// The password for a new user and whether it was generated (and must be shown).
fn choose_password(args: &CreateUser) -> anyhow::Result<(String, bool)> {
    use std::io::IsTerminal;
    let generate = || {
        let bytes: [u8; 18] = rand::Rng::random(&mut rand::rng());
        use base64::Engine;
        (
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
            true,
        )
    };
    let chosen = if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the password from standard input")?;
        line.trim_end_matches(['\r', '\n']).to_string()
    } else if args.generate_password || !std::io::stdin().is_terminal() {
        return Ok(generate());
    } else {
        let first = rpassword::prompt_password("Password (empty: generate one): ")?;
        if first.is_empty() {
            return Ok(generate());
        }
        let again = rpassword::prompt_password("Again: ")?;
        if first != again {
            anyhow::bail!("the two passwords differ");
        }
        first
    };
    if chosen.chars().count() < MIN_PASSWORD {
        anyhow::bail!("the password must be at least {MIN_PASSWORD} characters");
    }
    Ok((chosen, false))
}

async fn create_user(config: Config, args: CreateUser) -> anyhow::Result<()> {
    let account = account(&args.account)?;
    let (password, generated) = choose_password(&args)?;
    let service = admin_service(config).await?;
    let role = Role::parse(&args.role).context("the role")?;
    let user = match service
        .create_user(&account, &args.email, &password, role)
        .await
    {
        Ok(user) => user,
        Err(ServiceError::Conflict(_)) => anyhow::bail!(
            "a portal user with the email {} exists already",
            args.email.trim().to_lowercase()
        ),
        // The fields are the command's flags.
        Err(ServiceError::Invalid(errors)) => anyhow::bail!(
            "{}",
            errors
                .iter()
                .map(|e| format!("--{} {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Err(e) => return Err(refused(e)),
    };
    let email = user.email;
    let mut out = json!({"account": account.as_str(), "email": email, "role": user.role.as_str()});
    if generated {
        out["password"] = json!(password);
    }
    println!("{out}");
    eprintln!(
        "{email} can sign in at /portal/login{}",
        if generated {
            " with the password above, shown this once"
        } else {
            ""
        }
    );
    Ok(())
}

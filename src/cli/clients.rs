//! `dispatch clients create|list|revoke`: the OAuth 2 clients programs get
//! tokens with, made, listed and revoked through the use cases.

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use super::{
    common::{self, account, refused},
    table,
};
use crate::{
    config::Config,
    domain::{
        ids::AccountId,
        scope::{join_scopes, parse_scopes, SCOPES},
    },
    service::ServiceError,
    store::ClientSummary,
};

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
    /// A scope to grant; repeat for several. Default: all five.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
    /// Print shell `export` lines (DISPATCH_CLIENT_ID, DISPATCH_CLIENT_SECRET)
    /// instead of JSON, for `eval "$(dispatch clients create … --shell)"`.
    #[arg(long)]
    pub shell: bool,
}

pub async fn run(config: Config, command: ClientsCommand) -> anyhow::Result<()> {
    match command {
        ClientsCommand::Create(args) => create(config, args).await,
        ClientsCommand::List(args) => list(config, args).await,
        ClientsCommand::Revoke(args) => revoke(config, args).await,
    }
}

async fn create(config: Config, args: CreateClient) -> anyhow::Result<()> {
    let account = account(&args.account)?;
    let scopes = parse_scopes(&args.scopes.join(" "))
        .map_err(|s| anyhow::anyhow!("unknown scope {s}; known scopes: {}", SCOPES.join(", ")))?;
    let service = common::service(config).await?;
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

async fn list(config: Config, args: ListClients) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let service = common::service(config).await?;
    // A name no account can have (empty, too long) has no clients.
    let clients = match AccountId::parse(&args.account) {
        Ok(account) => service
            .clients(&account)
            .await
            .map_err(refused)
            .context("listing the clients")?,
        Err(_) => Vec::new(),
    };
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
            join_scopes(&c.scopes),
            table::time(Some(&c.created_at)),
            table::time(c.revoked_at.as_ref()),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

async fn revoke(config: Config, args: RevokeClient) -> anyhow::Result<()> {
    let revoked = match common::service(config)
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

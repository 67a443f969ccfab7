//! `dispatch users create|list`: the people who sign in to an account's
//! portal. A user is created through the use case the portal's invitations
//! end in; the list is the portal's People page (the oldest first), only
//! their email, role and since when; never a password hash.

use crate::service::Actor;
use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::json;

use super::{
    common::{self, account, print_json, refused, AccountArg, JsonArg},
    table::{self, Table},
};
use crate::{
    config::Config,
    domain::time::serde_ts,
    service::{identities::MIN_PASSWORD, ServiceError},
    store::portal::Role,
};

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a portal user. The password is prompted for on a terminal, read
    /// from standard input with --password-stdin, or else generated and printed once.
    Create(CreateUser),
    /// List the account's portal users (email, role, since when), oldest first.
    List(ListUsers),
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

pub async fn run(config: Config, command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Create(args) => create(config, args).await,
        UsersCommand::List(args) => list(config, args).await,
    }
}

#[derive(Debug, Args)]
pub struct ListUsers {
    #[command(flatten)]
    pub account: AccountArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// A person as `--json` prints them: as `users create` prints one, with
/// the time their sign-in was made.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UserOut<'a> {
    account: &'a str,
    email: &'a str,
    role: &'static str,
    #[serde(with = "serde_ts")]
    created_at: chrono::DateTime<chrono::Utc>,
}

pub async fn list(config: Config, args: ListUsers) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let people = service.reads(&operator).people().await?;
    let out: Vec<UserOut> = people
        .iter()
        .map(|p| UserOut {
            account: &p.account,
            email: &p.email,
            role: p.role.as_str(),
            created_at: p.created_at,
        })
        .collect();
    if args.out.json {
        return print_json(&out);
    }
    let mut t = Table::new(&["EMAIL", "ROLE", "SINCE"]);
    for p in &out {
        t.row(vec![
            p.email.to_string(),
            p.role.to_string(),
            table::time(Some(&p.created_at)),
        ]);
    }
    print!("{}", t.render());
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

async fn create(config: Config, args: CreateUser) -> anyhow::Result<()> {
    let account = account(&args.account)?;
    let (password, generated) = choose_password(&args)?;
    let service = common::service(config).await?;
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

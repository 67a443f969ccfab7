//! What the operator commands share: the service on the configured store,
//! the account they act on, `--json`, a page of a list, and the parsing of
//! ids and times and the use cases' refusals into one clear line.

use chrono::{DateTime, Utc};
use clap::Args;
use serde::Serialize;

use super::store_line;
use crate::{
    config::Config,
    domain::{ids::AccountId, time},
    service::{Service, ServiceError},
};

/// The account a command acts on: an operator's command has no token, so
/// it names the account, and sees only that account's data.
#[derive(Debug, Args)]
pub struct AccountArg {
    /// The account to act on; another account's ids answer "not found".
    #[arg(long, value_name = "ACCOUNT")]
    pub account: String,
}

impl AccountArg {
    pub fn parse(&self) -> anyhow::Result<AccountId> {
        account(&self.account)
    }
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print the JSON the HTTP API answers for the same request, instead
    /// of a table.
    #[arg(long)]
    pub json: bool,
}

/// A page of a list, as the API's `limit` and `cursor`.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// How many to list, 1 to 1000.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Continue after the page that printed this cursor (its nextCursor).
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,
}

impl PageArgs {
    /// The cursor as `decode` reads it; one it cannot read is refused.
    pub fn cursor<T>(&self, decode: impl FnOnce(&str) -> Option<T>) -> anyhow::Result<Option<T>> {
        match self.cursor.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(c) => decode(c).map(Some).ok_or_else(|| {
                anyhow::anyhow!("--cursor {c:?} is not a cursor this service issued")
            }),
        }
    }
}

/// Prints `value` as one line of JSON.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// After a page printed as a table, how to get the next one: on standard
/// error, so that the table alone is on standard output.
pub fn say_next(next_cursor: Option<&str>) {
    if let Some(c) = next_cursor {
        eprintln!("more: run again with --cursor {c}");
    }
}

/// An id typed on the command line (after `flag`, or alone when `flag` is
/// empty), or one line saying what it must be.
pub fn id<T: std::str::FromStr>(s: &str, flag: &str, form: &str) -> anyhow::Result<T> {
    s.trim().parse().map_err(|_| {
        let flag = if flag.is_empty() {
            String::new()
        } else {
            format!("{flag} ")
        };
        anyhow::anyhow!("{flag}{s:?} is not {form}")
    })
}

pub const MESSAGE_ID: &str = "a message id (DI-M- and a UUID in lower-case hex)";
pub const TARGET_ID: &str = "a target id (DI-T- and 10 lower-case hex characters)";
pub const SCHEDULE_ID: &str = "a schedule id (DI-S- and 10 lower-case hex characters)";

/// An RFC 3339 time typed on the command line.
pub fn instant(s: &str, flag: &str) -> anyhow::Result<DateTime<Utc>> {
    time::parse_rfc3339(s).map_err(|e| anyhow::anyhow!("{flag} {s:?} {e}"))
}

/// A use case's refusal as one line; "not found" names what was looked for.
pub fn refused_naming(e: ServiceError, what: &str, account: &AccountId) -> anyhow::Error {
    match e {
        ServiceError::NotFound => not_found(what, account),
        other => refused(other),
    }
}

pub fn not_found(what: &str, account: &AccountId) -> anyhow::Error {
    anyhow::anyhow!("not found: the account {account} has no {what}")
}

/// The service an admin command works through, on the configured store
/// (said on standard error): beside a running `serve`, on the same data.
pub async fn service(config: Config) -> anyhow::Result<Service> {
    let (store, _) = store_line::open_admin(&config).await?.into_parts();
    Ok(Service::admin(store, std::sync::Arc::new(config)))
}

/// `--account` as an account name.
pub fn account(arg: &str) -> anyhow::Result<AccountId> {
    AccountId::parse(arg).map_err(|_| anyhow::anyhow!("--account must be 1 to 200 characters"))
}

/// A refusal of a use case, as one line.
pub fn refused(e: ServiceError) -> anyhow::Error {
    match e {
        ServiceError::Invalid(errors) => invalid(errors),
        other => anyhow::Error::new(other),
    }
}

/// A use case's field errors as one line: `invalid: field problem; …`.
pub fn invalid(errors: Vec<crate::domain::target::FieldError>) -> anyhow::Error {
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

//! `dispatch users list`: the people who sign in to an account's portal,
//! as the portal's People page lists them (the oldest first). Only their
//! email, role and since when; never a password hash.

use crate::service::Actor;
use clap::Args;
use serde::Serialize;

use super::{
    common::{self, print_json, AccountArg, JsonArg},
    table::{self, Table},
};
use crate::{config::Config, domain::time::serde_ts};

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

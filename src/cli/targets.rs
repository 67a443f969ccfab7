//! `dispatch targets create|list|get|disable|enable`: created (for
//! provisioning), enabled and disabled through the use cases the API calls,
//! read as `GET /targets` reads them. Secrets show as `***`, as the API
//! shows them.

use crate::service::Actor;
use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use super::{
    common::{
        self, account, id, invalid, not_found, print_json, refused, refused_naming, say_next,
        AccountArg, JsonArg, PageArgs, TARGET_ID,
    },
    table::{self, Table},
};
use crate::{
    api::extract::encode_cursor,
    config::Config,
    domain::{ids::TargetId, target::Target},
    store::TargetCursor,
    wire::{List, TargetOut},
};

#[derive(Debug, Subcommand)]
pub enum TargetsCommand {
    /// Create a target; prints it as JSON (a generated signing secret in full, once).
    Create(CreateTarget),
    /// List the account's targets, newest first, a page at a time.
    List(ListTargets),
    /// Show one target; its secrets show as ***.
    Get(OneTarget),
    /// Disable a target: it receives nothing, and its messages wait,
    /// Scheduled, without using up their retries.
    Disable(OneTarget),
    /// Enable a target: its waiting messages are delivered, oldest first.
    Enable(OneTarget),
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

pub async fn run(config: Config, command: TargetsCommand) -> anyhow::Result<()> {
    match command {
        TargetsCommand::Create(args) => create(config, args).await,
        TargetsCommand::List(args) => list(config, args).await,
        TargetsCommand::Get(args) => get(config, args).await,
        TargetsCommand::Disable(args) => set_enabled(config, args, false).await,
        TargetsCommand::Enable(args) => set_enabled(config, args, true).await,
    }
}

#[derive(Debug, Args)]
pub struct ListTargets {
    #[command(flatten)]
    pub account: AccountArg,
    #[command(flatten)]
    pub page: PageArgs,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Debug, Args)]
pub struct OneTarget {
    /// The target's id (DI-T-…).
    #[arg(value_name = "TARGET_ID")]
    pub id: String,
    #[command(flatten)]
    pub account: AccountArg,
    #[command(flatten)]
    pub out: JsonArg,
}

/// Where a target delivers: its URL, queue or topic.
fn destination(t: &TargetOut) -> String {
    ["url", "queueUrl", "topicArn"]
        .iter()
        .find_map(|k| t.config.get(*k).and_then(|v| v.as_str()))
        .map_or_else(table::none, str::to_string)
}

fn show(t: &Target, json: bool) -> anyhow::Result<()> {
    let out = TargetOut::new(t);
    if json {
        return print_json(&out);
    }
    let health = out
        .health
        .as_ref()
        .map_or_else(table::none, |h| match h.open_until.as_ref() {
            Some(until) => format!("{} until {}", h.state, table::time(Some(until))),
            None => h.state.to_string(),
        });
    print!(
        "{}",
        table::record(&[
            ("targetId", out.target_id.clone()),
            ("name", out.name.clone()),
            ("type", out.kind.to_string()),
            ("enabled", out.enabled.to_string()),
            ("destination", destination(&out)),
            ("health", health),
            ("createdAt", table::time(Some(&out.created_at))),
            ("updatedAt", table::time(Some(&out.updated_at))),
            ("config", out.config.to_string()),
        ])
    );
    Ok(())
}

fn target_id(s: &str) -> anyhow::Result<TargetId> {
    id(s, "", TARGET_ID)
}

pub async fn list(config: Config, args: ListTargets) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let after = args.page.cursor(TargetCursor::decode)?;
    let limit = args.page.limit;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let mut targets = service
        .reads(&operator)
        .targets(after.as_ref(), limit + 1)
        .await?;
    let next_cursor = if targets.len() > limit as usize {
        targets.truncate(limit as usize);
        targets
            .last()
            .map(|t| encode_cursor(&TargetCursor::after(t).encode()))
    } else {
        None
    };
    let page = List {
        items: targets.iter().map(TargetOut::new).collect(),
        next_cursor,
    };
    if args.out.json {
        return print_json(&page);
    }
    let mut t = Table::new(&[
        "TARGET ID",
        "NAME",
        "TYPE",
        "ENABLED",
        "DESTINATION",
        "CREATED",
    ]);
    for target in &page.items {
        t.row(vec![
            target.target_id.clone(),
            target.name.clone(),
            target.kind.to_string(),
            target.enabled.to_string(),
            destination(target),
            table::time(Some(&target.created_at)),
        ]);
    }
    print!("{}", t.render());
    say_next(page.next_cursor.as_deref());
    Ok(())
}

pub async fn get(config: Config, args: OneTarget) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let id = target_id(&args.id)?;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let t = service
        .reads(&operator)
        .target(&id)
        .await?
        .ok_or_else(|| not_found(&format!("target {id}"), &account))?;
    show(&t, args.out.json)
}

/// `targets enable` and `targets disable`: a disabled target receives
/// nothing; its messages wait, Scheduled, and go once it is enabled.
pub async fn set_enabled(config: Config, args: OneTarget, enabled: bool) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let id = target_id(&args.id)?;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let t = service
        .set_target_enabled(&operator, &id, enabled)
        .await
        .map_err(|e| refused_naming(e, &format!("target {id}"), &account))?;
    show(&t, args.out.json)
}

async fn create(config: Config, args: CreateTarget) -> anyhow::Result<()> {
    let account = account(&args.account)?;
    let target_config: serde_json::Value = serde_json::from_str(&args.target_config)
        .context("--target-config must be a JSON object")?;
    let spec = crate::wire::target::parse(
        &json!({"name": args.name, "type": args.kind, "config": target_config}),
    )
    .map_err(invalid)?;
    let service = common::service(config).await?;
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

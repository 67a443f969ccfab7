//! `dispatch messages list|get|cancel|reschedule|redrive`: an account's
//! messages, read as `GET /messages` reads them and changed through the
//! use cases the API calls.

use crate::service::Actor;
use clap::{Args, Subcommand};

use super::{
    common::{
        self, id, instant, not_found, print_json, refused, refused_naming, say_next, AccountArg,
        JsonArg, PageArgs, MESSAGE_ID, SCHEDULE_ID, TARGET_ID,
    },
    table::{self, Table},
};
use crate::{
    api::extract::encode_cursor,
    config::Config,
    domain::{
        ids::{MessageId, ScheduleId, TargetId},
        message::{Message, State},
    },
    service::{bulk::BULK_IDS_MAX, Conflict, ServiceError},
    store::{Bulk, BulkAction, MessageFilter, RangeOn},
    wire::{bulk::CountOut, List, MessageOut},
};

#[derive(Debug, Subcommand)]
pub enum MessagesCommand {
    /// List the account's messages, newest first, a page at a time.
    List(ListMessages),
    /// Show one message.
    Get(OneMessage),
    /// Cancel a Scheduled or DeadLetter message.
    Cancel(OneMessage),
    /// Deliver a Scheduled or DeadLetter message at another time; its
    /// retry ladder starts over.
    Reschedule(Reschedule),
    /// Schedule dead letters (DeadLetter messages) again; prints how many.
    ///
    /// Those listed, or those of a target (dead-lettered between --from and
    /// --to when given); due now or at --at, the retry ladder starting over.
    Redrive(Redrive),
}

#[derive(Debug, Args)]
pub struct ListMessages {
    #[command(flatten)]
    pub account: AccountArg,
    /// Only the messages to this target.
    #[arg(long, value_name = "TARGET_ID")]
    pub target: Option<String>,
    /// Only the messages in this state.
    #[arg(long, value_parser = ["Scheduled", "Delivered", "Cancelled", "DeadLetter"])]
    pub state: Option<String>,
    /// Only the messages with this orderingKey.
    #[arg(long, value_name = "KEY")]
    pub ordering_key: Option<String>,
    /// Only the messages of this schedule's runs.
    #[arg(long, value_name = "SCHEDULE_ID")]
    pub schedule: Option<String>,
    #[command(flatten)]
    pub page: PageArgs,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Debug, Args)]
pub struct OneMessage {
    /// The message's id (DI-M-…).
    #[arg(value_name = "MESSAGE_ID")]
    pub id: String,
    #[command(flatten)]
    pub account: AccountArg,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Debug, Args)]
pub struct Reschedule {
    /// The message's id (DI-M-…).
    #[arg(value_name = "MESSAGE_ID")]
    pub id: String,
    /// The new delivery time, RFC 3339 with an offset
    /// (2030-07-01T12:34:00Z, 2030-07-01T14:34:00+02:00); a past time
    /// is delivered at once.
    #[arg(long, value_name = "TIME")]
    pub at: String,
    #[command(flatten)]
    pub account: AccountArg,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Debug, Args)]
pub struct Redrive {
    /// Dead letters to redrive, by id (up to 1,000). One id that names no
    /// dead letter of the account is refused, saying why.
    #[arg(value_name = "MESSAGE_ID")]
    pub ids: Vec<String>,
    /// The dead letters of this target (with --from and --to: only those
    /// dead-lettered in that range).
    #[arg(long, value_name = "TARGET_ID")]
    pub target: Option<String>,
    /// Dead-lettered at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Dead-lettered before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    /// When to deliver them (RFC 3339 with an offset); default now.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    #[command(flatten)]
    pub account: AccountArg,
    #[command(flatten)]
    pub out: JsonArg,
}

pub async fn run(config: Config, command: MessagesCommand) -> anyhow::Result<()> {
    match command {
        MessagesCommand::List(args) => list(config, args).await,
        MessagesCommand::Get(args) => get(config, args).await,
        MessagesCommand::Cancel(args) => cancel(config, args).await,
        MessagesCommand::Reschedule(args) => reschedule(config, args).await,
        MessagesCommand::Redrive(args) => redrive(config, args).await,
    }
}

const COLUMNS: [&str; 7] = [
    "MESSAGE ID",
    "TARGET",
    "STATE",
    "DELIVERY TIME",
    "NEXT ATTEMPT",
    "ATTEMPTS",
    "LAST ERROR",
];

fn row(m: &MessageOut) -> Vec<String> {
    vec![
        m.message_id.clone(),
        m.target_id.clone(),
        m.state.to_string(),
        table::time(Some(&m.delivery_time)),
        table::time(m.next_attempt_at.as_ref()),
        m.attempt_count.to_string(),
        table::text(m.last_error.as_deref(), 60),
    ]
}

/// A message as the API answers it, or as a person reads it.
fn show(m: &Message, json: bool) -> anyhow::Result<()> {
    let out = MessageOut::new(m);
    if json {
        return print_json(&out);
    }
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(table::none);
    print!(
        "{}",
        table::record(&[
            ("messageId", out.message_id.clone()),
            ("targetId", out.target_id.clone()),
            ("state", out.state.to_string()),
            ("deliveryTime", table::time(Some(&out.delivery_time))),
            ("nextAttemptAt", table::time(out.next_attempt_at.as_ref())),
            ("attemptCount", out.attempt_count.to_string()),
            ("deliveredAt", table::time(out.delivered_at.as_ref())),
            ("cancelledAt", table::time(out.cancelled_at.as_ref())),
            ("deadLetteredAt", table::time(out.dead_lettered_at.as_ref())),
            ("lastError", opt(&out.last_error)),
            ("orderingKey", opt(&out.ordering_key)),
            ("scheduleId", opt(&out.schedule_id)),
            ("createdAt", table::time(Some(&out.created_at))),
            ("updatedAt", table::time(Some(&out.updated_at))),
            ("payload", table::text(Some(&out.payload), 200)),
        ])
    );
    Ok(())
}

fn message_id(s: &str) -> anyhow::Result<MessageId> {
    id(s, "", MESSAGE_ID)
}

fn what(id: &MessageId) -> String {
    format!("message {id}")
}

async fn list(config: Config, args: ListMessages) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let target_id = args
        .target
        .as_deref()
        .map(|t| id::<TargetId>(t, "--target", TARGET_ID))
        .transpose()?;
    let schedule_id = args
        .schedule
        .as_deref()
        .map(|s| id::<ScheduleId>(s, "--schedule", SCHEDULE_ID))
        .transpose()?;
    let state = args
        .state
        .as_deref()
        .map(|s| State::parse(s).expect("clap admits only the four states"));
    let before = args.page.cursor(|c| c.parse::<MessageId>().ok())?;
    let filter = MessageFilter {
        target_id,
        state,
        ordering_key: args.ordering_key.filter(|k| !k.is_empty()),
        schedule_id,
        ..MessageFilter::default()
    };
    let limit = args.page.limit;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let mut messages = service
        .reads(&operator)
        .messages(&filter, before.as_ref(), limit + 1)
        .await?;
    let next_cursor = if messages.len() > limit as usize {
        messages.truncate(limit as usize);
        messages.last().map(|m| encode_cursor(&m.id.to_string()))
    } else {
        None
    };
    let page = List {
        items: messages.iter().map(MessageOut::new).collect(),
        next_cursor,
    };
    if args.out.json {
        return print_json(&page);
    }
    let mut t = Table::new(&COLUMNS);
    for m in &page.items {
        t.row(row(m));
    }
    print!("{}", t.render());
    say_next(page.next_cursor.as_deref());
    Ok(())
}

async fn get(config: Config, args: OneMessage) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let id = message_id(&args.id)?;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let m = service
        .reads(&operator)
        .message(&id)
        .await?
        .ok_or_else(|| not_found(&what(&id), &account))?;
    show(&m, args.out.json)
}

async fn cancel(config: Config, args: OneMessage) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let id = message_id(&args.id)?;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let m = service
        .cancel(&operator, &id)
        .await
        .map_err(|e| refused_naming(e, &what(&id), &account))?;
    show(&m, args.out.json)
}

async fn reschedule(config: Config, args: Reschedule) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let id = message_id(&args.id)?;
    let at = instant(&args.at, "--at")?;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let m = service
        .reschedule(&operator, &id, at)
        .await
        .map_err(|e| refused_naming(e, &what(&id), &account))?;
    show(&m, args.out.json)
}

async fn redrive(config: Config, args: Redrive) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    if args.ids.len() > BULK_IDS_MAX {
        anyhow::bail!("at most {BULK_IDS_MAX} message ids at once; narrow it or use --target");
    }
    let ids = args
        .ids
        .iter()
        .map(|s| message_id(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let target_id = args
        .target
        .as_deref()
        .map(|t| id::<TargetId>(t, "--target", TARGET_ID))
        .transpose()?;
    let from = args
        .from
        .as_deref()
        .map(|s| instant(s, "--from"))
        .transpose()?;
    let to = args.to.as_deref().map(|s| instant(s, "--to")).transpose()?;
    let at = args.at.as_deref().map(|s| instant(s, "--at")).transpose()?;
    if ids.is_empty() && target_id.is_none() {
        anyhow::bail!(
            "name the dead letters to redrive: their ids, or --target (with --from and --to)"
        );
    }
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    // One message named alone: say why it cannot be redriven, as a cancel
    // or a reschedule says it, rather than counting none.
    if let ([only], None, None, None) = (ids.as_slice(), &target_id, &from, &to) {
        let m = service
            .reads(&operator)
            .message(only)
            .await?
            .ok_or_else(|| not_found(&what(only), &account))?;
        if m.state != State::DeadLetter {
            return Err(refused(ServiceError::Conflict(Conflict::WrongState {
                state: m.state,
                action: "redriven",
            })));
        }
    }
    let bulk = Bulk {
        action: BulkAction::Redrive {
            at: at.unwrap_or_else(|| service.now()),
        },
        target_id,
        ids: (!ids.is_empty()).then_some(ids),
        range_on: RangeOn::DeadLetteredAt,
        from,
        to,
    };
    let count = service.bulk(&operator, &bulk).await.map_err(|e| match e {
        // The one field the service names is the target.
        ServiceError::Invalid(errors) if errors.iter().any(|e| e.field == "targetId") => not_found(
            &format!(
                "target {}",
                bulk.target_id.as_ref().map_or("", |t| t.as_str())
            ),
            &account,
        ),
        other => refused(other),
    })?;
    if args.out.json {
        return print_json(&CountOut { count });
    }
    println!(
        "redriven: {count} message{}",
        if count == 1 { "" } else { "s" }
    );
    Ok(())
}

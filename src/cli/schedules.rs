//! `dispatch schedules list`: an account's recurring schedules, read as
//! `GET /schedules` reads them.

use crate::service::Actor;
use clap::{Args, Subcommand};

use super::{
    common::{self, id, print_json, say_next, AccountArg, JsonArg, PageArgs, TARGET_ID},
    table::{self, Table},
};
use crate::{
    api::extract::encode_cursor,
    config::Config,
    domain::ids::TargetId,
    store::ScheduleCursor,
    wire::{schedule::ScheduleOut, List},
};

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List the account's schedules, newest first, a page at a time.
    List(ListSchedules),
}

pub async fn run(config: Config, command: SchedulesCommand) -> anyhow::Result<()> {
    match command {
        SchedulesCommand::List(args) => list(config, args).await,
    }
}

#[derive(Debug, Args)]
pub struct ListSchedules {
    #[command(flatten)]
    pub account: AccountArg,
    /// Only the schedules of this target.
    #[arg(long, value_name = "TARGET_ID")]
    pub target: Option<String>,
    #[command(flatten)]
    pub page: PageArgs,
    #[command(flatten)]
    pub out: JsonArg,
}

pub async fn list(config: Config, args: ListSchedules) -> anyhow::Result<()> {
    let account = args.account.parse()?;
    let target = args
        .target
        .as_deref()
        .map(|t| id::<TargetId>(t, "--target", TARGET_ID))
        .transpose()?;
    let after = args.page.cursor(ScheduleCursor::decode)?;
    let limit = args.page.limit;
    let service = common::service(config).await?;
    let operator = Actor::operator(account.clone());
    let now = service.now();
    let mut schedules = service
        .reads(&operator)
        .schedules(target.as_ref(), after.as_ref(), limit + 1, now)
        .await?;
    let next_cursor = if schedules.len() > limit as usize {
        schedules.truncate(limit as usize);
        schedules
            .last()
            .map(|s| encode_cursor(&ScheduleCursor::after(s).encode()))
    } else {
        None
    };
    let page = List {
        items: schedules.iter().map(|s| ScheduleOut::new(s, now)).collect(),
        next_cursor,
    };
    if args.out.json {
        return print_json(&page);
    }
    let mut t = Table::new(&[
        "SCHEDULE ID",
        "NAME",
        "TARGET",
        "WHEN",
        "TIME ZONE",
        "PAUSED",
        "NEXT RUN",
        "LAST RUN",
    ]);
    for s in &page.items {
        let when = match (&s.cron, &s.every) {
            (Some(cron), _) => cron.clone(),
            (None, Some(every)) => format!("every {every}"),
            (None, None) => table::none(),
        };
        t.row(vec![
            s.schedule_id.clone(),
            s.name.clone(),
            s.target_id.clone(),
            when,
            s.time_zone.clone(),
            s.paused.to_string(),
            table::time(s.next_run_at.as_ref()),
            table::time(s.last_run_at.as_ref()),
        ]);
    }
    print!("{}", t.render());
    say_next(page.next_cursor.as_deref());
    Ok(())
}

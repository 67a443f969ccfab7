//! The purge scenario: the steady run while retention deletes `--purge`
//! delivered messages that expired a day ago (PostgreSQL only), and how
//! many of them were left when the run ended.

use dispatch::domain::ids::TargetId;
use sqlx::{Connection, PgConnection};

use super::{
    service::{start_service_with, Service},
    Args,
};

/// The service, its retention looking every second rather than every minute.
pub(crate) async fn start(args: &Args) -> anyhow::Result<Service> {
    anyhow::ensure!(
        args.store == "postgres",
        "the purge scenario runs on PostgreSQL"
    );
    start_service_with(args, &[("DISPATCH_RETENTION__INTERVAL", "1s".into())]).await
}

/// Writes the expired delivered messages straight into the database.
pub(crate) async fn expired(
    args: &Args,
    service: &Service,
    target_id: &TargetId,
) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(&service.db_url).await?;
    sqlx::query(
        "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, attempt_count, \
           delivered_at, created_at, updated_at) \
         SELECT gen_random_uuid(), 'bench', $1, 'Delivered', 'benchmark payload'::bytea, \
           now() - interval '2 days', 1, now() - interval '2 days', now() - interval '2 days', \
           now() - interval '2 days' \
         FROM generate_series(1, $2)",
    )
    .bind(target_id.as_str())
    .bind(i64::try_from(args.purge)?)
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// How many of the expired messages retention had purged by the end.
pub(crate) async fn left(args: &Args, service: &Service) -> anyhow::Result<String> {
    let mut conn = PgConnection::connect(&service.db_url).await?;
    let (left,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM messages WHERE state = 'Delivered' AND delivered_at < now() - interval '1 day'",
    )
    .fetch_one(&mut conn)
    .await?;
    Ok(format!(
        "retention purged {} of {} expired delivered messages during the run ({left} left)",
        args.purge as i64 - left,
        args.purge
    ))
}

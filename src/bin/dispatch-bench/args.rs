//! What the benchmark is asked to run: its command line.

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(about = "Dispatch load benchmark")]
pub(crate) struct Args {
    /// A PostgreSQL server where the benchmark may create and drop databases.
    #[arg(
        long,
        env = "DISPATCH_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub(crate) pg: String,
    /// Scenarios to run: burst, steady, backlog, ingest, batch, sqs, noisy,
    /// token, ordered, redrive, schedules, purge, fanout, publish,
    /// publish-none, publish-crowd, pull, pull-wake, pull-idle, told,
    /// neighbours (comma-separated).
    #[arg(long, default_value = "burst,steady,backlog,ingest,batch")]
    pub(crate) scenarios: String,
    /// The store Dispatch runs on: postgres or sqlite (the embedded store).
    #[arg(long, default_value = "postgres")]
    pub(crate) store: String,
    /// How messages are scheduled: `store` (directly, so only delivery is
    /// measured; PostgreSQL only) or `api` (POST /messages, 32 at a time).
    #[arg(long, default_value = "store")]
    pub(crate) via: String,
    /// Far-future messages scheduled (directly in PostgreSQL) before the
    /// steady run of the backlog scenario.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) backlog: usize,
    /// In the backlog scenario, VACUUM ANALYZE after the bulk insert, as
    /// autovacuum would have done for a backlog that grew over time.
    #[arg(long, default_value_t = false)]
    pub(crate) analyze: bool,
    /// Schedule requests sent in the ingest scenario (32 at a time).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) ingest: usize,
    /// Messages scheduled through POST /messages/batch in the batch scenario
    /// (1,000 a request, 4 requests at a time).
    #[arg(long, default_value_t = 200_000)]
    pub(crate) batch: usize,
    /// Messages due at one instant for one SQS queue in the sqs scenario.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) sqs: usize,
    /// Send SQS messages with SendMessageBatch (the default) or one by one.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) sqs_batch: bool,
    /// A moto server (or LocalStack) for the sqs scenario.
    #[arg(long, env = "DISPATCH_BENCH_MOTO_URL")]
    pub(crate) moto: Option<String>,
    /// Messages due at one instant in the burst scenario.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) burst: usize,
    /// Messages per second, and seconds, of the steady scenario.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) steady_rate: usize,
    #[arg(long, default_value_t = 20)]
    pub(crate) steady_seconds: usize,
    /// Messages due at once for another account's hanging target in the
    /// noisy scenario (which is otherwise the steady one).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) noisy: usize,
    /// Hanging targets the noisy account spreads its messages over (each
    /// holds at most `sweeper.target_concurrency` of an instance's slots).
    #[arg(long, default_value_t = 1)]
    pub(crate) noisy_targets: usize,
    /// Messages on the neighbour account's target that the neighbours
    /// scenario disables and enables while the benchmark's own account
    /// posts, and messages the neighbour then cancels in one bulk call
    /// while the own account changes a target (at most bulk.max).
    #[arg(long, default_value_t = 200_000)]
    pub(crate) neighbours: usize,
    #[arg(long, default_value_t = 100_000)]
    pub(crate) neighbours_cancel: usize,
    /// Connections the flood scenario holds with half a request's headers
    /// sent (each reopened when the server closes it), and for how long.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) flood: usize,
    #[arg(long, default_value_t = 30)]
    pub(crate) flood_seconds: u64,
    /// Keys, and messages per key, of the ordered scenario.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) ordered_keys: usize,
    #[arg(long, default_value_t = 10)]
    pub(crate) ordered_per_key: usize,
    /// Dead letters redriven with one call in the redrive scenario (at most
    /// the service's bulk.max, 100,000 by default).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) redrive: usize,
    /// Messages due on a pull target in the pull scenario, and its consumers
    /// (each looping receive 100 + ack; pgmq gets as many connections).
    #[arg(long, default_value_t = 200_000)]
    pub(crate) pull: usize,
    #[arg(long, default_value_t = 16)]
    pub(crate) pull_consumers: usize,
    /// Consumers long-polling, and messages scheduled one every 20 ms, in
    /// the pull-wake scenario.
    #[arg(long, default_value_t = 100)]
    pub(crate) wake_consumers: usize,
    #[arg(long, default_value_t = 200)]
    pub(crate) wake_messages: usize,
    /// Consumers long-polling an empty pull target, and for how long, in the
    /// pull-idle scenario.
    #[arg(long, default_value_t = 500)]
    pub(crate) idle_consumers: usize,
    #[arg(long, default_value_t = 60)]
    pub(crate) idle_seconds: u64,
    /// Schedules, and runs of each (one a second), of the schedules scenario.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) schedules: usize,
    #[arg(long, default_value_t = 30)]
    pub(crate) schedule_seconds: usize,
    /// Targets the schedules scenario's schedules share.
    #[arg(long, default_value_t = 10)]
    pub(crate) schedule_targets: usize,
    /// Subscribed targets, and events due at one instant, of the fanout scenario.
    #[arg(long, default_value_t = 100)]
    pub(crate) fanout_targets: usize,
    #[arg(long, default_value_t = 200)]
    pub(crate) fanout_events: usize,
    /// Targets each event of the publish scenarios reaches (their count
    /// is `--ingest`).
    #[arg(long, default_value_t = 10)]
    pub(crate) publish_targets: usize,
    /// Subscriptions of other types in the publish-crowd scenario.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) crowd: usize,
    /// Runs of each scenario; the table shows the median.
    #[arg(long, default_value_t = 1)]
    pub(crate) runs: usize,
    /// Seconds the token scenario asks for tokens with a valid client.
    #[arg(long, default_value_t = 5)]
    pub(crate) token_seconds: u64,
    /// The dispatch binary (default: beside this one).
    #[arg(long)]
    pub(crate) dispatch: Option<PathBuf>,
    /// Delivered messages, expired a day ago, that retention purges while
    /// the steady run of the purge scenario goes on (PostgreSQL only).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) purge: usize,
    /// Measure PostgreSQL's own floor (pgbench) beside the ingest scenarios.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) floor: bool,
    /// Where the run's JSON and its SVG charts are written.
    #[arg(long, default_value = "target/bench")]
    pub(crate) out: PathBuf,
    /// Also write each run's deliveries (due time and lateness in ms, in
    /// order of due time) to `<scenario>-<run>.csv` in `--out`.
    #[arg(long)]
    pub(crate) timings: bool,
}

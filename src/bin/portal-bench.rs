//! How quick the portal's pages are with a big account: fills an account
//! with messages (100,000 by default: most delivered, some dead letters,
//! cancelled and scheduled, each finished one with its attempts), starts
//! Dispatch, signs in through the form and times every page. Run it in release:
//!
//!     cargo build --release --bins && target/release/portal-bench [--store sqlite]
//!
//! Times are measured at the client over loopback, so they are an upper bound
//! of the server's time.

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use chrono::TimeDelta;
use clap::Parser;
use dispatch::{
    app,
    clock::{Clock, SystemClock},
    config::Config,
    domain::{
        ids::{AccountId, MessageId, TargetId},
        message::{Attempt, Message, State},
        payload::Payload,
        retry::{AttemptOutcome, Next},
        target::{Target, TargetConfig, WebhookConfig},
    },
    store::{Recorded, Store},
};
use serde_json::json;
use sqlx::{Connection, PgConnection};

#[derive(Debug, Parser)]
#[command(about = "Dispatch portal page-time benchmark")]
struct Args {
    #[arg(
        long,
        env = "DISPATCH_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pg: String,
    /// postgres or sqlite.
    #[arg(long, default_value = "postgres")]
    store: String,
    /// Messages in the account.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Timed requests per page (after three untimed ones).
    #[arg(long, default_value_t = 30)]
    requests: usize,
    /// The dispatch binary (default: beside this one).
    #[arg(long)]
    dispatch: Option<PathBuf>,
    /// Keep the PostgreSQL database afterwards (its name is printed), to look at plans.
    #[arg(long)]
    keep: bool,
}

const ACCOUNT: &str = "bench";
const EMAIL: &str = "bench@example.com";
const PASSWORD: &str = "benchmark password 1";
const TARGETS: usize = 5;

/// Fills the account through the store: messages due in the past are claimed
/// and recorded as delivered (one attempt) or dead letters (three failed
/// attempts), some are cancelled, the rest stay scheduled for next year.
async fn fill(store: &dyn Store, n: usize) -> anyhow::Result<(Vec<TargetId>, MessageId)> {
    let account = AccountId::parse(ACCOUNT).expect("a valid account name");
    let now = SystemClock.now();
    let mut targets = Vec::new();
    for i in 0..TARGETS {
        let t = Target {
            id: TargetId::new(),
            account: account.clone(),
            name: format!("target {i}"),
            enabled: true,
            config: TargetConfig::Webhook(WebhookConfig {
                url: format!("https://hooks.example.com/{i}"),
                headers: Default::default(),
                timeout_ms: None,
                signing_secret: dispatch::domain::target::generate_signing_secret(),
                auth: None,
                previous_signing_secret: None,
                format: Default::default(),
                content_type: None,
                limits: Default::default(),
            }),
            created_at: now,
            updated_at: now,
            health: dispatch::domain::target::gate::Health::closed(None),
        };
        store.insert_target(&t).await?;
        targets.push(t.id);
    }
    let message = |i: usize, at| {
        Message::scheduled(
            &account,
            targets[i % TARGETS].clone(),
            at,
            Payload::parse(format!("{{\"order\": {i}, \"note\": \"benchmark\"}}")).unwrap(),
            now,
        )
    };
    let settled = n * 9 / 10;
    let past = now - TimeDelta::hours(2);
    let future = now + TimeDelta::days(365);
    let mut sample = None;
    for start in (0..n).step_by(5_000) {
        let batch: Vec<Message> = (start..(start + 5_000).min(n))
            .map(|i| message(i, if i < settled { past } else { future }))
            .collect();
        store.insert_messages(&account, &batch).await?;
    }
    let mut done = 0;
    loop {
        let claimed = store
            .claim_due(SystemClock.now(), 1_000, Duration::from_secs(60))
            .await?;
        if claimed.is_empty() {
            break;
        }
        let finished = SystemClock.now();
        let results: Vec<Recorded> = claimed
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let dead = (done + i) % 10 == 0;
                let attempt = |k: u32, outcome, status| Attempt {
                    attempt: k,
                    started_at: finished - TimeDelta::milliseconds(40),
                    finished_at: finished,
                    duration_ms: 40,
                    outcome,
                    status_code: Some(status),
                    error: (status != 200).then(|| format!("HTTP {status}")),
                    response_body: Some(if status == 200 {
                        "ok".into()
                    } else {
                        "{\"error\": \"nope\"}".into()
                    }),
                    retry_after_ms: None,
                };
                let attempts = if dead {
                    vec![
                        attempt(1, AttemptOutcome::RetryableFailure, 503),
                        attempt(2, AttemptOutcome::RetryableFailure, 503),
                        attempt(3, AttemptOutcome::NonRetryableFailure, 400),
                    ]
                } else {
                    vec![attempt(1, AttemptOutcome::Success, 200)]
                };
                Recorded {
                    id: c.id,
                    lease_token: c.lease_token,
                    ladder_attempts: attempts.len() as u32,
                    attempts,
                    next: if dead {
                        Next::DeadLetter
                    } else {
                        Next::Delivered
                    },
                    key: None,
                    told: false,
                }
            })
            .collect();
        store.record(&results, finished).await?;
        if sample.is_none() {
            sample = results
                .iter()
                .find(|r| r.next == Next::DeadLetter)
                .map(|r| r.id);
        }
        done += claimed.len();
    }
    // Some of the scheduled ones are cancelled.
    let scheduled = store
        .list_messages(
            &account,
            &dispatch::store::MessageFilter {
                state: Some(State::Scheduled),
                ..Default::default()
            },
            None,
            1000,
        )
        .await?;
    for m in scheduled.iter().take(n / 50) {
        store.cancel(&account, &m.id, SystemClock.now()).await?;
    }
    eprintln!(
        "filled: {done} settled ({} dead letters), {} scheduled, {} cancelled",
        done / 10,
        n - done,
        n / 50
    );
    Ok((targets, sample.context("a dead letter")?))
}

struct Page {
    name: &'static str,
    path: String,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let (db_url, db_name) = if args.store == "sqlite" {
        (
            format!("sqlite://{}", dir.path().join("dispatch.db").display()),
            None,
        )
    } else {
        let name = format!("dispatch_portal_bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&args.pg)
            .await
            .with_context(|| format!("connecting to {}", args.pg))?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await?;
        let base = args.pg.rsplit_once('/').map(|(b, _)| b).unwrap_or(&args.pg);
        (format!("{base}/{name}"), Some(name))
    };
    let result = run(&args, &db_url).await;
    if args.keep && args.store == "sqlite" {
        eprintln!("kept {db_url}");
        let _ = dir.keep();
    }
    if let Some(name) = db_name.filter(|name| {
        if args.keep {
            eprintln!("kept the database {name}");
        }
        !args.keep
    }) {
        let mut admin = PgConnection::connect(&args.pg).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
    }
    result
}

async fn run(args: &Args, db_url: &str) -> anyhow::Result<()> {
    let mut config = Config::defaults();
    config.database.url = db_url.to_string();
    let filled = Instant::now();
    let (targets, dead) = {
        let (store, _) = app::open_store(&config).await?.into_parts();
        store
            .create_user(&dispatch::portal::new_user(
                ACCOUNT,
                EMAIL,
                PASSWORD,
                SystemClock.now(),
            ))
            .await?;
        let out = fill(store.as_ref(), args.messages).await?;
        if let Some(pg) = db_url.starts_with("postgres").then_some(db_url) {
            // As autovacuum would have by now.
            let mut c = PgConnection::connect(pg).await?;
            sqlx::query("VACUUM ANALYZE").execute(&mut c).await?;
        }
        out
    };
    eprintln!("filled in {:.1} s", filled.elapsed().as_secs_f64());

    let bin = args.dispatch.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name(format!("dispatch{}", std::env::consts::EXE_SUFFIX))
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _child = tokio::process::Command::new(&bin)
        .arg("serve")
        .env("DATABASE_URL", db_url)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let started = Instant::now();
    while http
        .get(format!("{base}/health/ready"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        if started.elapsed() > Duration::from_secs(20) {
            bail!("dispatch did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Sign in through the form.
    let login = http.get(format!("{base}/portal/login")).send().await?;
    let login_cookie = cookie(&login, "dispatch_login")?;
    let html = login.text().await?;
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .context("a csrf field")?;
    let signed = http
        .post(format!("{base}/portal/login"))
        .header("cookie", format!("dispatch_login={login_cookie}"))
        .form(&[
            ("csrf", csrf),
            ("email", EMAIL),
            ("password", PASSWORD),
            ("next", ""),
        ])
        .send()
        .await?;
    let session = format!("dispatch_session={}", cookie(&signed, "dispatch_session")?);

    let t = &targets[0];
    let pages = [
        Page {
            name: "overview",
            path: "/portal/overview".into(),
        },
        Page {
            name: "targets",
            path: "/portal/targets".into(),
        },
        Page {
            name: "target",
            path: format!("/portal/targets/{t}"),
        },
        Page {
            name: "messages",
            path: "/portal/messages".into(),
        },
        Page {
            name: "dead letters",
            path: "/portal/messages?state=DeadLetter".into(),
        },
        Page {
            name: "by target+state",
            path: format!("/portal/messages?target={t}&state=Delivered"),
        },
        Page {
            name: "time range",
            path: "/portal/messages?from=2000-01-01T00%3A00&to=2100-01-01T00%3A00&tz=UTC".into(),
        },
        Page {
            // Text no payload holds: the search scans its whole bound.
            name: "payload search",
            path: "/portal/messages?text=no-such-text".into(),
        },
        Page {
            name: "message",
            path: format!("/portal/messages/{dead}"),
        },
        Page {
            name: "redrive count",
            path: format!("/portal/messages/redrive?target={t}"),
        },
    ];
    let mut rows = Vec::new();
    println!(
        "\n{} messages on {}; {} timed requests per page\n",
        args.messages, args.store, args.requests
    );
    println!(
        "{:<16} {:>8} {:>8} {:>8}",
        "page", "p50 ms", "p95 ms", "max ms"
    );
    for page in &pages {
        let mut times = Vec::new();
        for i in 0..args.requests + 3 {
            let clock = Instant::now();
            let r = http
                .get(format!("{base}{}", page.path))
                .header("cookie", &session)
                .send()
                .await?;
            let status = r.status();
            let _ = r.bytes().await?;
            let ms = clock.elapsed().as_secs_f64() * 1000.0;
            if status != 200 {
                bail!("{} answered {status}", page.path);
            }
            if i >= 3 {
                times.push(ms);
            }
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let (p50, p95, max) = (
            percentile(&times, 0.5),
            percentile(&times, 0.95),
            times[times.len() - 1],
        );
        println!("{:<16} {:>8.1} {:>8.1} {:>8.1}", page.name, p50, p95, max);
        rows.push(
            json!({"page": page.name, "path": page.path, "p50Ms": p50, "p95Ms": p95, "maxMs": max}),
        );
    }
    println!(
        "{}",
        json!({"store": args.store, "messages": args.messages, "pages": rows})
    );
    Ok(())
}

fn cookie(r: &reqwest::Response, name: &str) -> anyhow::Result<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| {
            c.strip_prefix(&format!("{name}="))
                .map(|v| v.split(';').next().unwrap_or("").to_string())
        })
        .with_context(|| format!("no {name} cookie (status {})", r.status()))
}

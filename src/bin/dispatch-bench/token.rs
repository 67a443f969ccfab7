//! The `token` scenario: `POST /oauth/token` for a valid client, as fast as
//! 16 connections can ask, then what a flood of wrong secrets and of
//! unknown client ids costs the server. Prints requests per second, the
//! answers by status, and the server's CPU time for each flood. Each part
//! runs on a fresh instance: a flood meets a server that has not yet seen
//! the client's right secret, and no part inherits another's limits.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;

use super::{
    service::{dispatch_binary, start_service, Service},
    Args,
};

const CONNECTIONS: usize = 16;

/// The client id and secret of request `i`, given a client id of the service.
type Credentials = fn(&str, usize) -> (String, String);

/// Sends `n` token requests (or as many as fit in `budget`), `CONNECTIONS`
/// at a time; credentials come from `creds(i)`. Returns the count per status
/// and the elapsed time.
async fn hammer(
    base: &str,
    n: usize,
    budget: Duration,
    creds: impl Fn(usize) -> (String, String) + Send + Sync + 'static,
) -> (BTreeMap<u16, usize>, Duration) {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CONNECTIONS)
        .build()
        .expect("an HTTP client");
    let url = format!("{base}/oauth/token");
    let next = Arc::new(Mutex::new(0usize));
    let counts = Arc::new(Mutex::new(BTreeMap::new()));
    let creds = Arc::new(creds);
    let started = Instant::now();
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (http, url, next, counts, creds) = (
                http.clone(),
                url.clone(),
                next.clone(),
                counts.clone(),
                creds.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let i = {
                        let mut next = next.lock().unwrap();
                        if *next >= n || started.elapsed() >= budget {
                            break;
                        }
                        *next += 1;
                        *next - 1
                    };
                    let (id, secret) = creds(i);
                    let status = match http
                        .post(&url)
                        .basic_auth(id, Some(secret))
                        .form(&[("grant_type", "client_credentials")])
                        .send()
                        .await
                    {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let _ = r.bytes().await;
                            status
                        }
                        Err(_) => 0,
                    };
                    *counts.lock().unwrap().entry(status).or_insert(0) += 1;
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let counts = counts.lock().unwrap().clone();
    (counts, started.elapsed())
}

/// A new client of the service's database, made with the CLI; its id.
async fn new_client(args: &Args, service: &Service) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(dispatch_binary(args))
        .args([
            "clients",
            "create",
            "--account",
            "bench",
            "--name",
            "flooded",
        ])
        .env("DATABASE_URL", &service.db_url)
        .output()
        .await?;
    anyhow::ensure!(out.status.success(), "dispatch clients create failed");
    let client: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    client["clientId"]
        .as_str()
        .map(String::from)
        .context("a client id")
}

fn describe(counts: &BTreeMap<u16, usize>) -> String {
    counts
        .iter()
        .map(|(status, n)| format!("{status}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) async fn run(args: &Args, run: usize) -> anyhow::Result<()> {
    let service = start_service(args).await?;
    let (id, secret) = service.client.clone();
    let (valid, elapsed) = hammer(
        &service.base,
        usize::MAX,
        Duration::from_secs(args.token_seconds),
        move |_| (id.clone(), secret.clone()),
    )
    .await;
    service.stop(&args.pg).await;
    let ok = valid.get(&200).copied().unwrap_or(0);
    println!(
        "token run {run}: valid client, {CONNECTIONS} connections, {:.1} s: {:.0} tokens/s ({})",
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64(),
        describe(&valid)
    );

    let floods: [(&str, Credentials); 2] = [
        ("wrong secrets for one client id", |id, i| {
            (id.to_string(), format!("wrong-secret-{i}"))
        }),
        ("unknown client ids", |_, i| {
            (format!("dc_{i:016x}"), "wrong".to_string())
        }),
    ];
    for (what, creds) in floods {
        let service = start_service(args).await?;
        // A client this instance has never seen authenticate: nothing of its
        // right secret is remembered that could make a wrong one cheap.
        let id = new_client(args, &service).await?;
        let cpu = service.cpu_seconds();
        let (answers, elapsed) = hammer(&service.base, 1_000, Duration::from_secs(600), move |i| {
            creds(&id, i)
        })
        .await;
        println!(
            "token run {run}: 1,000 {what}: {:.2} s of server CPU in {:.2} s ({})",
            service.cpu_seconds() - cpu,
            elapsed.as_secs_f64(),
            describe(&answers)
        );
        service.stop(&args.pg).await;
    }
    Ok(())
}

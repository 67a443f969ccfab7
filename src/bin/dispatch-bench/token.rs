//! The `token` scenario: `POST /oauth/token` for a valid client, as fast as
//! 16 connections can ask, then what a flood of wrong secrets and of
//! unknown client ids costs the server. Prints requests per second, the
//! answers by status, and the server's CPU time for each flood.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{service::start_service, Args};

const CONNECTIONS: usize = 16;

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

    let (valid, elapsed) = {
        let (id, secret) = (id.clone(), secret.clone());
        hammer(
            &service.base,
            usize::MAX,
            Duration::from_secs(args.token_seconds),
            move |_| (id.clone(), secret.clone()),
        )
        .await
    };
    let ok = valid.get(&200).copied().unwrap_or(0);
    println!(
        "token run {run}: valid client, {CONNECTIONS} connections, {:.1} s: {:.0} tokens/s ({})",
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64(),
        describe(&valid)
    );

    let cpu = service.cpu_seconds();
    let (wrong, elapsed) = {
        let id = id.clone();
        hammer(&service.base, 1_000, Duration::from_secs(600), move |i| {
            (id.clone(), format!("wrong-secret-{i}"))
        })
        .await
    };
    println!(
        "token run {run}: 1,000 wrong secrets for one client id: {:.2} s of server CPU in {:.2} s ({})",
        service.cpu_seconds() - cpu,
        elapsed.as_secs_f64(),
        describe(&wrong)
    );

    let cpu = service.cpu_seconds();
    let (unknown, elapsed) = hammer(&service.base, 1_000, Duration::from_secs(600), |i| {
        (format!("dc_{i:016x}"), "wrong".to_string())
    })
    .await;
    println!(
        "token run {run}: 1,000 unknown client ids: {:.2} s of server CPU in {:.2} s ({})",
        service.cpu_seconds() - cpu,
        elapsed.as_secs_f64(),
        describe(&unknown)
    );
    service.stop(&args.pg).await;
    Ok(())
}

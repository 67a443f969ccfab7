//! The `flood` scenario: a client (from 127.0.0.2) that opens `--flood` connections and
//! sends each half a request's headers, reopening each one the server
//! closes, for `--flood-seconds`. Every half second it samples the
//! connections the flooder holds open, the files the service has open, a
//! normal client's `GET /targets` on a new connection and `GET
//! /health/ready`, and prints them over time with the normal request's and
//! health's latencies and failures.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::{
    service::{percentile, Service},
    Args, Result,
};

const SAMPLE_EVERY: Duration = Duration::from_millis(500);

pub(crate) async fn flood(
    args: &Args,
    service: Service,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    run: usize,
) -> anyhow::Result<Result> {
    let addr = service.base.trim_start_matches("http://").to_string();
    let pid = service.child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(AtomicUsize::new(0));
    let flooders: Vec<_> = (0..args.flood)
        .map(|_| {
            let (addr, stop, open, opened) =
                (addr.clone(), stop.clone(), open.clone(), opened.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = connect_from_another_address(&addr).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    if s.write_all(b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                        .await
                        .is_err()
                    {
                        continue;
                    }
                    open.fetch_add(1, Ordering::Relaxed);
                    let mut buf = [0u8; 512];
                    // Held until the server closes it (or answers it).
                    loop {
                        tokio::select! {
                            r = s.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
                            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                                if stop.load(Ordering::Relaxed) { break }
                            }
                        }
                    }
                    open.fetch_sub(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let mut normal_ms = Vec::new();
    let mut health_ms = Vec::new();
    let (mut normal_failed, mut health_failed) = (0usize, 0usize);
    let mut over_time = Vec::new();
    let clock = Instant::now();
    let until = clock + Duration::from_secs(args.flood_seconds);
    while Instant::now() < until {
        tokio::time::sleep(SAMPLE_EVERY).await;
        // A new client each time: a fresh connection, as a stranger's.
        let fresh = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()?;
        let t = Instant::now();
        let ok = fresh
            .get(format!("{}/targets", service.base))
            .bearer_auth(&service.token)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        let normal = t.elapsed().as_secs_f64() * 1000.0;
        normal_ms.push(normal);
        normal_failed += usize::from(!ok);
        let t = Instant::now();
        let ok = fresh
            .get(format!("{}/health/ready", service.base))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        health_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        health_failed += usize::from(!ok);
        let files = pid
            .and_then(|p| std::fs::read_dir(format!("/proc/{p}/fd")).ok())
            .map_or(0, |d| d.count());
        over_time.push(format!(
            "{:.0}s {} open/{} files/{:.0} ms",
            clock.elapsed().as_secs_f64(),
            open.load(Ordering::Relaxed),
            files,
            normal
        ));
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        let _ = f.await;
    }
    normal_ms.sort_by(f64::total_cmp);
    health_ms.sort_by(f64::total_cmp);
    let notes = format!(
        "{flood} half-sent connections for {secs} s ({opened} opened in all). \
         GET /targets on a new connection: n {n} p50 {np50:.1} ms p99 {np99:.1} ms max {nmax:.1} ms, \
         {normal_failed} failed; /health/ready: p50 {hp50:.1} ms max {hmax:.1} ms, {health_failed} failed. \
         Over time (held open by the flooder / files the service has open / GET /targets): {over}",
        flood = args.flood,
        secs = args.flood_seconds,
        opened = opened.load(Ordering::Relaxed),
        n = normal_ms.len(),
        np50 = percentile(&normal_ms, 0.5),
        np99 = percentile(&normal_ms, 0.99),
        nmax = normal_ms.last().copied().unwrap_or(0.0),
        hp50 = percentile(&health_ms, 0.5),
        hmax = health_ms.last().copied().unwrap_or(0.0),
        over = over_time.join(", "),
    );
    println!("flood: {notes}");
    let peak_rss_mb = service.peak_rss_mb();
    server.abort();
    service.stop(&args.pg).await;
    Ok(Result {
        scenario: "flood".into(),
        run,
        messages: normal_ms.len(),
        delivered: normal_ms.len() - normal_failed,
        peak_rss_mb,
        notes: Some(notes),
        failed_check: normal_failed > 0 || health_failed > 0,
        ..Result::default()
    })
}

/// A connection from 127.0.0.2: the flooder is another client than the
/// normal one (127.0.0.1), as a server tells clients apart.
async fn connect_from_another_address(addr: &str) -> std::io::Result<TcpStream> {
    let to: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(([127, 0, 0, 2], 0).into())?;
    socket.connect(to).await
}

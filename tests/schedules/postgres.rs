//! Several instances on one PostgreSQL database: what needs PostgreSQL
//! itself, whatever store the rest of the suite runs on (`--skip postgres::`
//! leaves it out where there is none).

use std::process::Stdio;

use dispatch::{
    auth::secrets,
    domain::{ids::AccountId, scope::Scope},
    store::{ClientRecord, IdentityStore},
};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

/// A `dispatch serve` process: the metrics recorder is one per process, so
/// its `/metrics` counts its own work and nothing else.
struct Instance {
    base: String,
    _process: tokio::process::Child,
}

impl Instance {
    /// Starts one on `db_url` and returns once it says it is serving (on a
    /// port of its choosing, read from that line).
    async fn start(db_url: &str) -> Self {
        let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
            .arg("serve")
            .env("DATABASE_URL", db_url)
            .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
            .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
            .env("DISPATCH_SWEEPER__POLL_INTERVAL", "1s")
            .env("DISPATCH_LOG__FORMAT", "json")
            .env("RUST_LOG", "warn,dispatch::app=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the dispatch binary starts");
        let mut lines = BufReader::new(process.stderr.take().unwrap()).lines();
        let serving = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if entry["fields"]["message"] == "dispatch is serving" {
                    return entry["fields"]["addr"].as_str().unwrap().to_string();
                }
            }
            panic!("the instance stopped before it served");
        })
        .await
        .expect("the instance serves");
        // What it logs later is read and dropped: a full pipe would stop it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            base: format!("http://{serving}"),
            _process: process,
        }
    }

    /// An API client of `account` with every scope, on this instance.
    async fn api(&self, db_url: &str, account: &str) -> Api {
        let (client_id, secret) = secrets::generate_client_credentials();
        common::open_store(db_url)
            .await
            .create_client(&ClientRecord {
                client_id: client_id.clone(),
                account: AccountId::parse(account).unwrap(),
                name: "test".into(),
                secret_hash: secrets::hash_client_secret(&secret),
                scopes: Scope::ALL.to_vec(),
            })
            .await
            .unwrap();
        let http = reqwest::Client::new();
        let r = http
            .post(format!("{}/oauth/token", self.base))
            .basic_auth(&client_id, Some(&secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let token = r.json::<Value>().await.unwrap()["access_token"]
            .as_str()
            .unwrap()
            .to_string();
        Api {
            base: self.base.clone(),
            http,
            token,
        }
    }

    /// A counter as its `/metrics` reports it (0 before it counts anything).
    async fn counter(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            .map(|rest| rest.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    }
}

/// Two instances on one database, each with its materialiser and sweeper:
/// every run is made once and arrives once, and each instance made some of
/// the runs. Half the schedules are created through each: a schedule's
/// first pass is its creator's (the request wakes that instance's
/// materialiser, and only that one's), so both take part whatever their
/// timers do; later runs go to whichever pass comes first. Each counts the
/// runs it made on its own `/metrics`; together they count every message.
#[tokio::test]
async fn two_instances_make_exactly_one_message_per_run() {
    let db = common::TestDb::postgres().await;
    let a = Instance::start(&db.url).await;
    let b = Instance::start(&db.url).await;
    let (api_a, api_b) = (a.api(&db.url, "acme").await, b.api(&db.url, "acme").await);
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api_a, &rx).await;
    let mut ids = Vec::new();
    for n in 0..20 {
        let api = if n % 2 == 0 { &api_a } else { &api_b };
        let s = create(api, json!({"targetId": t, "every": "1s", "payload": "x"})).await;
        ids.push(s["scheduleId"].as_str().unwrap().to_string());
    }
    // Three runs each, at least.
    let received = rx.wait_for(60, WAIT).await;
    let mut seen = HashSet::new();
    for r in &received {
        assert!(
            seen.insert(r.header("webhook-id").unwrap()),
            "a message arrived twice"
        );
    }
    // Paused, they make no more runs: the counts settle.
    for id in &ids {
        let r = api_b.post_empty(&format!("/schedules/{id}/pause")).await;
        assert_eq!(r.status(), 200);
    }
    let mut made = 0;
    let mut delivered = 0;
    for id in &ids {
        let runs = messages_of(&api_a, id).await;
        let instants: HashSet<i64> = runs.iter().map(|m| ms(&m["deliveryTime"])).collect();
        assert_eq!(instants.len(), runs.len(), "one message per run of {id}");
        made += runs.len();
    }
    for id in &ids {
        let settled = eventually("every run delivered or cancelled", || {
            let api = &api_a;
            async move {
                let runs = messages_of(api, id).await;
                runs.iter()
                    .all(|m| m["state"] != "Scheduled")
                    .then_some(runs)
            }
        })
        .await;
        delivered += settled.iter().filter(|m| m["state"] == "Delivered").count();
    }
    let (a, b) = (&a, &b);
    let (by_a, by_b) = eventually(
        "each instance counted the runs it made",
        move || async move {
            let by = (
                a.counter("dispatch_schedule_runs_total").await as usize,
                b.counter("dispatch_schedule_runs_total").await as usize,
            );
            (by.0 + by.1 == made).then_some(by)
        },
    )
    .await;
    assert!(
        by_a > 0 && by_b > 0,
        "both made runs: {by_a} and {by_b} of {made}"
    );
    let delivered_by = eventually("each instance counted its deliveries", move || async move {
        let by = (
            a.counter("dispatch_messages_delivered_total").await as usize,
            b.counter("dispatch_messages_delivered_total").await as usize,
        );
        (by.0 + by.1 == delivered).then_some(by)
    })
    .await;
    println!("runs made {by_a} + {by_b}, delivered {delivered_by:?} of {delivered}");
}

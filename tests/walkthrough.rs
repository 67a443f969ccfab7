//! The README's walkthrough, run as written: its `sh walkthrough` blocks,
//! in order, in one bash, with the `dispatch` this build made on the PATH,
//! in a fresh directory, with no `set -e` (as a reader's shell runs them).
//! Only the two ports are changed (to free ones), so that the test can run
//! beside others. It needs bash, curl and jq, as the README says; without
//! them it fails, saying so. And the same blocks where a newcomer's first
//! hour goes wrong: beside the quick start's service, still running.

use std::{net::TcpListener, path::Path, process::Stdio, time::Duration};

use serde_json::Value;

/// The blocks a reader pastes, in order.
fn walkthrough_blocks(readme: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match &mut current {
            None if line.trim_end() == "```sh walkthrough" => current = Some(String::new()),
            Some(block) if line.trim_end() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed walkthrough block");
    blocks
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The JSON lines of the output whose `key` is `value`.
fn lines_with(out: &str, key: &str, value: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v[key] == value)
        .collect()
}

/// The README's walkthrough, its ports changed to `api_port` and
/// `rx_port`, run in `dir` as a reader's shell runs pasted blocks: one after
/// another, with no `set -e` (each block must stop itself at its first
/// error), then stopping what it started.
async fn run_walkthrough(dir: &Path, api_port: u16, rx_port: u16) -> Walkthrough {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let blocks = walkthrough_blocks(&readme);
    assert!(blocks.len() >= 3, "the README has its walkthrough blocks");
    let script = blocks
        .join("\n")
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{api_port}"))
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{rx_port}"))
        .replace("--port 9000", &format!("--port {rx_port}"));
    assert!(
        !script.contains("9000") && !script.contains("8080"),
        "{script}"
    );
    // What the reader's shell would do at the end: stop what it started.
    let script = format!("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n{script}");
    let bin = Path::new(env!("CARGO_BIN_EXE_dispatch")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // In a process group of its own, so that what it started in the
    // background goes with it if it has to be stopped.
    let child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("DATABASE_URL")
        .env_remove("DISPATCH_SERVER__LISTEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs (the walkthrough needs bash, curl and jq)");
    let group = child.id().expect("a running bash");
    let out = match tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .status();
            panic!("the walkthrough did not finish within a minute (a loop waits forever?)");
        }
    };
    Walkthrough {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        log: std::fs::read_to_string(dir.join("dispatch.log")).unwrap_or_default(),
    }
}

struct Walkthrough {
    /// The last block's status.
    success: bool,
    stdout: String,
    stderr: String,
    log: String,
}

impl std::fmt::Display for Walkthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--- stdout\n{}\n--- stderr\n{}\n--- dispatch.log\n{}",
            self.stdout, self.stderr, self.log
        )
    }
}

#[tokio::test]
async fn the_readme_walkthrough_runs_as_written_and_ends_with_a_verified_delivery() {
    let (api_port, rx_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let w = run_walkthrough(dir.path(), api_port, rx_port).await;
    assert!(w.success, "the walkthrough failed:\n{w}");
    let stdout = &w.stdout;

    // Every block went through to its end.
    assert!(
        stdout.contains("ready: the service answers and TOKEN is set"),
        "{w}"
    );
    assert!(stdout.contains("state: Delivered"), "{w}");
    // The receiver printed the delivery, its signature verified.
    let deliveries = lines_with(stdout, "method", "POST");
    assert_eq!(deliveries.len(), 1, "one delivery:\n{w}");
    let d = &deliveries[0];
    assert_eq!(d["signature"], "valid", "{d}");
    assert_eq!(d["path"], "/hooks");
    assert_eq!(d["body"]["payload"], "Hello, World!");
    assert_eq!(d["body"]["originalDeliveryTime"], "2020-01-01T00:00:00Z");
    assert_eq!(d["webhookId"], d["body"]["messageId"]);
    // The attempts, the reschedule and the cancel answered as the README says.
    let attempts: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["items"].is_array())
        .collect();
    assert_eq!(attempts.len(), 1, "{w}");
    assert_eq!(attempts[0]["items"][0]["outcome"], "Success");
    let scheduled = lines_with(stdout, "state", "Scheduled");
    assert!(
        scheduled
            .iter()
            .any(|m| m["deliveryTime"] == "2099-12-31T09:00:00Z"),
        "the reschedule:\n{w}"
    );
    let cancelled = lines_with(stdout, "state", "Cancelled");
    assert_eq!(cancelled.len(), 1, "the cancel:\n{w}");
    assert_eq!(cancelled[0]["payload"], "{\"orderId\":42}");
}

/// The quick start's `dispatch serve`, left running in `dir` on `port`
/// (without the walkthrough's permission to deliver to this machine), and
/// the development client it printed on its first start.
struct QuickStart {
    _child: tokio::process::Child,
    base: String,
    client: (String, String),
}

async fn quick_start(dir: &Path, port: u16) -> QuickStart {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("serve")
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS")
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let read = async {
        let (mut id, mut secret) = (None, None);
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(v) = line.trim().strip_prefix("client id:") {
                id = Some(v.trim().to_string());
            }
            if let Some(v) = line.trim().strip_prefix("client secret:") {
                secret = Some(v.trim().to_string());
                break;
            }
        }
        (id.expect("a client id"), secret.expect("a client secret"))
    };
    let client = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the first start prints a development client");
    // Its further messages are not needed; keep the pipe drained.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    QuickStart {
        _child: child,
        base: format!("http://127.0.0.1:{port}"),
        client,
    }
}

impl QuickStart {
    /// The targets the development client's account has, as the API lists them.
    async fn targets(&self) -> Vec<Value> {
        let http = reqwest::Client::new();
        let token: Value = http
            .post(format!("{}/oauth/token", self.base))
            .basic_auth(&self.client.0, Some(&self.client.1))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let list: Value = http
            .get(format!("{}/targets", self.base))
            .bearer_auth(token["access_token"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list["items"].as_array().unwrap().clone()
    }
}

/// A newcomer leaves the quick start running and pastes the walkthrough in
/// the same directory: its first block sees the port answered, says so and
/// starts nothing; the later blocks fail at once with the API's answer
/// instead of waiting forever, and nothing is created in the running
/// service's store.
#[tokio::test]
async fn the_walkthrough_beside_a_running_quick_start_stops_at_once_and_says_why() {
    let (api_port, rx_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let running = quick_start(dir.path(), api_port).await;
    let w = run_walkthrough(dir.path(), api_port, rx_port).await;
    assert!(!w.success, "{w}");
    assert!(
        w.stderr.contains(&format!(
            "http://127.0.0.1:{api_port}/health/ready answers already: stop what serves there"
        )),
        "{w}"
    );
    assert!(!w.stdout.contains("ready:"), "{w}");
    assert!(lines_with(&w.stdout, "method", "POST").is_empty(), "{w}");
    // The later blocks' requests were refused (no token), not retried.
    assert!(w.stderr.contains("401"), "{w}");
    assert!(running.targets().await.is_empty(), "{w}");
}

/// When the port is free but the walkthrough's service cannot start (the
/// quick start serves the same embedded store from another port), the
/// first block shows the service's own reason and stops.
#[tokio::test]
async fn the_walkthrough_shows_why_its_service_did_not_start() {
    let (quick_port, api_port, rx_port) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let running = quick_start(dir.path(), quick_port).await;
    let w = run_walkthrough(dir.path(), api_port, rx_port).await;
    assert!(!w.success, "{w}");
    assert!(
        w.stderr
            .contains("another Dispatch process is serving data/dispatch.db"),
        "the service's reason, from its log:\n{w}"
    );
    assert!(
        w.stderr.contains(&format!(
            "`dispatch serve --listen 127.0.0.1:{api_port}` did not answer at \
             http://127.0.0.1:{api_port}/health/ready: see above"
        )),
        "{w}"
    );
    assert!(!w.stdout.contains("ready:"), "{w}");
    assert!(running.targets().await.is_empty(), "{w}");
}

/// The Standard Webhooks headers a request carries, if any.
type Signed<'a> = Option<(&'a str, i64, String)>;

/// `dispatch listen` with a secret answers 401 to what it cannot verify (no
/// signature, a forged one, a replayed old one) and prints it as invalid;
/// without a secret it checks nothing; a GET is a probe, not printed.
#[tokio::test]
async fn the_listener_refuses_what_its_secret_does_not_sign() {
    use base64::{engine::general_purpose::STANDARD as B64, Engine};
    use tokio::io::{AsyncBufReadExt, BufReader};

    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let key = B64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let port = free_port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(["listen", "--port", &port.to_string(), "--secret", secret])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
    let banner = err.next_line().await.unwrap().unwrap();
    assert!(banner.contains("signatures checked"), "{banner}");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/hooks");
    let body = r#"{"payload":"x"}"#;
    let now = chrono::Utc::now().timestamp();
    let signed =
        |id: &str, ts: i64| dispatch::delivery::signing::sign(&key, id, ts, body.as_bytes());

    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
    // (webhook-id, timestamp, signature) sent, the status and the verdict.
    let cases: [(Signed, u16, &str); 4] = [
        (Some(("msg_1", now, signed("msg_1", now))), 200, "valid"),
        (None, 401, "invalid"),
        (Some(("msg_2", now, signed("msg_1", now))), 401, "invalid"),
        (
            Some(("msg_3", now - 3600, signed("msg_3", now - 3600))),
            401,
            "invalid",
        ),
    ];
    for (headers, status, verdict) in cases {
        let mut request = http.post(&url).body(body);
        if let Some((id, ts, sig)) = &headers {
            request = request
                .header("webhook-id", *id)
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", sig);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            status,
            "{headers:?}"
        );
        // The GET above printed nothing: the next line is this request's.
        let line: Value = serde_json::from_str(&out.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(line["signature"], verdict, "{line}");
        assert_eq!(line["body"]["payload"], "x");
    }
    child.kill().await.unwrap();
}

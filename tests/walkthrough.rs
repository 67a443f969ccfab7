//! The README's walkthrough, run as written: its `sh walkthrough` blocks,
//! in order, in one bash, with the `dispatch` this build made on the PATH,
//! in a fresh directory. Only the two ports are changed (to free ones), so
//! that the test can run beside others. It needs bash, curl and sed, as the
//! README says; without them it fails, saying so.

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

#[tokio::test]
async fn the_readme_walkthrough_runs_as_written_and_ends_with_a_verified_delivery() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let blocks = walkthrough_blocks(&readme);
    assert!(blocks.len() >= 3, "the README has its walkthrough blocks");
    let (api_port, rx_port) = (free_port(), free_port());
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
    let script =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n{script}");

    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_dispatch")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{api_port}"))
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the walkthrough finishes within a minute")
        .expect("bash runs (the walkthrough needs bash, curl and sed)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = std::fs::read_to_string(dir.path().join("dispatch.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the walkthrough failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- dispatch.log\n{log}",
        out.status
    );

    // The receiver printed the delivery, its signature verified.
    let deliveries = lines_with(&stdout, "method", "POST");
    assert_eq!(deliveries.len(), 1, "one delivery:\n{stdout}");
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
    assert_eq!(attempts.len(), 1, "{stdout}");
    assert_eq!(attempts[0]["items"][0]["outcome"], "Success");
    let scheduled = lines_with(&stdout, "state", "Scheduled");
    assert!(
        scheduled
            .iter()
            .any(|m| m["deliveryTime"] == "2099-12-31T09:00:00Z"),
        "the reschedule:\n{stdout}"
    );
    let cancelled = lines_with(&stdout, "state", "Cancelled");
    assert_eq!(cancelled.len(), 1, "the cancel:\n{stdout}");
    assert_eq!(cancelled[0]["payload"], "{\"orderId\":42}");
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

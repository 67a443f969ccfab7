//! moto server, standing in for Amazon SQS and SNS. `scripts/test` starts one
//! and exports DISPATCH_TEST_MOTO_URL; without it a test starts its own from
//! `.venv-moto`, or fails saying how to get one.

use std::{path::PathBuf, time::Duration};

pub struct Moto {
    pub url: String,
    _child: Option<tokio::process::Child>,
}

impl Moto {
    pub async fn start() -> Self {
        if let Ok(url) = std::env::var("DISPATCH_TEST_MOTO_URL") {
            return Self { url, _child: None };
        }
        let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-moto/bin/moto_server");
        assert!(
            bin.exists(),
            "moto server is needed for the SQS/SNS tests: run scripts/test (it installs moto[server] into .venv-moto), \
             or set DISPATCH_TEST_MOTO_URL to a running moto server"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("moto_server starts");
        let url = format!("http://127.0.0.1:{port}");
        // The server says so when it listens ("Running on ..."); its output
        // is read to the end, so that a full pipe never stops it.
        let (lines, mut said) = tokio::sync::mpsc::unbounded_channel::<String>();
        let outputs: [Box<dyn tokio::io::AsyncRead + Send + Unpin>; 2] = [
            Box::new(child.stdout.take().expect("piped")),
            Box::new(child.stderr.take().expect("piped")),
        ];
        for output in outputs {
            let lines = lines.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut output = tokio::io::BufReader::new(output).lines();
                while let Ok(Some(line)) = output.next_line().await {
                    let _ = lines.send(line);
                }
            });
        }
        drop(lines);
        let listening = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = said.recv().await {
                if line.contains("Running on") {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            matches!(listening, Ok(true)),
            "moto server did not start on {url}"
        );
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("moto server says it runs on {url}, but: {e}"));
        Self {
            url,
            _child: Some(child),
        }
    }
}

/// An SDK config for moto with static test credentials.
pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await
}

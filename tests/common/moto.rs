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
        let child = tokio::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("moto_server starts");
        let url = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Self {
                    url,
                    _child: Some(child),
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("moto server did not start on {url}");
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

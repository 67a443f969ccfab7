//! The admin commands run beside a server on the embedded store: an operator
//! revokes a client or adds a person without stopping the service; only a
//! second `serve` is refused.

use std::time::Instant;

use super::*;

async fn admin(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = dispatch()
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "dispatch {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

async fn token_status(http: &reqwest::Client, base: &str, id: &str, secret: &str) -> u16 {
    http.post(format!("{base}/oauth/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn clients_and_users_are_managed_while_the_embedded_store_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, lines) = serve_in(dir.path(), "Get a token").await;
    let base = after(&lines, "Get a token:")
        .rsplit(' ')
        .next()
        .unwrap()
        .trim_end_matches("/oauth/token")
        .to_string();
    let http = reqwest::Client::new();

    let out = admin(
        dir.path(),
        &["clients", "create", "--account", "demo", "--name", "second"],
    )
    .await;
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (id, secret) = (
        created["clientId"].as_str().unwrap(),
        created["clientSecret"].as_str().unwrap(),
    );
    let token: Value = http
        .post(format!("{base}/oauth/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let bearer = token["access_token"].as_str().unwrap().to_string();
    let targets = |bearer: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.get(format!("{base}/targets"))
                .bearer_auth(bearer)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(targets(bearer.clone()).await, 200);

    let listed: Value = serde_json::from_slice(
        &admin(dir.path(), &["clients", "list", "--account", "demo"])
            .await
            .stdout,
    )
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    admin(
        dir.path(),
        &[
            "users",
            "create",
            "--account",
            "demo",
            "--email",
            "ops@example.com",
            "--generate-password",
        ],
    )
    .await;

    // Revoked beside the running server: its token requests at once, its
    // tokens within 5 s.
    admin(dir.path(), &["clients", "revoke", id]).await;
    assert_eq!(token_status(&http, &base, id, secret).await, 401);
    let revoked = Instant::now();
    while targets(bearer.clone()).await != 401 {
        assert!(
            revoked.elapsed() < Duration::from_secs(5),
            "the revoked client's token still works after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A second server on the same file is still refused.
    let other = dispatch()
        .arg("serve")
        .current_dir(dir.path())
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .output()
        .await
        .unwrap();
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains("dispatch.db.lock"));
    server.start_kill().unwrap();
    server.wait().await.unwrap();
}

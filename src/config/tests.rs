//! Defaults, layering and validation of the configuration.

use super::*;

#[test]
fn defaults_match_the_contract() {
    let c = Config::defaults();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.retry.immediate_retries, 1);
    assert_eq!(c.retry.minute_rounds, 5);
    assert_eq!(c.retry.hour_cycles, 24);
    assert_eq!(c.retry.minute_delay, Duration::from_secs(60));
    assert_eq!(c.retry.hour_delay, Duration::from_secs(3600));
    assert_eq!(c.retry.max_retry_after, Duration::from_secs(3600));
    assert_eq!(c.retention.delivered, Duration::from_secs(86400));
    assert_eq!(c.retention.cancelled, Duration::from_secs(86400));
    assert_eq!(c.retention.failed_attempts, Duration::from_secs(7 * 86400));
    assert_eq!(c.retention.dead_letters, Duration::from_secs(7 * 86400));
    assert_eq!(c.retention.interval, Duration::from_secs(60));
    assert_eq!(c.sweeper.lease, Duration::from_secs(30));
    assert!(!c.webhook.allow_private_networks);
    assert!(!c.aws.allow_default_credentials);
    assert_eq!(c.webhook.timeout, Duration::from_secs(10));
    assert_eq!(c.webhook.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.sweeper.target_concurrency, 32);
    assert!(c.database.url.is_empty());
    assert_eq!(c.auth.token_attempts, 10);
    assert_eq!(c.auth.token_window, Duration::from_secs(60));
    assert_eq!(c.api.rate_limit, 0);
}

#[test]
fn environment_overrides_file_and_defaults() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "extra.toml",
            "[retry]\nminute_delay = \"2s\"\nhour_cycles = 3\n",
        )?;
        jail.set_env("DISPATCH_RETRY__MINUTE_DELAY", "200ms");
        jail.set_env("DATABASE_URL", "postgres://x@localhost/db");
        let c = Config::load(Some(Path::new("extra.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(c.retry.minute_delay, Duration::from_millis(200));
        assert_eq!(c.retry.hour_cycles, 3);
        assert_eq!(c.database.url, "postgres://x@localhost/db");
        Ok(())
    });
}

const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

#[test]
fn without_a_key_secrets_are_not_sealed() {
    let c = Config::defaults();
    assert!(c.secrets.sealer().unwrap().is_none());
    assert!(c.secrets.previous_keys.is_empty());
}

#[test]
fn a_key_from_the_environment_or_a_file_makes_a_sealer_with_its_previous_keys() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("DISPATCH_SECRETS__ENCRYPTION_KEY", KEY_A);
        let c = Config::load(None).map_err(|e| e.to_string())?;
        let from_env = c.secrets.sealer().unwrap().unwrap();
        assert!(!format!("{c:?}").contains(KEY_A), "Debug hides the key");

        jail.clear_env();
        jail.create_file("key.b64", &format!("{KEY_A}\n"))?;
        jail.create_file(
            "extra.toml",
            &format!(
                "[secrets]\nencryption_key_file = \"key.b64\"\nprevious_keys = [\"{KEY_B}\"]\n"
            ),
        )?;
        let c = Config::load(Some(Path::new("extra.toml"))).map_err(|e| e.to_string())?;
        let from_file = c.secrets.sealer().unwrap().unwrap();
        assert_eq!(from_file.current_key_id(), from_env.current_key_id());
        let old = Sealer::new(SealingKey::from_base64(KEY_B).unwrap(), vec![]);
        let sealed = old.seal(b"s", b"row");
        assert_eq!(
            from_file
                .open(&sealed.key_id, &sealed.bytes, b"row")
                .unwrap(),
            b"s"
        );
        assert!(
            !format!("{c:?}").contains(KEY_B),
            "Debug hides previous keys"
        );
        Ok(())
    });
}

#[test]
fn bad_keys_are_refused_naming_the_setting_and_not_the_value() {
    let refused = |secrets: SecretsConfig| -> String {
        let mut c = Config::defaults();
        c.secrets = secrets;
        c.validate().unwrap_err().to_string()
    };
    let short = "c2hvcnQ=";
    let err = refused(SecretsConfig {
        encryption_key: Some(KeyText::new(short)),
        ..Default::default()
    });
    assert!(
        err.contains("secrets.encryption_key must be 32 bytes"),
        "{err}"
    );
    assert!(!err.contains(short), "{err}");
    let err = refused(SecretsConfig {
        encryption_key: Some(KeyText::new("not base64!")),
        ..Default::default()
    });
    assert!(
        err.contains("secrets.encryption_key is not valid base64"),
        "{err}"
    );
    let err = refused(SecretsConfig {
        encryption_key: Some(KeyText::new(KEY_A)),
        encryption_key_file: Some("key.b64".into()),
        ..Default::default()
    });
    assert!(err.contains("not both"), "{err}");
    let err = refused(SecretsConfig {
        encryption_key: Some(KeyText::new(KEY_A)),
        previous_keys: vec![KeyText::new(KEY_B), KeyText::new(short)],
        ..Default::default()
    });
    assert!(
        err.contains("secrets.previous_keys[1] must be 32 bytes"),
        "{err}"
    );
    let err = refused(SecretsConfig {
        encryption_key_file: Some("/nonexistent/dispatch.key".into()),
        ..Default::default()
    });
    assert!(
        err.contains("secrets.encryption_key_file (/nonexistent/dispatch.key) cannot be read"),
        "{err}"
    );
    let err = refused(SecretsConfig {
        previous_keys: vec![KeyText::new(KEY_B)],
        ..Default::default()
    });
    assert!(err.contains("needs a current key"), "{err}");
}

#[test]
fn a_bad_duration_is_refused_with_its_key() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("DISPATCH_RETRY__HOUR_DELAY", "soon");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.to_lowercase().contains("hour_delay"), "{err}");
        Ok(())
    });
}

#[test]
fn private_hosts_are_names_given_as_a_list_in_the_environment() {
    figment::Jail::expect_with(|jail| {
        jail.set_env(
            "DISPATCH_WEBHOOK__ALLOW_PRIVATE_HOSTS",
            r#"["moto", "Queue.Local"]"#,
        );
        let c = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(c.webhook.allow_private_hosts, ["moto", "Queue.Local"]);
        assert!(!c.webhook.allow_private_networks, "the rule still holds");
        let names = c.guard_names();
        assert!(names.allows_private("moto") && names.allows_private("queue.local"));
        assert!(!names.allows_private("postgres"));
        Ok(())
    });
    for bad in [
        "10.0.0.5",
        "[::1]",
        "http://moto",
        "moto:5000",
        "",
        "two words",
    ] {
        let mut c = Config::defaults();
        c.webhook.allow_private_hosts = vec![bad.to_string()];
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("webhook.allow_private_hosts"), "{bad}: {err}");
    }
    assert!(Config::defaults().webhook.allow_private_hosts.is_empty());
}

#[test]
fn connection_limits_default_as_documented_and_zero_or_nonsense_is_refused_by_key() {
    figment::Jail::expect_with(|jail| {
        let c = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(c.server.header_timeout, Duration::from_secs(10));
        assert_eq!(c.server.body_timeout, Duration::from_secs(30));
        assert_eq!(c.server.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.server.max_connections, 10_000);
        for (key, bad) in [
            ("DISPATCH_SERVER__HEADER_TIMEOUT", "0s"),
            ("DISPATCH_SERVER__BODY_TIMEOUT", "0ms"),
            ("DISPATCH_SERVER__IDLE_TIMEOUT", "0s"),
            ("DISPATCH_SERVER__MAX_CONNECTIONS", "0"),
            ("DISPATCH_SERVER__HEADER_TIMEOUT", "soon"),
        ] {
            jail.set_env(key, bad);
            let err = Config::load(None).unwrap_err().to_string().to_lowercase();
            let name = key.trim_start_matches("DISPATCH_SERVER__").to_lowercase();
            assert!(err.contains(&name), "{key}={bad}: {err}");
            let fine = if key.ends_with("CONNECTIONS") {
                "1"
            } else {
                "1s"
            };
            jail.set_env(key, fine);
        }
        Ok(())
    });
}

#[test]
fn trusted_proxies_are_cidrs_or_addresses_and_anything_else_is_refused_by_key() {
    figment::Jail::expect_with(|jail| {
        let c = Config::load(None).map_err(|e| e.to_string())?;
        assert!(c.server.trusted_proxies.is_empty(), "none by default");
        jail.set_env(
            "DISPATCH_SERVER__TRUSTED_PROXIES",
            r#"["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"]"#,
        );
        let c = Config::load(None).map_err(|e| e.to_string())?;
        let got: Vec<String> = c
            .server
            .trusted_proxies
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]);
        jail.set_env("DISPATCH_SERVER__TRUSTED_PROXIES", r#"["proxy.local"]"#);
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("trusted_proxies"), "{err}");
        Ok(())
    });
}

//! What can be checked of `docker-compose.yml` and `Dockerfile` without a
//! container engine or a registry: the compose file parses and its
//! references resolve, its images are pinned (whether a tag exists only a
//! registry can say, and the tests reach none), the demo setup it runs is
//! idempotent against a real store, the aws profile's target is created and
//! delivered to with the compose file's own commands and environment while
//! `moto` resolves to a private address as on the compose network, the image
//! that builds has the Rust the crate needs and the image that runs the same
//! Debian, the binary it carries is stripped, and the Dockerfile copies paths
//! that exist and gives the embedded store a directory its user can write.

mod common;

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    sync::Arc,
    time::Duration,
};

use clap::Parser;
use common::{in_ms, moto::Moto, proxy::Proxy, TestApp, TestDb};
use dispatch::{cli::Cli, config::Config, delivery::resolver::Resolver, domain::ids::AccountId};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn compose() -> Yaml {
    let text = std::fs::read_to_string(repo("docker-compose.yml")).unwrap();
    let mut docs = YamlLoader::load_from_str(&text).expect("docker-compose.yml parses");
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

fn keys(map: &Yaml) -> BTreeSet<String> {
    map.as_hash()
        .map(|h| {
            h.keys()
                .filter_map(|k| k.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A `depends_on` as a list or as a map of conditions.
fn depends_on(service: &Yaml) -> BTreeSet<String> {
    match &service["depends_on"] {
        Yaml::Array(names) => names
            .iter()
            .filter_map(|n| n.as_str().map(String::from))
            .collect(),
        map @ Yaml::Hash(_) => keys(map),
        _ => BTreeSet::new(),
    }
}

#[test]
fn the_compose_file_parses_and_every_reference_resolves() {
    let doc = compose();
    let services = keys(&doc["services"]);
    let volumes = keys(&doc["volumes"]);
    assert!(services.contains("dispatch") && services.contains("postgres"));
    for name in &services {
        let s = &doc["services"][name.as_str()];
        for needed in depends_on(s) {
            assert!(
                services.contains(&needed),
                "{name} depends on unknown {needed}"
            );
        }
        for v in s["volumes"].as_vec().into_iter().flatten() {
            let source = v.as_str().unwrap().split(':').next().unwrap();
            if !source.starts_with('.') && !source.starts_with('/') {
                assert!(
                    volumes.contains(source),
                    "{name} mounts undeclared volume {source}"
                );
            }
        }
        if let Some(context) = s["build"].as_str() {
            assert!(
                repo(context).join("Dockerfile").exists(),
                "{name} builds {context}"
            );
        }
    }
}

#[test]
fn every_compose_image_is_pinned_and_moto_to_a_full_release() {
    let doc = compose();
    let mut images = 0;
    for name in keys(&doc["services"]) {
        if let Some(image) = doc["services"][name.as_str()]["image"].as_str() {
            images += 1;
            let (_, tag) = image
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("{image} has a tag"));
            assert_ne!(tag, "latest", "{name}: pin the image");
        }
    }
    assert!(
        images >= 3,
        "postgres, moto and the AWS CLI are images: {images}"
    );
    // moto publishes `latest` and full versions only: `moto:5` is no tag.
    let moto = doc["services"]["moto"]["image"].as_str().unwrap();
    let version = moto.rsplit_once(':').unwrap().1;
    assert_eq!(
        version
            .split('.')
            .filter(|p| p.parse::<u32>().is_ok())
            .count(),
        3,
        "moto is pinned to a release: {moto}"
    );
}

#[test]
fn every_account_the_compose_comments_name_is_the_demo_account() {
    let text = std::fs::read_to_string(repo("docker-compose.yml")).unwrap();
    let accounts: BTreeSet<&str> = text
        .split("--account")
        .skip(1)
        .filter_map(|rest| {
            rest.trim_start_matches(['=', ' '])
                .split_whitespace()
                .next()
        })
        .collect();
    assert_eq!(accounts, BTreeSet::from(["demo"]), "{text}");
}

#[tokio::test]
async fn the_demo_target_setup_run_twice_leaves_one_target() {
    let doc = compose();
    let command: Vec<String> = doc["services"]["aws-target"]["command"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let t = common::dispatch_json(&db.url, &command).await;
        ids.push(t["targetId"].as_str().unwrap().to_string());
    }
    assert_eq!(ids[0], ids[1], "the second run prints the first target");
    let store = common::open_any_store(&db.url).await;
    assert_eq!(
        store
            .list_targets(&AccountId::parse("demo").unwrap(), None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// A service's `command` (or `entrypoint`), as the container gets it.
fn args(service: &Yaml, key: &str) -> Vec<String> {
    service[key]
        .as_vec()
        .unwrap_or_else(|| panic!("{key} is a list"))
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// A service's `environment` (a map, or a list of `KEY=VALUE`), as the
/// container gets it.
fn environment(service: &Yaml) -> Vec<(String, String)> {
    let scalar = |v: &Yaml| match v {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Integer(i) => i.to_string(),
        other => panic!("an environment value is a scalar: {other:?}"),
    };
    match &service["environment"] {
        Yaml::Hash(vars) => vars
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_string(), scalar(v)))
            .collect(),
        Yaml::Array(vars) => vars
            .iter()
            .map(|kv| {
                let (k, v) = kv.as_str().unwrap().split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The configuration `dispatch` loads in the container of `service`: its
/// compose environment as the process environment, `DATABASE_URL` the
/// test's database instead of the `postgres` service.
#[allow(clippy::result_large_err)] // figment::Jail's closures return figment::Error
fn config_in(service: &str, db_url: &str) -> Config {
    let vars = environment(&compose()["services"][service]);
    assert!(
        vars.iter().any(|(k, _)| k == "DATABASE_URL"),
        "{service} names its database"
    );
    let mut loaded = None;
    figment::Jail::expect_with(|jail| {
        for (key, value) in &vars {
            jail.set_env(key, if key == "DATABASE_URL" { db_url } else { value });
        }
        loaded = Some(Config::load(None).map_err(|e| e.to_string())?);
        Ok(())
    });
    loaded.expect("the configuration loads")
}

/// A loopback address of its own with `port` free on it, where moto is
/// reachable as the compose network has it: `moto:5000`.
async fn moto_on_its_port(moto: &Moto, port: u16) -> (IpAddr, Proxy) {
    let upstream = moto.url.trim_start_matches("http://").to_string();
    for _ in 0..20 {
        let [a, b, c] = rand::random::<[u8; 3]>().map(|n| n.max(1));
        let ip = IpAddr::V4(Ipv4Addr::new(127, a, b, c));
        if let Ok(proxy) = Proxy::start_on(SocketAddr::new(ip, port), upstream.clone()).await {
            return (ip, proxy);
        }
    }
    panic!("no loopback address had port {port} free");
}

/// `docker compose --profile aws up`, but for the containers: moto answers
/// under its service name at a private address (loopback here; a 172.x
/// address on a compose network, which the guard refuses alike), `aws-setup`
/// makes its queue, `aws-target` runs its command in the compose file's
/// environment (in process: a process of its own could not be given the
/// names this test resolves), and `dispatch`, in its own compose
/// environment, delivers a message to that target into the queue.
#[tokio::test]
async fn the_aws_profile_creates_its_target_and_delivers_to_moto_on_a_private_address() {
    let doc = compose();
    let services = &doc["services"];
    let command = args(&services["aws-target"], "command");
    let cli = Cli::try_parse_from(std::iter::once("dispatch".to_string()).chain(command.clone()))
        .expect("the image's entrypoint takes aws-target's command");
    assert!(cli.config.is_none());
    let target_config: Value = command
        .iter()
        .find_map(|a| a.strip_prefix("--target-config="))
        .map(|json| serde_json::from_str(json).unwrap())
        .expect("aws-target gives --target-config");
    let endpoint = url::Url::parse(target_config["endpointUrl"].as_str().unwrap()).unwrap();
    let (host, port) = (
        endpoint.host_str().unwrap().to_string(),
        endpoint.port().unwrap(),
    );
    assert_eq!(host, "moto", "the endpoint is the moto service");
    assert!(
        keys(services).contains(&host),
        "{host} is a service of the compose file"
    );
    let setup = args(&services["aws-setup"], "entrypoint");
    let queue_name = setup
        .iter()
        .skip_while(|a| *a != "--queue-name")
        .nth(1)
        .expect("aws-setup creates a queue")
        .clone();

    let moto = Moto::start().await;
    let (private, _moto_proxy) = moto_on_its_port(&moto, port).await;
    let names = Resolver::fixed([(host.as_str(), vec![private])]);
    let sdk = common::moto::sdk_config(&moto.url).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue = sqs
        .create_queue()
        .queue_name(&queue_name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();

    // aws-target: the target is created, the endpoint passing the guard.
    let db = Arc::new(TestDb::new().await);
    let mut config = config_in("aws-target", &db.url);
    config.resolver = names.clone();
    dispatch::cli::run_configured(cli.command, config)
        .await
        .expect("aws-target creates its target");
    let store = common::open_any_store(&db.url).await;
    let targets = store
        .list_targets(&AccountId::parse("demo").unwrap(), None, 10)
        .await
        .unwrap();
    drop(store);
    assert_eq!(targets.len(), 1, "{targets:?}");
    let target_id = targets[0].id.to_string();

    // dispatch: in its own compose environment, it delivers to moto.
    let served = config_in("dispatch", &db.url);
    let app = TestApp::spawn_on(db, |c| {
        let listen = c.server.listen;
        *c = served;
        c.server.listen = listen;
        c.resolver = names.clone();
    })
    .await;
    assert!(
        !app.running().state.config.webhook.allow_private_networks,
        "dispatch lets moto through, not every private address"
    );
    let api = app.api("demo").await;
    let m = api.schedule(&target_id, &in_ms(0), "through moto").await;
    let id = m["messageId"].as_str().unwrap().to_string();
    let delivered = common::eventually(Duration::from_secs(10), "a final state", async || {
        let m = api.message(&id).await;
        if m["state"] == "Scheduled" {
            Err(m)
        } else {
            Ok(m)
        }
    })
    .await;
    assert_eq!(delivered["state"], "Delivered", "{delivered}");
    let body = common::eventually(
        Duration::from_secs(10),
        "the message in the queue",
        async || {
            let got = sqs
                .receive_message()
                .queue_url(&queue)
                .max_number_of_messages(10)
                .send()
                .await
                .unwrap();
            for message in got.messages() {
                let body: Value = serde_json::from_str(message.body().unwrap()).unwrap();
                if body["messageId"] == id.as_str() {
                    sqs.delete_message()
                        .queue_url(&queue)
                        .receipt_handle(message.receipt_handle().unwrap())
                        .send()
                        .await
                        .unwrap();
                    return Ok(body);
                }
            }
            Err(got.messages().len())
        },
    )
    .await;
    assert_eq!(body["payload"], "through moto");
    app.shutdown().await;
}

/// A release as numbers: `1.89` is [1, 89].
fn release(text: &str) -> Vec<u32> {
    text.split('.')
        .map(|n| n.parse().unwrap_or_else(|_| panic!("{text} is a release")))
        .collect()
}

/// The image of every `FROM` line, in order.
fn stages(dockerfile: &str) -> Vec<&str> {
    dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .map(|rest| rest.split_whitespace().next().unwrap())
        .collect()
}

#[test]
fn the_build_image_has_the_rust_the_crate_needs_and_runs_on_the_debian_it_built_for() {
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let images = stages(&dockerfile);
    assert!(images.len() >= 2, "a build and a run stage: {images:?}");
    // `rust:1-bookworm`: the newest 1.x, on Debian bookworm.
    let build = images[0]
        .strip_prefix("rust:")
        .unwrap_or_else(|| panic!("the first stage builds with rust:, not {}", images[0]));
    let (version, debian) = build
        .split_once('-')
        .unwrap_or_else(|| panic!("rust:{build} names its Debian release"));
    let manifest = std::fs::read_to_string(repo("Cargo.toml")).unwrap();
    let needed = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .expect("Cargo.toml states its rust-version")
        .trim_matches('"');
    // A tag names the newest release that starts with it: enough when it
    // matches the needed version as far as it goes, or is greater there.
    let (have, need) = (release(version), release(needed));
    let enough = have
        .iter()
        .zip(&need)
        .find(|(h, n)| h != n)
        .is_none_or(|(h, n)| h > n);
    assert!(
        enough,
        "rust:{build} may be older than the rust-version {needed}"
    );
    // The binary links to the build image's glibc: it runs on the same release.
    let run = images.last().unwrap();
    let run_release = run
        .strip_prefix("debian:")
        .and_then(|tag| tag.split('-').next())
        .unwrap_or_else(|| panic!("the run stage is a debian: image, not {run}"));
    assert_eq!(run_release, debian, "built on {debian}, run on {run}");
}

#[test]
fn the_dockerfile_copies_what_exists_and_runs_where_its_user_can_write() {
    let text = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let ignored = std::fs::read_to_string(repo(".dockerignore")).unwrap_or_default();
    for line in text.lines().map(str::trim) {
        let Some(args) = line.strip_prefix("COPY ") else {
            continue;
        };
        if args.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = args.split_whitespace().collect();
        for source in &parts[..parts.len() - 1] {
            assert!(repo(source).exists(), "COPY {source}: no such path");
            assert!(
                !ignored.lines().any(|i| i.trim() == *source),
                "COPY {source}, which .dockerignore leaves out"
            );
        }
    }
    // The image that runs: its working directory is made and given to its user.
    let run = text.rsplit("\nFROM ").next().unwrap();
    let workdir = run
        .lines()
        .find_map(|l| l.trim().strip_prefix("WORKDIR "))
        .expect("the run stage sets WORKDIR");
    assert!(
        run.contains(&format!("chown dispatch {workdir}")),
        "{workdir} belongs to the user"
    );
    assert!(run.contains("USER dispatch"));
    assert!(
        !run.contains("COPY config"),
        "the config is compiled in: a copy in the image is never read"
    );
}

/// The profile of every `cargo build` the Dockerfile runs (`release` for
/// `--release`, `dev` for neither).
fn build_profiles(dockerfile: &str) -> Vec<String> {
    dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.find("cargo build ").map(|at| &l[at..]))
        .map(|command| {
            let command = &command[..command.find('&').unwrap_or(command.len())];
            let words: Vec<&str> = command.split_whitespace().collect();
            match words.iter().position(|w| *w == "--profile") {
                Some(i) => words[i + 1].to_string(),
                None if words.contains(&"--release") => "release".to_string(),
                None => "dev".to_string(),
            }
        })
        .collect()
}

#[test]
fn the_image_carries_a_build_without_debug_information() {
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let profiles = build_profiles(&dockerfile);
    assert!(
        profiles.len() >= 2,
        "the dependencies' layer and Dispatch: {profiles:?}"
    );
    let profile = &profiles[0];
    assert!(
        profiles.iter().all(|p| p == profile),
        "the dependencies are built as Dispatch is: {profiles:?}"
    );
    // The profile's settings, as Cargo.toml writes them: its own, else the
    // release profile's that it inherits.
    use figment::providers::{Format, Toml};
    let manifest: Value = figment::Figment::from(Toml::file_exact(repo("Cargo.toml")))
        .extract()
        .expect("Cargo.toml parses");
    let own = &manifest["profile"][profile.as_str()];
    if profile != "release" {
        assert_eq!(
            own["inherits"], "release",
            "[profile.{profile}] is a release build: {own}"
        );
    }
    let setting = |key: &str| match &own[key] {
        Value::Null if profile != "release" => manifest["profile"]["release"][key].clone(),
        value => value.clone(),
    };
    let debug = setting("debug");
    assert!(
        matches!(debug, Value::Null | Value::Bool(false)) || debug == 0 || debug == "none",
        "the image's build ({profile}) keeps debug information: debug = {debug}"
    );
    let strip = setting("strip");
    assert!(
        strip == "debuginfo" || strip == "symbols" || strip == true,
        "the image's build ({profile}) leaves the standard library's debug information in: strip = {strip}"
    );
    // The run stage takes that build's binary.
    let copied = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("COPY --from=build "))
        .find_map(|args| args.split_whitespace().next())
        .expect("the run stage copies the binary from the build stage");
    assert_eq!(copied, format!("/src/target/{profile}/dispatch"));
}

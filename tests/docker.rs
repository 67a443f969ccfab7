//! What can be checked of `docker-compose.yml` and `Dockerfile` without a
//! container engine: the compose file parses and its references resolve,
//! its images carry tags that exist, the demo setup it runs is idempotent
//! against a real store, and the Dockerfile copies paths that exist and
//! gives the embedded store a directory its user can write.

mod common;

use std::{collections::BTreeSet, path::Path};

use common::TestDb;
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
        if let Some(image) = s["image"].as_str() {
            let (_, tag) = image
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("{image} has a tag"));
            assert_ne!(tag, "latest", "{name}: pin the image");
        }
    }
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
    assert_eq!(store.list_targets("demo", None, 10).await.unwrap().len(), 1);
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

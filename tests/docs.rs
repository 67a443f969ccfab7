//! The documentation held to the code: where a sentence of README.md or
//! docs/ states a number or a rule the code decides, a test here computes
//! it with the code and compares. The checks that need a running service
//! (its metrics, its OpenAPI document) are in `docs/served.rs` and run on
//! the store `DISPATCH_TEST_STORE` names.

mod common;
#[path = "docs/markdown.rs"]
mod markdown;
#[path = "docs/served.rs"]
mod served;

use std::{path::Path, time::Duration};

use chrono::{DateTime, Utc};
use dispatch::{
    config::{Config, DEFAULT_TOML},
    domain::{
        retry::RetryPolicy,
        schedule::{parse_zone, CronExpr, Every, Recurrence, Rule},
    },
};
use markdown::{anchors, read, rows_under, section};
use serde_json::Value;

/// The retry ladder table of docs/api.md, row by row, against the ladder
/// the default configuration makes: each attempt's cycle and round, the
/// wait after the attempt before it, the waits added up since the first,
/// and the dead letter after the last.
#[test]
fn the_retry_ladder_table_is_the_ladder_the_code_computes() {
    let api = read("docs/api.md");
    let policy = RetryPolicy::from(&Config::defaults().retry);
    let rows = rows_under(&api, "The ladder", "attempt");
    let (per_round, per_cycle, max) = (
        policy.attempts_per_round(),
        policy.attempts_per_cycle(),
        policy.max_attempts(),
    );
    let mut seen = Vec::new();
    let mut dead_letter_row = false;
    for row in &rows {
        let first = row[0].as_str();
        if let Some(after) = first.strip_prefix("after ") {
            let n: u32 = after.parse().expect("`after N`");
            assert_eq!(n, max, "the dead-letter row follows the last attempt");
            assert_eq!(policy.delay_after(n), None, "no wait after attempt {n}");
            assert_eq!(row[3], "dead letter", "{row:?}");
            dead_letter_row = true;
            continue;
        }
        let Ok(n) = first.parse::<u32>() else {
            assert_eq!(first, "…", "a row is an attempt, `…` or `after N`: {row:?}");
            continue;
        };
        assert!((1..=max).contains(&n), "attempt {n} is on the ladder");
        let cycle = (n - 1) / per_cycle + 1;
        let round = (n - 1) % per_cycle / per_round + 1;
        assert_eq!(row[1], cycle.to_string(), "cycle of attempt {n}");
        assert_eq!(row[2], round.to_string(), "round of attempt {n}");
        if n == 1 {
            assert_eq!(row[3], "—", "attempt 1 waits for its delivery time");
        } else {
            let wait = policy.delay_after(n - 1).expect("a retry");
            assert_eq!(duration(&row[3]), wait, "wait before attempt {n}: {row:?}");
        }
        let since: Duration = (1..n).map(|a| policy.delay_after(a).unwrap()).sum();
        assert_eq!(duration(&row[4]), since, "since the first, attempt {n}");
        seen.push(n);
    }
    assert!(dead_letter_row, "the table ends with the dead letter");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "attempts in order: {seen:?}"
    );
    // The table shows the start, a whole cycle and its turn to the next, and
    // the end of the ladder.
    for n in (1..=per_cycle + 2).chain(max - per_cycle + 1..=max) {
        assert!(seen.contains(&n), "the table shows attempt {n}");
    }
    let total: Duration = (1..max).map(|a| policy.delay_after(a).unwrap()).sum();
    let text = section(&api, "The ladder");
    assert!(
        text.contains(&format!("{max} attempts in all")),
        "the text says {max} attempts"
    );
    let (h, m) = (total.as_secs() / 3600, total.as_secs() % 3600 / 60);
    assert!(
        text.contains(&format!("{h} h {m} min after the first")),
        "the text says the last attempt starts {h} h {m} min after the first"
    );
}

/// `60s`, `1h 4min`, `0s`: the table's durations.
fn duration(cell: &str) -> Duration {
    humantime::parse_duration(cell).unwrap_or_else(|e| panic!("`{cell}` is a duration: {e}"))
}

fn instant(cell: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(cell)
        .unwrap_or_else(|e| panic!("`{cell}` is an RFC 3339 time: {e}"))
        .with_timezone(&Utc)
}

/// The daylight-saving and calendar examples of docs/api.md: the next run
/// of each schedule from each instant, as the schedule rules compute it.
/// And the rules stated beside them: an expression that never matches is
/// refused, `every` is at least a second.
#[test]
fn the_schedule_examples_are_what_the_rules_compute() {
    let api = read("docs/api.md");
    let rows = rows_under(&api, "The rule", "schedule");
    assert!(rows.len() >= 6, "the examples: {rows:?}");
    for row in &rows {
        let expr = row[0].trim_matches('`');
        let from = instant(&row[2]);
        let rule = Rule {
            recurrence: Recurrence::Cron(expr.parse().expect("a cron expression")),
            zone: parse_zone(&row[1]).expect("a zone"),
            anchor: from,
            end_at: None,
        };
        assert_eq!(
            rule.first_from(from),
            Some(instant(&row[3])),
            "`{expr}` in {} from {from}",
            row[1]
        );
    }
    let rule = section(&api, "The rule");
    assert!(rule.contains("(`0 0 30 2 *`) answers 400"));
    assert!("0 0 30 2 *".parse::<CronExpr>().is_err());
    assert!(rule.contains("a duration of at least `1s`"));
    assert!("1s".parse::<Every>().is_ok() && "999ms".parse::<Every>().is_err());
}

/// Every key of config/default.toml is a row of the configuration table in
/// docs/operations.md, with the same default; every row of that table names
/// a key the server reads.
#[test]
fn every_configuration_key_is_documented_with_its_default() {
    let ops = read("docs/operations.md");
    let rows = rows_under(&ops, "Configuration", "key");
    let documented: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r[0].trim_matches('`').to_string(), r[1].clone()))
        .collect();
    use figment::providers::{Format, Toml};
    let defaults: Value = figment::Figment::from(Toml::string(DEFAULT_TOML))
        .extract()
        .expect("the defaults parse");
    let mut keys = Vec::new();
    flatten("", &defaults, &mut keys);
    assert!(keys.len() > 40, "the defaults have their keys: {keys:?}");
    for (key, value) in &keys {
        let shown = match value {
            Value::String(s) if s.is_empty() => "`\"\"`".to_string(),
            Value::String(s) => format!("`{s}`"),
            other => format!("`{other}`"),
        };
        let row = documented.iter().find(|(k, _)| k == key);
        let Some((_, default)) = row else {
            panic!("config key {key} is not in the table of docs/operations.md");
        };
        assert_eq!(default, &shown, "the default of {key}");
    }
    // Rows beyond the defaults file: keys it leaves unset, which the
    // server reads all the same.
    let extra: Vec<&str> = documented
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !keys.iter().any(|(d, _)| d == k))
        .collect();
    let optional = optional_keys_read();
    for key in &extra {
        assert!(
            optional.iter().any(|(k, _)| k == key),
            "docs/operations.md documents {key}, which the server does not read"
        );
    }
    for (key, default) in &optional {
        let (_, shown) = documented
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{key} is documented"));
        match default {
            Some(d) => assert_eq!(shown, &format!("`{d}`"), "the default of {key}"),
            None => assert_eq!(shown, "unset", "{key} has no default"),
        }
    }
}

/// `section.key` and value, for every leaf of the defaults.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        leaf => out.push((prefix.to_string(), leaf.clone())),
    }
}

/// The keys the defaults file leaves out, each set in a file layered over
/// it and read back from the configuration the server builds (a key it did
/// not know would be ignored and read back empty), with the default the
/// server then gives it (None: unset).
fn optional_keys_read() -> Vec<(&'static str, Option<String>)> {
    use figment::providers::{Format, Toml};
    let layered = |extra: &str| -> Config {
        figment::Figment::from(Toml::string(DEFAULT_TOML))
            .merge(Toml::string(extra))
            .extract()
            .expect("the layered configuration parses")
    };
    let c = layered(
        "[auth.external]\nissuer = \"i\"\naudience = \"a\"\njwks_url = \"https://id.example/jwks\"\n\
         [secrets]\nencryption_key_file = \"/run/key\"\n",
    );
    let external = c.auth.external.expect("auth.external is read");
    assert_eq!(
        (external.issuer.as_str(), external.audience.as_str()),
        ("i", "a")
    );
    assert_eq!(external.jwks_url, "https://id.example/jwks");
    assert_eq!(
        c.secrets.encryption_key_file.as_deref(),
        Some(Path::new("/run/key"))
    );
    let c = layered("[secrets]\nencryption_key = \"k\"\n");
    assert!(c.secrets.encryption_key.is_some(), "encryption_key is read");
    assert!(Config::defaults().auth.external.is_none());
    assert!(Config::defaults().secrets.encryption_key.is_none());
    vec![
        ("auth.external.issuer", None),
        ("auth.external.audience", None),
        ("auth.external.jwks_url", None),
        ("auth.external.account_claim", Some(external.account_claim)),
        (
            "auth.external.jwks_ttl",
            Some(humantime::format_duration(external.jwks_ttl).to_string()),
        ),
        ("secrets.encryption_key", None),
        ("secrets.encryption_key_file", None),
    ]
}

/// Every relative link in README.md and docs/*.md names a file that exists
/// and, for a Markdown file, a heading it has; so does every `docs/…`
/// citation in the code, configuration, scripts and container files.
#[test]
fn every_relative_link_and_citation_points_at_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    assert!(pages.len() >= 6, "README.md and the docs: {pages:?}");
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for cap in link.captures_iter(&text) {
            let target = &cap[1];
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            exists(
                &file,
                anchor,
                &format!("{} links to {target}", page.display()),
            );
            checked += 1;
        }
    }
    assert!(
        checked > 30,
        "the pages link to each other ({checked} links)"
    );

    let citation = regex::Regex::new(r"docs/([a-z]+\.md)(#[a-z0-9-]+)?").unwrap();
    let mut cited = 0;
    let mut sources = Vec::new();
    for dir in ["src", "config", "scripts", "migrations", "tests", "docs"] {
        files_under(&root.join(dir), &mut sources);
    }
    sources.push(root.join("Dockerfile"));
    sources.push(root.join("docker-compose.yml"));
    sources.push(root.join("README.md"));
    // The reference users read is in docs/: nothing cites a document they do
    // not have. Applied migrations keep their old comments, as sqlx refuses a
    // migration whose text changed after it ran.
    let elsewhere = concat!("API", ".md");
    for source in &sources {
        let Ok(text) = std::fs::read_to_string(source) else {
            continue;
        };
        assert!(
            source.starts_with(root.join("migrations")) || !text.contains(elsewhere),
            "{} cites {elsewhere}, which is not in the repository: cite docs/ instead",
            source.display()
        );
        for cap in citation.captures_iter(&text) {
            let anchor = cap.get(2).map_or("", |m| &m.as_str()[1..]);
            let what = format!("{} cites {}", source.display(), &cap[0]);
            exists(&root.join("docs").join(&cap[1]), anchor, &what);
            cited += 1;
        }
    }
    assert!(cited > 40, "the code cites the docs ({cited} citations)");
}

fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn exists(file: &Path, anchor: &str, what: &str) {
    assert!(file.is_file(), "{what}: {} does not exist", file.display());
    if anchor.is_empty() || file.extension().is_none_or(|e| e != "md") {
        return;
    }
    let headings = anchors(&std::fs::read_to_string(file).unwrap());
    assert!(
        headings.iter().any(|h| h == anchor),
        "{what}: {} has no heading #{anchor} (it has {headings:?})",
        file.display()
    );
}

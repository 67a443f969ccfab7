//! Which store an admin command works on, said on standard error before
//! anything else: an admin command run without `database.url` works on the
//! embedded store under `./data`, which is not the PostgreSQL database a
//! server may be using. The line never shows a password.

use crate::{app, config::Config};

/// `store: embedded data/dispatch.db`, `store: embedded PATH` or
/// `store: PostgreSQL postgres://user@host:5432/db`.
pub fn describe(config: &Config) -> String {
    let url = config.database.url.trim();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return format!("store: PostgreSQL {}", app::redacted_url(url));
    }
    if url.is_empty() {
        return format!("store: embedded {}", app::EMBEDDED_PATH);
    }
    match crate::store::sqlite::SqliteStore::path_from_url(url) {
        Some(path) => format!("store: embedded {}", path.display()),
        // Opening it fails, naming the setting; the URL is not repeated here.
        None => "store: unknown (database.url names neither PostgreSQL nor SQLite)".into(),
    }
}

/// Opens the configured store for an admin command, having said which.
pub async fn open_admin(config: &Config) -> anyhow::Result<app::Backend> {
    eprintln!("{}", describe(config));
    app::open_store_admin(config).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(url: &str) -> String {
        let mut c = Config::defaults();
        c.database.url = url.into();
        describe(&c)
    }

    #[test]
    fn the_line_names_the_store_and_never_a_password() {
        assert_eq!(line(""), "store: embedded data/dispatch.db");
        assert_eq!(
            line("sqlite:///var/lib/dispatch/d.db"),
            "store: embedded /var/lib/dispatch/d.db"
        );
        assert_eq!(
            line("postgres://app:s3cret@db.internal:5432/dispatch"),
            "store: PostgreSQL postgres://app@db.internal:5432/dispatch"
        );
        assert_eq!(
            line("postgresql://app@db/dispatch?sslmode=require&password=s3cret"),
            "store: PostgreSQL postgresql://app@db/dispatch?sslmode=require"
        );
        assert_eq!(
            line("postgres://db/dispatch?password=s3cret"),
            "store: PostgreSQL postgres://db/dispatch"
        );
        for url in [
            "postgres://app:s3cret@db.internal:5432/dispatch",
            "postgres://app@db/d?password=s3cret",
            "postgres://app:s3cret@[::1:5432/d",
        ] {
            assert!(!line(url).contains("s3cret"), "{url}: {}", line(url));
        }
    }
}

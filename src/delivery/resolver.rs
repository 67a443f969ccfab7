//! Where the private-network guard looks up the names an account wrote: the
//! system's resolver, or a fixed table. The table exists for the tests, which
//! must show the guard judging a name by its answer (inside, outside, one
//! that changes) whatever this machine's own DNS says; no configuration file
//! can set it (`Config::resolver` is not read from one). A resolver also
//! carries the names the operator lets resolve inside
//! (`webhook.allow_private_hosts`), which the guard does not judge.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, RwLock},
};

/// Names and the addresses they resolve to.
type Table = HashMap<String, Vec<IpAddr>>;

/// Cheap to clone: clones share the table.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    table: Option<Arc<RwLock<Table>>>,
    /// Names whose answers may be private, as `key` writes them.
    private_hosts: Arc<Vec<String>>,
}

impl Resolver {
    /// The system's resolver: what production uses.
    pub fn system() -> Self {
        Self::default()
    }

    /// Only these names resolve, each to its addresses (in that order); any
    /// other name is unknown, as a name without a DNS record is.
    pub fn fixed<'a>(answers: impl IntoIterator<Item = (&'a str, Vec<IpAddr>)>) -> Self {
        let table = answers
            .into_iter()
            .map(|(name, addrs)| (key(name), addrs))
            .collect();
        Self {
            table: Some(Arc::new(RwLock::new(table))),
            private_hosts: Arc::default(),
        }
    }

    /// The same lookups, where `hosts` (names, compared as DNS compares
    /// them) may resolve to private addresses: the operator's exceptions to
    /// the guard (`webhook.allow_private_hosts`).
    pub fn allowing_private(self, hosts: &[String]) -> Self {
        Self {
            private_hosts: Arc::new(hosts.iter().map(|h| key(h)).collect()),
            ..self
        }
    }

    /// Whether the operator lets `host` resolve to private addresses.
    pub fn allows_private(&self, host: &str) -> bool {
        let host = key(host);
        self.private_hosts.contains(&host)
    }

    /// Changes a fixed table's answer for `name`, as a DNS record can change
    /// between the check at creation and a connection (rebinding).
    ///
    /// # Panics
    /// On the system's resolver, which has no table.
    pub fn answer(&self, name: &str, addrs: Vec<IpAddr>) {
        let table = self
            .table
            .as_ref()
            .expect("only a fixed table's answers can be changed");
        table
            .write()
            .expect("not poisoned")
            .insert(key(name), addrs);
    }

    /// The addresses `host` resolves to (port 0).
    pub async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let Some(table) = &self.table else {
            return Ok(tokio::net::lookup_host((host, 0))
                .await?
                .map(|a| a.ip())
                .collect());
        };
        let found = table.read().expect("not poisoned").get(&key(host)).cloned();
        found.filter(|addrs| !addrs.is_empty()).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{host}: no such name"),
            )
        })
    }
}

/// Names are compared as DNS compares them: without case, `name.` as `name`.
fn key(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fixed_table_answers_its_names_only_and_can_change_an_answer() {
        let names = Resolver::fixed([("Inside.Test", vec!["10.0.0.5".parse().unwrap()])]);
        let ten: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap()];
        assert_eq!(names.lookup("inside.test").await.unwrap(), ten);
        assert_eq!(names.lookup("INSIDE.test.").await.unwrap(), ten);
        let unknown = names.lookup("other.test").await.unwrap_err();
        assert_eq!(unknown.kind(), std::io::ErrorKind::NotFound);

        let clone = names.clone();
        clone.answer("inside.test", vec!["93.184.216.34".parse().unwrap()]);
        assert_eq!(
            names.lookup("inside.test").await.unwrap(),
            vec!["93.184.216.34".parse::<IpAddr>().unwrap()],
            "clones share the table"
        );
    }

    #[test]
    fn the_names_let_inside_are_compared_as_dns_compares_them() {
        let names = Resolver::system().allowing_private(&["Moto".to_string()]);
        assert!(names.allows_private("moto"));
        assert!(names.allows_private("MOTO."));
        assert!(!names.allows_private("moto.example"));
        assert!(!names.allows_private("postgres"));
        assert!(!Resolver::system().allows_private("moto"));
    }
}

//! What an API token may do (docs/api.md#scopes), and the names scopes go
//! by in tokens, requests and stored clients.

use std::{fmt, str::FromStr};

/// What a token may do (docs/api.md#scopes): a GET needs `<resource>:read`, every
/// other method `<resource>:write`. A typo in a scope is a compile error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    MessagesRead,
    MessagesWrite,
    TargetsRead,
    TargetsWrite,
    /// Receive, ack, nack and hide messages of pull targets, and nothing else.
    MessagesReceive,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::MessagesRead,
        Scope::MessagesWrite,
        Scope::TargetsRead,
        Scope::TargetsWrite,
        Scope::MessagesReceive,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::MessagesRead => "messages:read",
            Scope::MessagesWrite => "messages:write",
            Scope::TargetsRead => "targets:read",
            Scope::TargetsWrite => "targets:write",
            Scope::MessagesReceive => "messages:receive",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// As its name: `clients create` and `clients list` print a client's scopes.
impl serde::Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;

    /// The unknown scope itself is the error.
    fn from_str(s: &str) -> Result<Self, String> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| s.to_string())
    }
}

/// Every scope's name, in the order of `Scope::ALL`.
pub const SCOPES: [&str; 5] = [
    Scope::ALL[0].as_str(),
    Scope::ALL[1].as_str(),
    Scope::ALL[2].as_str(),
    Scope::ALL[3].as_str(),
    Scope::ALL[4].as_str(),
];

/// Splits a space-separated scope string into scopes, each once, in the
/// order given; the first unknown one is the error.
pub fn parse_scopes(s: &str) -> Result<Vec<Scope>, String> {
    let mut out: Vec<Scope> = Vec::new();
    for name in s.split_whitespace() {
        let scope: Scope = name.parse()?;
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}

/// The known scopes among stored or claimed names; others are ignored.
pub fn known_scopes<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Scope> {
    let mut out: Vec<Scope> = Vec::new();
    for scope in names.into_iter().filter_map(|n| n.parse().ok()) {
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    out
}

/// Scopes as a token's `scope` claim and responses spell them.
pub fn join_scopes(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_parsed_and_unknown_ones_named() {
        assert_eq!(
            parse_scopes("messages:read  targets:read messages:read").unwrap(),
            vec![Scope::MessagesRead, Scope::TargetsRead]
        );
        assert_eq!(parse_scopes("").unwrap(), Vec::<Scope>::new());
        assert_eq!(parse_scopes("messages:read admin").unwrap_err(), "admin");
        assert_eq!(
            known_scopes(["admin", "targets:write", "targets:write"]),
            vec![Scope::TargetsWrite]
        );
    }

    #[test]
    fn every_scope_round_trips_through_its_name() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        assert_eq!(
            SCOPES,
            [
                "messages:read",
                "messages:write",
                "targets:read",
                "targets:write",
                "messages:receive"
            ]
        );
        assert_eq!(join_scopes(&Scope::ALL), SCOPES.join(" "));
    }
}

//! Authentication: client secrets, access tokens we issue, tokens of an
//! external issuer, scopes, and the sealing of secrets at rest.

pub mod jwks;
pub mod revocations;
pub mod sealing;
pub mod secrets;
pub mod tokens;

pub const SCOPES: [&str; 4] = [
    "messages:read",
    "messages:write",
    "targets:read",
    "targets:write",
];

/// Who is calling, established from a valid bearer token.
#[derive(Debug, Clone)]
pub struct Principal {
    pub account: String,
    pub subject: String,
    pub scopes: Vec<String>,
}

impl Principal {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// Splits a space-separated scope string, keeping only known scopes in a stable order.
pub fn parse_scopes(s: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for scope in s.split_whitespace() {
        if !SCOPES.contains(&scope) {
            return Err(scope.to_string());
        }
        if !out.iter().any(|s| s == scope) {
            out.push(scope.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_parsed_and_unknown_ones_named() {
        assert_eq!(
            parse_scopes("messages:read  targets:read messages:read").unwrap(),
            vec!["messages:read", "targets:read"]
        );
        assert_eq!(parse_scopes("").unwrap(), Vec::<String>::new());
        assert_eq!(parse_scopes("messages:read admin").unwrap_err(), "admin");
    }
}

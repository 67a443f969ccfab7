//! Authentication: client secrets, access tokens we issue and tokens of an
//! external issuer. What a token may do (`Scope`) is the domain's
//! (`domain::scope`): the store keeps it with each client.

pub mod jwks;
pub mod revocations;
pub mod secrets;
pub mod tokens;

use crate::domain::scope::Scope;

/// Who is calling, established from a valid bearer token.
#[derive(Debug, Clone)]
pub struct Principal {
    pub account: crate::domain::ids::AccountId,
    pub subject: String,
    pub scopes: Vec<Scope>,
}

impl Principal {
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// Why a bearer token establishes no `Principal`, whichever issuer signed it
/// (this server, `tokens`, or an external one, `jwks`).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Malformed, badly signed, expired, or from an unknown issuer.
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("token keys are unavailable")]
    Unavailable(#[source] crate::store::StoreError),
}

//! Client secrets and passwords, stored only as hashes.
//!
//! A client secret is 256 random bits: no dictionary can guess it, so a slow
//! password hash buys nothing and costs every token request (and lets
//! timing tell a known client id from an unknown one). It is stored as
//! `sha256$<hex>` and compared in constant time. Hashes stored as argon2
//! before still verify, and are replaced by the fast form once they do.
//!
//! People choose passwords, which can be guessed: those keep argon2
//! (`hash_secret`, `verify_secret`).

use argon2::{
    password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Argon2,
};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const FAST_PREFIX: &str = "sha256$";

/// A new client id (`dc_` + 16 hex) and secret (32 random bytes, URL-safe base64).
pub fn generate_client_credentials() -> (String, String) {
    let id: [u8; 8] = rand::rng().random();
    let secret: [u8; 32] = rand::rng().random();
    let id = format!(
        "dc_{}",
        id.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    (id, B64URL.encode(secret))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored form of a client secret: `sha256$<hex>`.
pub fn hash_client_secret(secret: &str) -> String {
    format!("{FAST_PREFIX}{}", hex(&Sha256::digest(secret.as_bytes())))
}

/// The result of checking a client secret against its stored hash.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientSecretCheck {
    Wrong,
    Right,
    /// Right, against a hash of the slow (argon2) form: store this one instead.
    RightUpgrade(String),
}

impl ClientSecretCheck {
    pub fn is_right(&self) -> bool {
        !matches!(self, ClientSecretCheck::Wrong)
    }
}

/// Whether a stored hash is of the slow form (checking it takes argon2's time).
pub fn is_slow_hash(stored: &str) -> bool {
    !stored.starts_with(FAST_PREFIX)
}

/// Checks `secret` against a stored client secret hash, of either form.
pub fn verify_client_secret(secret: &str, stored: &str) -> ClientSecretCheck {
    match stored.strip_prefix(FAST_PREFIX) {
        Some(expected) => {
            if fast_matches(secret, expected) {
                ClientSecretCheck::Right
            } else {
                ClientSecretCheck::Wrong
            }
        }
        None if verify_secret(secret, stored) => {
            ClientSecretCheck::RightUpgrade(hash_client_secret(secret))
        }
        None => ClientSecretCheck::Wrong,
    }
}

/// Does the work of checking a secret against a fast hash, and fails: an
/// unknown client id costs what a wrong secret costs.
pub fn verify_against_nothing(secret: &str) -> ClientSecretCheck {
    const DUMMY: &str = "0000000000000000000000000000000000000000000000000000000000000000";
    let _ = std::hint::black_box(fast_matches(secret, DUMMY));
    ClientSecretCheck::Wrong
}

fn fast_matches(secret: &str, expected_hex: &str) -> bool {
    let actual = hex(&Sha256::digest(secret.as_bytes()));
    // Both are 64 hex characters unless the stored hash is damaged; the
    // length is not secret.
    actual.as_bytes().ct_eq(expected_hex.as_bytes()).into()
}

/// An argon2 hash, for passwords people choose.
pub fn hash_secret(secret: &str) -> String {
    let salt_bytes: [u8; 16] = rand::rng().random();
    let salt = SaltString::encode_b64(&salt_bytes).expect("16 bytes make a valid salt");
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .expect("argon2 hashing with default parameters succeeds")
        .to_string()
}

/// Checks a password against its argon2 hash.
pub fn verify_secret(secret: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(secret.as_bytes(), &parsed)
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_secret_is_stored_as_its_sha256_and_only_it_verifies() {
        let (id, secret) = generate_client_credentials();
        assert!(id.starts_with("dc_") && id.len() == 19);
        let hash = hash_client_secret(&secret);
        assert!(
            hash.starts_with("sha256$") && hash.len() == 7 + 64,
            "{hash}"
        );
        assert!(!hash.contains(&secret));
        assert!(!is_slow_hash(&hash));
        assert_eq!(
            verify_client_secret(&secret, &hash),
            ClientSecretCheck::Right
        );
        assert_eq!(
            verify_client_secret("wrong", &hash),
            ClientSecretCheck::Wrong
        );
        assert_eq!(
            verify_client_secret(&secret, "sha256$00"),
            ClientSecretCheck::Wrong
        );
        assert_eq!(verify_against_nothing(&secret), ClientSecretCheck::Wrong);
    }

    #[test]
    fn a_legacy_argon2_client_hash_verifies_and_asks_to_be_upgraded() {
        let (_, secret) = generate_client_credentials();
        let legacy = hash_secret(&secret);
        assert!(is_slow_hash(&legacy));
        assert_eq!(
            verify_client_secret(&secret, &legacy),
            ClientSecretCheck::RightUpgrade(hash_client_secret(&secret))
        );
        assert_eq!(
            verify_client_secret("wrong", &legacy),
            ClientSecretCheck::Wrong
        );
        assert_eq!(
            verify_client_secret(&secret, "garbage"),
            ClientSecretCheck::Wrong
        );
    }

    #[test]
    fn a_password_hash_is_argon2_and_only_the_password_verifies() {
        let hash = hash_secret("correct horse battery");
        assert!(hash.starts_with("$argon2"), "{hash}");
        assert!(verify_secret("correct horse battery", &hash));
        assert!(!verify_secret("wrong", &hash));
    }
}

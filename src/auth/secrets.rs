//! Client secrets: generated random, stored only as an argon2 hash.

use std::{collections::HashMap, sync::Mutex};

use argon2::{
    password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Argon2,
};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use rand::Rng;
use sha2::{Digest, Sha256};

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

pub fn hash_secret(secret: &str) -> String {
    let salt_bytes: [u8; 16] = rand::rng().random();
    let salt = SaltString::encode_b64(&salt_bytes).expect("16 bytes make a valid salt");
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .expect("argon2 hashing with default parameters succeeds")
        .to_string()
}

pub fn verify_secret(secret: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(secret.as_bytes(), &parsed)
            .is_ok()
    })
}

/// Remembers secrets that verified, as SHA-256 digests keyed by client and
/// hash, so that a client asking for tokens often does not pay for argon2
/// each time. A changed hash (a new secret) misses the cache.
#[derive(Default)]
pub struct VerifiedSecrets {
    seen: Mutex<HashMap<(String, String), [u8; 32]>>,
}

impl VerifiedSecrets {
    pub fn verify(&self, client_id: &str, secret: &str, hash: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let key = (client_id.to_string(), hash.to_string());
        if let Some(known) = self.seen.lock().expect("cache lock").get(&key) {
            return constant_time_eq(known, &digest);
        }
        let ok = verify_secret(secret, hash);
        if ok {
            let mut seen = self.seen.lock().expect("cache lock");
            if seen.len() > 10_000 {
                seen.clear();
            }
            seen.insert(key, digest);
        }
        ok
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_secret_verifies_and_others_do_not() {
        let (id, secret) = generate_client_credentials();
        assert!(id.starts_with("dc_") && id.len() == 19);
        let hash = hash_secret(&secret);
        assert!(!hash.contains(&secret));
        assert!(verify_secret(&secret, &hash));
        assert!(!verify_secret("wrong", &hash));
        let cache = VerifiedSecrets::default();
        assert!(!cache.verify(&id, "wrong", &hash));
        assert!(cache.verify(&id, &secret, &hash));
        assert!(cache.verify(&id, &secret, &hash));
        assert!(!cache.verify(&id, "wrong", &hash));
    }
}

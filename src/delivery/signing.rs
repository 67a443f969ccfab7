//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The HMAC of `{id}.{timestamp}.{body}` under `key`, ready to finish.
fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mac = mac(key, id, timestamp, body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// One `v1,` signature per key, space-separated (Standard Webhooks).
pub fn sign_all(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    let signatures: Vec<String> = keys.iter().map(|k| sign(k, id, timestamp, body)).collect();
    signatures.join(" ")
}

/// Whether any `v1,` signature in a `webhook-signature` header (several may
/// be sent, space-separated, while a secret is rotated) signs this message;
/// compared in constant time.
pub fn verify(key: &[u8], id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    header.split(' ').any(|candidate| {
        let Some(Ok(sig)) = candidate.strip_prefix("v1,").map(|s| B64.decode(s)) else {
            return false;
        };
        mac(key, id, timestamp, body).verify_slice(&sig).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        // From the Standard Webhooks specification's test vectors.
        let key = B64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_signature_verifies_only_for_its_own_message() {
        let key = B64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let sig = sign(&key, "msg_1", 1614265330, body);
        assert!(verify(&key, "msg_1", 1614265330, body, &sig));
        assert!(verify(
            &key,
            "msg_1",
            1614265330,
            body,
            &format!("v1,AAAA {sig}")
        ));
        assert!(!verify(&key, "msg_2", 1614265330, body, &sig));
        assert!(!verify(&key, "msg_1", 1614265331, body, &sig));
        assert!(!verify(&key, "msg_1", 1614265330, b"{}", &sig));
        assert!(!verify(b"another key", "msg_1", 1614265330, body, &sig));
        assert!(!verify(&key, "msg_1", 1614265330, body, "v2,whatever"));
    }

    #[test]
    fn a_header_with_two_signatures_verifies_under_either_key() {
        let (old, new) = (b"the replaced key!".to_vec(), b"the current key!!".to_vec());
        let body = br#"{"a":1}"#;
        let header = sign_all(&[new.clone(), old.clone()], "msg_1", 1614265330, body);
        assert_eq!(header.split(' ').count(), 2);
        assert!(header.starts_with(&sign(&new, "msg_1", 1614265330, body)));
        assert!(verify(&old, "msg_1", 1614265330, body, &header));
        assert!(verify(&new, "msg_1", 1614265330, body, &header));
        assert!(!verify(b"a third key", "msg_1", 1614265330, body, &header));
    }
}

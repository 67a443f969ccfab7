//! Encryption at rest (docs/operations.md#secrets-at-rest): AES-256-GCM under a key the operator
//! configures, with a random 96-bit nonce per value. Each sealed value is
//! stored beside the id of the key that sealed it (the first 8 hex digits of
//! the key's SHA-256), so that values sealed under a previous key still open
//! while `dispatch secrets rotate` moves them to the current one.
//!
//! The associated data binds a value to the row it belongs to: a sealed
//! value copied onto another row (another target, another signing key) does
//! not open there.

use std::fmt;

use aes_gcm::{
    aead::{Aead, KeyInit, Payload},
    Aes256Gcm, Nonce,
};
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use rand::Rng;
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// Sealed under a key that is neither `secrets.encryption_key` nor in
    /// `secrets.previous_keys` (or no key is configured at all).
    #[error(
        "sealed with key id {0}, which is not configured \
         (secrets.encryption_key or secrets.previous_keys)"
    )]
    UnknownKey(String),
    /// The ciphertext does not authenticate under its key: altered, truncated
    /// or moved from another row.
    #[error("sealed with key id {0} but does not decrypt: altered or moved from another row")]
    Undecryptable(String),
}

impl SealError {
    /// The key is missing from this instance's configuration; the data may be fine.
    pub fn is_unknown_key(&self) -> bool {
        matches!(self, SealError::UnknownKey(_))
    }
}

/// A 256-bit key. Neither `Debug` nor `Display` shows its bytes.
#[derive(Clone)]
pub struct SealingKey {
    id: String,
    cipher: Aes256Gcm,
}

impl SealingKey {
    pub fn new(bytes: &[u8; 32]) -> Self {
        let digest = Sha256::digest(bytes);
        let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        Self {
            id,
            cipher: Aes256Gcm::new(bytes.into()),
        }
    }

    /// A key from its base64 text (standard alphabet, padding optional).
    /// The error says what is wrong without repeating the text.
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bytes = B64
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
            .map_err(|_| "is not valid base64".to_string())?;
        let bytes: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
            format!(
                "must be 32 bytes in base64 (for example `openssl rand -base64 32`), not {} bytes",
                bytes.len()
            )
        })?;
        Ok(Self::new(&bytes))
    }

    /// The key id stored with every value this key seals.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealingKey").field("id", &self.id).finish()
    }
}

/// A value sealed under the key `key_id`: nonce ‖ ciphertext ‖ tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub bytes: Vec<u8>,
}

/// Seals under the current key; opens under the current or a previous one.
#[derive(Debug, Clone)]
pub struct Sealer {
    current: SealingKey,
    previous: Vec<SealingKey>,
}

impl Sealer {
    pub fn new(current: SealingKey, previous: Vec<SealingKey>) -> Self {
        Self { current, previous }
    }

    pub fn current_key_id(&self) -> &str {
        self.current.id()
    }

    pub fn seal(&self, plaintext: &[u8], row: &[u8]) -> Sealed {
        let nonce: [u8; NONCE_LEN] = rand::rng().random();
        let ciphertext = self
            .current
            .cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: row,
                },
            )
            .expect("AES-GCM encrypts any value of a sane length");
        let mut bytes = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&ciphertext);
        Sealed {
            key_id: self.current.id.clone(),
            bytes,
        }
    }

    pub fn open(&self, key_id: &str, bytes: &[u8], row: &[u8]) -> Result<Vec<u8>, SealError> {
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == key_id)
            .ok_or_else(|| SealError::UnknownKey(key_id.to_string()))?;
        let undecryptable = || SealError::Undecryptable(key_id.to_string());
        if bytes.len() < NONCE_LEN + TAG_LEN {
            return Err(undecryptable());
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at the nonce's length");
        key.cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: row,
                },
            )
            .map_err(|_| undecryptable())
    }
}

/// Opens with `sealer`, or fails as an unknown key when there is none.
pub fn open_with(
    sealer: Option<&Sealer>,
    key_id: &str,
    bytes: &[u8],
    row: &[u8],
) -> Result<Vec<u8>, SealError> {
    match sealer {
        Some(s) => s.open(key_id, bytes, row),
        None => Err(SealError::UnknownKey(key_id.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fill: u8) -> SealingKey {
        SealingKey::new(&[fill; 32])
    }

    #[test]
    fn a_sealed_value_opens_to_what_was_sealed_and_hides_it() {
        let sealer = Sealer::new(key(1), vec![]);
        let sealed = sealer.seal(b"whsec_top-secret", b"target:DI-T-1");
        assert_eq!(sealed.key_id, sealer.current_key_id());
        assert_eq!(sealed.key_id.len(), 8);
        assert!(!sealed
            .bytes
            .windows(b"top-secret".len())
            .any(|w| w == b"top-secret"));
        assert_eq!(
            sealer
                .open(&sealed.key_id, &sealed.bytes, b"target:DI-T-1")
                .unwrap(),
            b"whsec_top-secret"
        );
        // A fresh nonce each time: the same value seals differently.
        assert_ne!(sealer.seal(b"x", b"r").bytes, sealer.seal(b"x", b"r").bytes);
    }

    #[test]
    fn a_previous_key_still_opens_what_it_sealed() {
        let old = Sealer::new(key(1), vec![]);
        let sealed = old.seal(b"secret", b"row");
        let rotated = Sealer::new(key(2), vec![key(1)]);
        assert_ne!(rotated.current_key_id(), sealed.key_id);
        assert_eq!(
            rotated.open(&sealed.key_id, &sealed.bytes, b"row").unwrap(),
            b"secret"
        );
        assert_eq!(rotated.seal(b"secret", b"row").key_id, key(2).id());
    }

    #[test]
    fn altered_truncated_or_moved_values_do_not_open() {
        let sealer = Sealer::new(key(1), vec![]);
        let sealed = sealer.seal(b"secret", b"row-a");
        for i in [0, NONCE_LEN, sealed.bytes.len() - 1] {
            let mut bytes = sealed.bytes.clone();
            bytes[i] ^= 0x01;
            assert_eq!(
                sealer.open(&sealed.key_id, &bytes, b"row-a"),
                Err(SealError::Undecryptable(sealed.key_id.clone())),
                "byte {i} flipped"
            );
        }
        assert!(sealer
            .open(&sealed.key_id, &sealed.bytes[..20], b"row-a")
            .is_err());
        assert!(sealer.open(&sealed.key_id, &[], b"row-a").is_err());
        assert_eq!(
            sealer.open(&sealed.key_id, &sealed.bytes, b"row-b"),
            Err(SealError::Undecryptable(sealed.key_id.clone())),
            "bound to its row"
        );
    }

    #[test]
    fn an_unknown_key_id_is_named_in_the_error() {
        let sealed = Sealer::new(key(1), vec![]).seal(b"secret", b"row");
        let other = Sealer::new(key(2), vec![key(3)]);
        let err = other
            .open(&sealed.key_id, &sealed.bytes, b"row")
            .unwrap_err();
        assert!(err.is_unknown_key());
        assert!(err.to_string().contains(&sealed.key_id), "{err}");
        assert!(open_with(None, &sealed.key_id, &sealed.bytes, b"row")
            .unwrap_err()
            .is_unknown_key());
    }

    #[test]
    fn keys_parse_from_base64_and_never_show_their_bytes() {
        let text = B64.encode([7u8; 32]);
        let k = SealingKey::from_base64(&format!(" {text}\n")).unwrap();
        assert_eq!(k.id(), key(7).id());
        let shown = format!("{k:?} {:?}", Sealer::new(k.clone(), vec![k.clone()]));
        assert!(
            !shown.contains(&text[..10]) && !shown.contains("7, 7"),
            "{shown}"
        );
        assert!(SealingKey::from_base64("not base64!")
            .unwrap_err()
            .contains("base64"));
        assert!(SealingKey::from_base64(&B64.encode([1u8; 16]))
            .unwrap_err()
            .contains("not 16 bytes"));
    }
}

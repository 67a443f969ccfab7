//! Secrets at rest, the same in both stores (docs/operations.md#secrets-at-rest).
//!
//! A target row keeps its configuration with the secrets masked and, beside
//! it, the secrets alone sealed as one value (`sealed_secrets`) with the id
//! of the key that sealed them (`secrets_key_id`). A signing key row keeps
//! `secret` sealed and the key's id in `key_id`. A NULL key id means the row
//! was written without a key and holds its secrets in plain text: the column
//! says which, so a plain secret that looks like ciphertext is never misread.

use serde_json::Value;

use super::{Store, StoreError, StoreResult};
use crate::{
    domain::target::TargetConfig,
    sealing::{open_with, Sealed, Sealer},
};

/// A target's configuration as written: plain, or masked with its secrets sealed.
pub(crate) struct StoredConfig {
    pub config: Value,
    pub sealed: Option<Sealed>,
}

impl StoredConfig {
    pub fn key_id(&self) -> Option<&str> {
        self.sealed.as_ref().map(|s| s.key_id.as_str())
    }

    pub fn sealed_bytes(&self) -> Option<&[u8]> {
        self.sealed.as_ref().map(|s| s.bytes.as_slice())
    }
}

/// What a target row reads as, its configuration aside.
fn target_row(id: &str) -> Vec<u8> {
    format!("dispatch target {id}").into_bytes()
}

fn signing_key_row(kid: &str) -> Vec<u8> {
    format!("dispatch signing key {kid}").into_bytes()
}

pub(crate) fn seal_config(
    sealer: Option<&Sealer>,
    target_id: &str,
    config: &TargetConfig,
) -> StoredConfig {
    match sealer {
        None => StoredConfig {
            config: config.to_stored_json(),
            sealed: None,
        },
        Some(sealer) => {
            let (masked, secrets) = config.split_secrets();
            StoredConfig {
                config: masked,
                sealed: Some(sealer.seal(secrets.to_string().as_bytes(), &target_row(target_id))),
            }
        }
    }
}

pub(crate) fn open_config(
    sealer: Option<&Sealer>,
    target_id: &str,
    kind: &str,
    config: Value,
    key_id: Option<&str>,
    sealed: Option<&[u8]>,
) -> StoreResult<TargetConfig> {
    let corrupt = |e: serde_json::Error| StoreError::Corrupt(format!("target config: {e}"));
    match (key_id, sealed) {
        (None, None) => TargetConfig::from_stored_json(kind, config).map_err(corrupt),
        (Some(key_id), Some(bytes)) => {
            let plain =
                open_with(sealer, key_id, bytes, &target_row(target_id)).map_err(|source| {
                    StoreError::Sealing {
                        row: format!("target {target_id}"),
                        source,
                    }
                })?;
            let secrets: Value = serde_json::from_slice(&plain).map_err(corrupt)?;
            TargetConfig::join_secrets(kind, config, secrets).map_err(corrupt)
        }
        _ => Err(StoreError::Corrupt(format!(
            "target {target_id}: secrets_key_id and sealed_secrets must be both set or both NULL"
        ))),
    }
}

/// The row sealed again under the current key; None when it is already.
pub(crate) fn reseal_config(
    sealer: &Sealer,
    target_id: &str,
    kind: &str,
    config: Value,
    key_id: Option<&str>,
    sealed: Option<&[u8]>,
) -> StoreResult<Option<StoredConfig>> {
    if key_id == Some(sealer.current_key_id()) {
        return Ok(None);
    }
    let config = open_config(Some(sealer), target_id, kind, config, key_id, sealed)?;
    Ok(Some(seal_config(Some(sealer), target_id, &config)))
}

/// A token-signing key as written: (secret, key id), plain when the id is None.
pub(crate) fn seal_signing_key(
    sealer: Option<&Sealer>,
    kid: &str,
    secret: &[u8],
) -> (Vec<u8>, Option<String>) {
    match sealer {
        None => (secret.to_vec(), None),
        Some(sealer) => {
            let sealed = sealer.seal(secret, &signing_key_row(kid));
            (sealed.bytes, Some(sealed.key_id))
        }
    }
}

pub(crate) fn open_signing_key(
    sealer: Option<&Sealer>,
    kid: &str,
    secret: Vec<u8>,
    key_id: Option<&str>,
) -> StoreResult<Vec<u8>> {
    match key_id {
        None => Ok(secret),
        Some(key_id) => {
            open_with(sealer, key_id, &secret, &signing_key_row(kid)).map_err(|source| {
                StoreError::Sealing {
                    row: format!("signing key {kid}"),
                    source,
                }
            })
        }
    }
}

/// The key sealed again under the current key; None when it is already.
pub(crate) fn reseal_signing_key(
    sealer: &Sealer,
    kid: &str,
    secret: Vec<u8>,
    key_id: Option<&str>,
) -> StoreResult<Option<(Vec<u8>, String)>> {
    if key_id == Some(sealer.current_key_id()) {
        return Ok(None);
    }
    let plain = open_signing_key(Some(sealer), kid, secret, key_id)?;
    let (sealed, key_id) = seal_signing_key(Some(sealer), kid, &plain);
    Ok(Some((sealed, key_id.expect("sealed under a key"))))
}

/// One page of `reseal_targets` or `reseal_signing_keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResealPage {
    /// Rows sealed again under the current key.
    pub resealed: u64,
    /// Rows that changed (or went) between their read and their update:
    /// left as they are now; a writer seals what it writes.
    pub changed: u64,
    /// Where the next page starts; None when this page found no row to seal.
    pub last: Option<String>,
}

/// What `reseal_all` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resealed {
    pub targets: u64,
    pub signing_keys: u64,
    /// Rows that kept changing under the last pass (written meanwhile by an
    /// instance); 0 when every row was sealed under the current key once.
    pub unsettled: u64,
}

/// Seals every stored secret again under the current key, `batch` rows a
/// transaction, while instances keep serving; passes again over rows that
/// changed while it ran (a few times at most).
pub async fn reseal_all(store: &dyn Store, batch: u32) -> StoreResult<Resealed> {
    let mut done = Resealed::default();
    for _ in 0..5 {
        let mut changed = 0;
        let mut after: Option<String> = None;
        loop {
            let page = store.reseal_targets(after.as_deref(), batch).await?;
            done.targets += page.resealed;
            changed += page.changed;
            match page.last {
                Some(last) => after = Some(last),
                None => break,
            }
        }
        let mut after: Option<String> = None;
        loop {
            let page = store.reseal_signing_keys(after.as_deref(), batch).await?;
            done.signing_keys += page.resealed;
            changed += page.changed;
            match page.last {
                Some(last) => after = Some(last),
                None => break,
            }
        }
        done.unsettled = changed;
        if changed == 0 {
            break;
        }
    }
    Ok(done)
}

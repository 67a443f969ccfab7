//! Token-signing keys and the rotation of sealed secrets, once for both
//! databases (see `store::sealed` for how secrets are kept).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::Rng;
use serde_json::Value;
use sqlx::{
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef},
    sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef},
    types::Json,
    Decode, Encode, Postgres, Sqlite, Type,
};
use uuid::Uuid;

use super::{At, Keeps};
use crate::{
    sealing::Sealer,
    store::{sealed::*, SecretStore, SigningKey, StoreError, StoreResult},
};

/// kid, secret, key_id
type KeyRow = (String, Vec<u8>, Option<String>);

/// id, kind, config, secrets_key_id, sealed_secrets
type SealedTargetRow = (
    String,
    String,
    ConfigAsRead,
    Option<String>,
    Option<Vec<u8>>,
);

/// A target's configuration as it was read, bound back to find its row
/// unchanged: `jsonb` in PostgreSQL (compared as JSON), the very text in
/// SQLite (compared as written, and parsed only when it is used).
enum ConfigAsRead {
    Json(Value),
    Text(String),
}

impl ConfigAsRead {
    fn value(&self) -> StoreResult<Value> {
        match self {
            ConfigAsRead::Json(v) => Ok(v.clone()),
            ConfigAsRead::Text(s) => serde_json::from_str(s)
                .map_err(|e| StoreError::Corrupt(format!("target config: {e}"))),
        }
    }
}

impl Type<Postgres> for ConfigAsRead {
    fn type_info() -> PgTypeInfo {
        <Json<Value> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Json<Value> as Type<Postgres>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Postgres> for ConfigAsRead {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <Json<Value> as Encode<'q, Postgres>>::encode(Json(self.value()?), buf)
    }
}

impl<'r> Decode<'r, Postgres> for ConfigAsRead {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let Json(v) = <Json<Value> as Decode<'r, Postgres>>::decode(value)?;
        Ok(ConfigAsRead::Json(v))
    }
}

impl Type<Sqlite> for ConfigAsRead {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for ConfigAsRead {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        let text = match self {
            ConfigAsRead::Json(v) => v.to_string(),
            ConfigAsRead::Text(s) => s.clone(),
        };
        <String as Encode<'q, Sqlite>>::encode(text, buf)
    }
}

impl<'r> Decode<'r, Sqlite> for ConfigAsRead {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(ConfigAsRead::Text(<String as Decode<'r, Sqlite>>::decode(
            value,
        )?))
    }
}

/// A new signing key: kid, secret as stored, key id.
fn new_key(sealer: Option<&Sealer>) -> KeyRow {
    let secret: [u8; 32] = rand::rng().random();
    let kid = Uuid::new_v4().simple().to_string();
    let (stored, key_id) = seal_signing_key(sealer, &kid, &secret);
    (kid, stored, key_id)
}

#[async_trait]
impl<B: Keeps> SecretStore for B {
    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>> {
        let rows: Vec<KeyRow> = self
            .db()
            .read("SELECT kid, secret, key_id FROM signing_keys ORDER BY created_at DESC, kid")
            .fetch_all()
            .await?;
        rows.into_iter()
            .map(|(kid, secret, key_id)| {
                let secret = open_signing_key(self.sealer(), &kid, secret, key_id.as_deref())?;
                Ok(SigningKey { kid, secret })
            })
            .collect()
    }

    /// One statement, in a transaction of its own, so that an instance
    /// starting beside this one sees the key once it is there. On SQLite,
    /// whose one writer runs it alone, it is the only key. On PostgreSQL
    /// two instances starting together may each find none and insert one:
    /// both keys are valid, and each instance reloads the keys when a token
    /// names one it has not loaded.
    async fn ensure_signing_key(&self, now: DateTime<Utc>) -> StoreResult<bool> {
        let (kid, stored, key_id) = new_key(self.sealer());
        let inserted = self
            .db()
            .write(
                "INSERT INTO signing_keys (kid, secret, key_id, created_at) \
                 SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM signing_keys)",
            )
            .bind(kid)
            .bind(stored)
            .bind(key_id)
            .bind(At(now))
            .execute()
            .await?;
        Ok(inserted == 1)
    }

    async fn reseal_targets(&self, after: Option<&str>, limit: u32) -> StoreResult<ResealPage> {
        let sealer = self.sealer().ok_or(StoreError::NoEncryptionKey)?;
        let rows: Vec<SealedTargetRow> = self
            .db()
            .read(
                "SELECT id, kind, config, secrets_key_id, sealed_secrets FROM targets \
                 WHERE id > $1 AND secrets_key_id IS DISTINCT FROM $2 ORDER BY id LIMIT $3",
            )
            .bind(after.unwrap_or(""))
            .bind(sealer.current_key_id())
            .bind(i64::from(limit))
            .fetch_all()
            .await?;
        let mut page = ResealPage {
            last: rows.last().map(|r| r.0.clone()),
            ..ResealPage::default()
        };
        // Every row opens before any is written: a row under a missing key
        // stops the page whole, naming it.
        let mut updates = Vec::with_capacity(rows.len());
        for (id, kind, config, key_id, sealed) in rows {
            let fresh = reseal_config(
                sealer,
                &id,
                &kind,
                config.value()?,
                key_id.as_deref(),
                sealed.as_deref(),
            )?;
            if let Some(fresh) = fresh {
                updates.push((id, fresh, config, key_id, sealed));
            }
        }
        let mut tx = self.db().begin().await?;
        for (id, fresh, config, key_id, sealed) in &updates {
            let done = tx
                .sql(
                    "UPDATE targets SET config = $2, secrets_key_id = $3, sealed_secrets = $4 \
                     WHERE id = $1 AND config = $5 AND secrets_key_id IS NOT DISTINCT FROM $6 \
                       AND sealed_secrets IS NOT DISTINCT FROM $7",
                )
                .bind(id)
                .bind(Json(&fresh.config))
                .bind(fresh.key_id())
                .bind(fresh.sealed_bytes())
                .bind(config)
                .bind(key_id)
                .bind(sealed)
                .execute()
                .await?;
            if done == 1 {
                page.resealed += 1;
            } else {
                page.changed += 1;
            }
        }
        tx.commit().await?;
        Ok(page)
    }

    async fn reseal_signing_keys(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<ResealPage> {
        let sealer = self.sealer().ok_or(StoreError::NoEncryptionKey)?;
        let rows: Vec<KeyRow> = self
            .db()
            .read(
                "SELECT kid, secret, key_id FROM signing_keys \
                 WHERE kid > $1 AND key_id IS DISTINCT FROM $2 ORDER BY kid LIMIT $3",
            )
            .bind(after.unwrap_or(""))
            .bind(sealer.current_key_id())
            .bind(i64::from(limit))
            .fetch_all()
            .await?;
        let mut page = ResealPage {
            last: rows.last().map(|r| r.0.clone()),
            ..ResealPage::default()
        };
        let mut updates = Vec::with_capacity(rows.len());
        for (kid, secret, key_id) in rows {
            if let Some(fresh) =
                reseal_signing_key(sealer, &kid, secret.clone(), key_id.as_deref())?
            {
                updates.push((kid, fresh, secret, key_id));
            }
        }
        let mut tx = self.db().begin().await?;
        for (kid, (sealed, new_key_id), secret, key_id) in &updates {
            let done = tx
                .sql(
                    "UPDATE signing_keys SET secret = $2, key_id = $3 \
                     WHERE kid = $1 AND secret = $4 AND key_id IS NOT DISTINCT FROM $5",
                )
                .bind(kid)
                .bind(sealed)
                .bind(new_key_id)
                .bind(secret)
                .bind(key_id)
                .execute()
                .await?;
            if done == 1 {
                page.resealed += 1;
            } else {
                page.changed += 1;
            }
        }
        tx.commit().await?;
        Ok(page)
    }
}

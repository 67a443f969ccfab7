//! Token-signing keys and the rotation of sealed secrets in the PostgreSQL
//! store (see `store::sealed` for how secrets are kept).

use async_trait::async_trait;
use rand::Rng;
use serde_json::Value;
use uuid::Uuid;

use super::{map_err, PgStore};
use crate::store::{sealed::*, *};

/// id, kind, config, secrets_key_id, sealed_secrets
type SealedTargetRow = (String, String, Value, Option<String>, Option<Vec<u8>>);

#[async_trait]
impl SecretStore for PgStore {
    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>> {
        let fetch = || {
            sqlx::query_as::<_, (String, Vec<u8>, Option<String>)>(
                "SELECT kid, secret, key_id FROM signing_keys ORDER BY created_at DESC",
            )
            .fetch_all(&self.pool)
        };
        let mut rows = fetch().await.map_err(map_err)?;
        if rows.is_empty() {
            let secret: [u8; 32] = rand::rng().random();
            let kid = Uuid::new_v4().simple().to_string();
            let (stored, key_id) = seal_signing_key(self.sealer(), &kid, &secret);
            // Two instances starting together may both insert; both keys are then valid.
            sqlx::query("INSERT INTO signing_keys (kid, secret, key_id) VALUES ($1, $2, $3)")
                .bind(&kid)
                .bind(stored)
                .bind(key_id)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
            rows = fetch().await.map_err(map_err)?;
        }
        rows.into_iter()
            .map(|(kid, secret, key_id)| {
                let secret = open_signing_key(self.sealer(), &kid, secret, key_id.as_deref())?;
                Ok(SigningKey { kid, secret })
            })
            .collect()
    }

    async fn reseal_targets(&self, after: Option<&str>, limit: u32) -> StoreResult<ResealPage> {
        let sealer = self.sealer().ok_or(StoreError::NoEncryptionKey)?;
        let rows: Vec<SealedTargetRow> = sqlx::query_as(
            "SELECT id, kind, config, secrets_key_id, sealed_secrets FROM targets \
             WHERE id > $1 AND secrets_key_id IS DISTINCT FROM $2 ORDER BY id LIMIT $3",
        )
        .bind(after.unwrap_or(""))
        .bind(sealer.current_key_id())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
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
                config.clone(),
                key_id.as_deref(),
                sealed.as_deref(),
            )?;
            if let Some(fresh) = fresh {
                updates.push((id, fresh, config, key_id, sealed));
            }
        }
        let mut tx = self.begin().await?;
        for (id, fresh, config, key_id, sealed) in &updates {
            let done = sqlx::query(
                "UPDATE targets SET config = $2, secrets_key_id = $3, sealed_secrets = $4 \
                 WHERE id = $1 AND config = $5 AND secrets_key_id IS NOT DISTINCT FROM $6 \
                   AND sealed_secrets IS NOT DISTINCT FROM $7",
            )
            .bind(id)
            .bind(&fresh.config)
            .bind(fresh.key_id())
            .bind(fresh.sealed_bytes())
            .bind(config)
            .bind(key_id)
            .bind(sealed)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
            if done == 1 {
                page.resealed += 1;
            } else {
                page.changed += 1;
            }
        }
        tx.commit().await.map_err(map_err)?;
        Ok(page)
    }

    async fn reseal_signing_keys(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<ResealPage> {
        let sealer = self.sealer().ok_or(StoreError::NoEncryptionKey)?;
        let rows: Vec<(String, Vec<u8>, Option<String>)> = sqlx::query_as(
            "SELECT kid, secret, key_id FROM signing_keys \
             WHERE kid > $1 AND key_id IS DISTINCT FROM $2 ORDER BY kid LIMIT $3",
        )
        .bind(after.unwrap_or(""))
        .bind(sealer.current_key_id())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
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
        let mut tx = self.begin().await?;
        for (kid, (sealed, new_key_id), secret, key_id) in &updates {
            let done = sqlx::query(
                "UPDATE signing_keys SET secret = $2, key_id = $3 \
                 WHERE kid = $1 AND secret = $4 AND key_id IS NOT DISTINCT FROM $5",
            )
            .bind(kid)
            .bind(sealed)
            .bind(new_key_id)
            .bind(secret)
            .bind(key_id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
            if done == 1 {
                page.resealed += 1;
            } else {
                page.changed += 1;
            }
        }
        tx.commit().await.map_err(map_err)?;
        Ok(page)
    }
}

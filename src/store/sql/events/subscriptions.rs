//! Subscriptions, and the targets whose subscriptions match a type.

use async_trait::async_trait;
use sqlx::types::Json;

use crate::store::sql::{
    limits::{room_for, Rows},
    own::Own,
    At, Stmt, Tx,
};
use crate::{
    domain::{
        event::{pattern_texts, patterns_matching, Pattern, Subscription},
        ids::{AccountId, SubscriptionId, TargetId},
    },
    store::{StoreError, StoreResult, SubscriptionCursor, SubscriptionStore},
};

pub(super) const SUBSCRIPTION_COLUMNS: &str =
    "id, account, target_id, name, types, enabled, created_at, updated_at";

#[derive(sqlx::FromRow)]
pub(super) struct SubscriptionRow {
    id: String,
    account: String,
    target_id: String,
    name: String,
    types: Json<Vec<String>>,
    enabled: bool,
    created_at: At,
    updated_at: At,
}

impl TryFrom<SubscriptionRow> for Subscription {
    type Error = StoreError;

    fn try_from(r: SubscriptionRow) -> StoreResult<Subscription> {
        let types = r
            .types
            .0
            .iter()
            .map(|t| {
                Pattern::parse(t)
                    .map_err(|_| StoreError::Corrupt(format!("subscription {}: pattern {t}", r.id)))
            })
            .collect::<StoreResult<_>>()?;
        Ok(Subscription {
            id: SubscriptionId::from_trusted(r.id),
            account: AccountId::from_trusted(r.account),
            target_id: TargetId::from_trusted(r.target_id),
            name: r.name,
            types,
            enabled: r.enabled,
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
        })
    }
}

/// Replaces the subscription's rows of `subscription_patterns` with its
/// patterns, each distinct text once.
pub(super) async fn save_patterns(tx: &mut Tx, s: &Subscription) -> StoreResult<()> {
    tx.sql("DELETE FROM subscription_patterns WHERE subscription_id = $1")
        .bind(s.id.as_str())
        .execute()
        .await?;
    let mut texts = pattern_texts(&s.types);
    texts.sort();
    texts.dedup();
    let mut stmt =
        tx.sql("INSERT INTO subscription_patterns (subscription_id, account, pattern) VALUES ");
    for (i, text) in texts.into_iter().enumerate() {
        stmt.push(if i == 0 { "(" } else { ", (" })
            .push_bind(s.id.as_str().to_string())
            .push(", ")
            .push_bind(s.account.clone())
            .push(", ")
            .push_bind(text)
            .push(")");
    }
    stmt.execute().await?;
    Ok(())
}

#[async_trait]
impl<B: Own> SubscriptionStore for B {
    async fn insert_subscription(&self, s: &Subscription) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let lock = if tx.locks_rows() {
            " FOR KEY SHARE"
        } else {
            ""
        };
        // The target's row, KEY SHARE locked where rows are, so that a
        // delete of the target waits for this subscription and takes it
        // with it.
        let target: Option<(String,)> = tx
            .sql(format!(
                "SELECT id FROM targets WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(s.target_id.as_str())
            .bind(&s.account)
            .fetch_optional()
            .await?;
        if target.is_none() {
            return Ok(false);
        }
        room_for(self, &mut tx, &s.account, Rows::Subscriptions, 1).await?;
        tx.sql(
            "INSERT INTO subscriptions (id, account, target_id, name, types, enabled, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(s.id.as_str())
        .bind(&s.account)
        .bind(s.target_id.as_str())
        .bind(&s.name)
        .bind(Json(pattern_texts(&s.types)))
        .bind(s.enabled)
        .bind(At(s.created_at))
        .bind(At(s.updated_at))
        .execute()
        .await?;
        save_patterns(&mut tx, s).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn get_subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>> {
        let row: Option<SubscriptionRow> = self
            .db()
            .read(format!(
                "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id = $1 AND account = $2"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        row.map(Subscription::try_from).transpose()
    }

    async fn list_subscriptions(
        &self,
        account: &AccountId,
        target: Option<&TargetId>,
        after: Option<&SubscriptionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Subscription>> {
        let mut stmt = self.db().read(format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE account = "
        ));
        stmt.push_bind(account.to_string());
        if let Some(t) = target {
            stmt.push(" AND target_id = ")
                .push_bind(t.as_str().to_string());
        }
        if let Some(c) = after {
            stmt.push(" AND (created_at, id) < (")
                .push_bind(At(c.created_at))
                .push(", ")
                .push_bind(c.id.as_str().to_string())
                .push(")");
        }
        stmt.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<SubscriptionRow> = stmt.fetch_all().await?;
        rows.into_iter().map(Subscription::try_from).collect()
    }

    async fn update_subscription(&self, s: &Subscription) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let changed = tx
            .sql(
                "UPDATE subscriptions SET name = $3, types = $4, enabled = $5, updated_at = $6 \
                 WHERE id = $1 AND account = $2",
            )
            .bind(s.id.as_str())
            .bind(&s.account)
            .bind(&s.name)
            .bind(Json(pattern_texts(&s.types)))
            .bind(s.enabled)
            .bind(At(s.updated_at))
            .execute()
            .await?
            == 1;
        if changed {
            save_patterns(&mut tx, s).await?;
        }
        tx.commit().await?;
        Ok(changed)
    }

    async fn delete_subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<bool> {
        // Its patterns go with it (ON DELETE CASCADE).
        Ok(self
            .db()
            .write("DELETE FROM subscriptions WHERE id = $1 AND account = $2")
            .bind(id.as_str())
            .bind(account)
            .execute()
            .await?
            == 1)
    }
}

/// The targets whose enabled subscriptions match `ty`, each once, in order.
pub(super) async fn matching_targets(
    tx: &mut Tx,
    account: &AccountId,
    ty: &str,
) -> StoreResult<Vec<String>> {
    let mut stmt = tx.sql("SELECT DISTINCT s.target_id");
    from_matching(&mut stmt, account, ty).push(" ORDER BY s.target_id");
    let rows: Vec<(String,)> = stmt.fetch_all().await?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// Ends `stmt`, a `SELECT` of `s.target_id`, with the enabled subscriptions
/// (`s`) of `account` whose patterns match `ty`: one lookup per pattern
/// that could match, whatever the subscriptions that do not.
pub(crate) fn from_matching<'s, 'q, 'a>(
    stmt: &'s mut Stmt<'q, 'a>,
    account: &AccountId,
    ty: &str,
) -> &'s mut Stmt<'q, 'a> {
    stmt.push(
        " FROM subscription_patterns p JOIN subscriptions s ON s.id = p.subscription_id \
         WHERE s.enabled AND p.account = ",
    )
    .push_bind(account.to_string())
    .push(" AND p.pattern IN (");
    for (i, text) in patterns_matching(ty).into_iter().enumerate() {
        if i > 0 {
            stmt.push(", ");
        }
        stmt.push_bind(text);
    }
    stmt.push(")")
}

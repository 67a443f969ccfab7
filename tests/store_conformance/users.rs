//! The portal's users and sessions (`IdentityStore`).

use crate::support::*;

checks!(
    a_created_user_is_found_by_email_and_a_duplicate_email_is_refused,
    a_session_is_found_until_it_expires_and_not_after_it_is_deleted,
    creating_a_session_forgets_the_sessions_that_have_expired,
);

/// A portal user as `dispatch users create` builds it (not yet stored).
fn user_value(account: &AccountId, email: &str, created_at: DateTime<Utc>) -> UserRecord {
    UserRecord {
        id: Uuid::now_v7().to_string(),
        account: account.clone(),
        email: email.into(),
        password_hash: format!(
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA${}",
            Uuid::new_v4().simple()
        ),
        role: Role::Admin,
        created_at,
    }
}

async fn add_user(
    store: &dyn Store,
    account: &AccountId,
    email: &str,
    created_at: DateTime<Utc>,
) -> UserRecord {
    let u = user_value(account, email, created_at);
    assert!(
        store.create_user(&u).await.unwrap(),
        "a user with a new email is created"
    );
    u
}

fn assert_user_eq(actual: &UserRecord, expected: &UserRecord) {
    assert_eq!(actual.id, expected.id, "id");
    assert_eq!(actual.account, expected.account, "account");
    assert_eq!(actual.email, expected.email, "email");
    assert_eq!(
        actual.password_hash, expected.password_hash,
        "password_hash"
    );
    assert_eq!(actual.created_at, expected.created_at, "created_at");
}

/// A session of `user` (not yet stored). The token hash is 32 bytes, with a
/// NUL and a 0xFF among them.
fn session_value(
    user: &UserRecord,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> SessionRecord {
    let mut token_hash = vec![0x00, 0xff];
    token_hash.extend_from_slice(Uuid::new_v4().as_bytes());
    token_hash.extend_from_slice(&Uuid::new_v4().as_bytes()[..14]);
    SessionRecord {
        token_hash,
        user_id: user.id.clone(),
        account: user.account.clone(),
        email: user.email.clone(),
        csrf: Uuid::new_v4().simple().to_string(),
        created_at,
        expires_at,
        role: user.role,
        time_zone: None,
    }
}

fn assert_session_eq(actual: &SessionRecord, expected: &SessionRecord) {
    assert_eq!(actual.token_hash, expected.token_hash, "token_hash");
    assert_eq!(actual.user_id, expected.user_id, "user_id");
    assert_eq!(actual.account, expected.account, "account");
    assert_eq!(actual.email, expected.email, "email");
    assert_eq!(actual.csrf, expected.csrf, "csrf");
    assert_eq!(actual.created_at, expected.created_at, "created_at");
    assert_eq!(actual.expires_at, expected.expires_at, "expires_at");
    assert_eq!(actual.role, expected.role, "role");
}

async fn find_session(
    store: &dyn Store,
    s: &SessionRecord,
    now: DateTime<Utc>,
) -> Option<SessionRecord> {
    store.find_session(&s.token_hash, now).await.unwrap()
}

async fn a_created_user_is_found_by_email_and_a_duplicate_email_is_refused(store: Arc<dyn Store>) {
    let now = time::now();
    // The CLI creates users for accounts that do not exist yet.
    let ops = add_user(
        &*store,
        &account_id("brand-new-account"),
        "ops@example.com",
        now - secs(5),
    )
    .await;
    let found = store
        .find_user("ops@example.com")
        .await
        .unwrap()
        .expect("the user is found by email");
    assert_user_eq(&found, &ops);

    // The same email again, from the same or another account: refused, and
    // the first user is kept as it was.
    for account in [&account_id("brand-new-account"), &*GLOBEX] {
        let dup = UserRecord {
            password_hash: "another-hash".into(),
            ..user_value(account, "ops@example.com", now)
        };
        assert!(
            !store.create_user(&dup).await.unwrap(),
            "the email is taken (creating in {account})"
        );
    }
    assert_user_eq(
        &store.find_user("ops@example.com").await.unwrap().unwrap(),
        &ops,
    );

    // Another email in the same account is another user; a user can join an
    // account that has targets already.
    let dev = add_user(
        &*store,
        &account_id("brand-new-account"),
        "dev@example.com",
        now,
    )
    .await;
    let t = add_target(&*store, &ACME).await;
    let admin = add_user(&*store, &ACME, "admin@acme.test", now).await;
    assert_user_eq(
        &store.find_user("dev@example.com").await.unwrap().unwrap(),
        &dev,
    );
    assert_user_eq(
        &store.find_user("admin@acme.test").await.unwrap().unwrap(),
        &admin,
    );
    assert_user_eq(
        &store.find_user("ops@example.com").await.unwrap().unwrap(),
        &ops,
    );
    assert_target_eq(&store.get_target(&ACME, &t.id).await.unwrap().unwrap(), &t);

    assert!(store
        .find_user("nobody@example.com")
        .await
        .unwrap()
        .is_none());
    assert!(store.find_user("").await.unwrap().is_none());
    assert!(store.find_user("ops@example").await.unwrap().is_none());

    // The store keeps and matches emails exactly as given: lower-casing is
    // the caller's (`portal::new_user`, the sign-in form), the same on every
    // backend.
    let mixed = add_user(&*store, &ACME, "Mixed.Case@Example.COM", now).await;
    assert_user_eq(
        &store
            .find_user("Mixed.Case@Example.COM")
            .await
            .unwrap()
            .expect("found by the email as stored"),
        &mixed,
    );
    assert!(
        store
            .find_user("mixed.case@example.com")
            .await
            .unwrap()
            .is_none(),
        "lookups are exact"
    );
    assert!(store.find_user("OPS@EXAMPLE.COM").await.unwrap().is_none());
}

async fn a_session_is_found_until_it_expires_and_not_after_it_is_deleted(store: Arc<dyn Store>) {
    let now = time::now();
    let user = add_user(&*store, &ACME, "ops@example.com", now - days(1)).await;
    let expires = now + hours(12);
    let s = session_value(&user, now, expires);
    store.create_session(&s).await.unwrap();
    let other = session_value(&user, now, expires);
    store.create_session(&other).await.unwrap();

    for at in [now, now + hours(6), expires - ms(1)] {
        let found = find_session(&*store, &s, at)
            .await
            .unwrap_or_else(|| panic!("the session is live at {at}"));
        assert_session_eq(&found, &s);
    }
    for at in [expires, expires + ms(1), expires + days(1)] {
        assert!(
            find_session(&*store, &s, at).await.is_none(),
            "the session has expired at {at}"
        );
    }
    assert!(store.find_session(&[0u8; 32], now).await.unwrap().is_none());
    assert!(
        store
            .find_session(&s.token_hash[..31], now)
            .await
            .unwrap()
            .is_none(),
        "a token hash matches whole"
    );

    store.delete_session(&s.token_hash).await.unwrap();
    assert!(
        find_session(&*store, &s, now).await.is_none(),
        "a deleted session is gone"
    );
    assert_session_eq(
        &find_session(&*store, &other, now)
            .await
            .expect("deleting one session leaves the others"),
        &other,
    );
    // Deleting again, or an unknown token, is harmless.
    store.delete_session(&s.token_hash).await.unwrap();
    store.delete_session(&[7u8; 32]).await.unwrap();
    assert!(find_session(&*store, &other, now).await.is_some());
}

async fn creating_a_session_forgets_the_sessions_that_have_expired(store: Arc<dyn Store>) {
    let now = time::now();
    let user = add_user(&*store, &ACME, "ops@example.com", now - days(1)).await;
    let expired = session_value(&user, now - hours(3), now - hours(1));
    let live = session_value(&user, now - hours(3), now + hours(1));
    store.create_session(&expired).await.unwrap();
    store.create_session(&live).await.unwrap();
    // Both are stored: asked about a time before either expired, both answer.
    let before = now - hours(2);
    assert!(find_session(&*store, &expired, before).await.is_some());
    assert!(find_session(&*store, &live, before).await.is_some());

    let fresh = session_value(&user, now, now + hours(12));
    store.create_session(&fresh).await.unwrap();
    assert!(
        find_session(&*store, &expired, before).await.is_none(),
        "the session that had expired when another was created is forgotten"
    );
    assert_session_eq(
        &find_session(&*store, &live, before)
            .await
            .expect("a live session is kept"),
        &live,
    );
    assert_session_eq(&find_session(&*store, &fresh, now).await.unwrap(), &fresh);
}

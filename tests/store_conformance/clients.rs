//! Clients and accounts (`IdentityStore`), and `HealthCheck::ping`: creating
//! and finding clients, secret hash replacement, listing, revocation, and
//! what an instance asks to learn of revocations.

use crate::support::*;

checks!(
    ping_answers_while_the_store_is_reachable,
    a_created_client_is_found_by_id_and_an_unknown_id_answers_none,
    a_secret_hash_is_replaced_only_while_it_is_the_stored_one,
    clients_are_listed_per_account_oldest_first_with_their_revocation,
    a_revoked_client_is_not_found_and_revoking_again_keeps_the_first_time,
    clients_revoked_since_a_time_are_those_revoked_at_or_after_it,
);

async fn ping_answers_while_the_store_is_reachable(store: Arc<dyn Store>) {
    store.ping().await.expect("ping answers");
}

async fn a_created_client_is_found_by_id_and_an_unknown_id_answers_none(store: Arc<dyn Store>) {
    // The CLI creates clients for accounts that do not exist yet.
    let client = ClientRecord {
        client_id: "di_client_0001".into(),
        account: account_id("brand-new-account"),
        name: "ci".into(),
        secret_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        scopes: vec![Scope::MessagesWrite, Scope::TargetsRead],
    };
    store.create_client(&client).await.unwrap();
    let other = ClientRecord {
        client_id: "di_client_0002".into(),
        account: ACME.clone(),
        name: "portal".into(),
        secret_hash: "hash-2".into(),
        scopes: vec![],
    };
    store.create_client(&other).await.unwrap();

    let found = store
        .find_client("di_client_0001")
        .await
        .unwrap()
        .expect("the client is found");
    assert_eq!(found.client_id, client.client_id);
    assert_eq!(found.account, client.account);
    assert_eq!(found.name, client.name);
    assert_eq!(found.secret_hash, client.secret_hash);
    assert_eq!(found.scopes, client.scopes, "scopes, in order");

    let found = store.find_client("di_client_0002").await.unwrap().unwrap();
    assert_eq!(found.account, *ACME);
    assert!(found.scopes.is_empty());

    assert!(store.find_client("di_client_9999").await.unwrap().is_none());
    assert!(store.find_client("").await.unwrap().is_none());

    // Ensuring an existing account again is harmless.
    store.ensure_account(&ACME).await.unwrap();
    store.ensure_account(&ACME).await.unwrap();
}

fn client(id: &str, account: &AccountId, hash: &str) -> ClientRecord {
    ClientRecord {
        client_id: id.into(),
        account: account.clone(),
        name: format!("{id} name"),
        secret_hash: hash.into(),
        scopes: vec![Scope::MessagesRead, Scope::TargetsWrite],
    }
}

async fn a_secret_hash_is_replaced_only_while_it_is_the_stored_one(store: Arc<dyn Store>) {
    store
        .create_client(&client("dc_hash", &ACME, "$argon2id$old"))
        .await
        .unwrap();
    assert!(!store
        .replace_client_secret_hash("dc_hash", "$argon2id$other", "sha256$aa")
        .await
        .unwrap());
    assert!(store
        .replace_client_secret_hash("dc_hash", "$argon2id$old", "sha256$bb")
        .await
        .unwrap());
    let found = store.find_client("dc_hash").await.unwrap().unwrap();
    assert_eq!(found.secret_hash, "sha256$bb");
    assert!(!store
        .replace_client_secret_hash("dc_hash", "$argon2id$old", "sha256$cc")
        .await
        .unwrap());
    assert!(!store
        .replace_client_secret_hash("dc_unknown", "x", "y")
        .await
        .unwrap());
}

async fn clients_are_listed_per_account_oldest_first_with_their_revocation(store: Arc<dyn Store>) {
    assert!(store.list_clients(&ACME).await.unwrap().is_empty());
    let before = time::now() - ms(1000);
    for id in ["dc_first", "dc_second"] {
        store.create_client(&client(id, &ACME, "h")).await.unwrap();
        // The next one is created a millisecond later at least.
        let after = time::now() + ms(1);
        while time::now() < after {
            tokio::task::yield_now().await;
        }
    }
    store
        .create_client(&client("dc_globex", &GLOBEX, "h"))
        .await
        .unwrap();
    let listed = store.list_clients(&ACME).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|c| c.client_id.as_str()).collect();
    assert_eq!(ids, ["dc_first", "dc_second"]);
    let first = &listed[0];
    assert_eq!(first.account, *ACME);
    assert_eq!(first.name, "dc_first name");
    assert_eq!(first.scopes, [Scope::MessagesRead, Scope::TargetsWrite]);
    assert!(first.created_at > before && first.created_at <= time::now());
    assert_eq!(first.revoked_at, None);
    assert!(listed[0].created_at < listed[1].created_at);

    let at = time::now();
    store.revoke_client("dc_second", at).await.unwrap().unwrap();
    let listed = store.list_clients(&ACME).await.unwrap();
    assert_eq!(listed.len(), 2, "a revoked client is still listed");
    assert_eq!(listed[0].revoked_at, None);
    let revoked = listed[1].revoked_at.expect("revoked");
    assert!((revoked - at).abs() < ms(1), "{revoked} vs {at}");
}

async fn a_revoked_client_is_not_found_and_revoking_again_keeps_the_first_time(
    store: Arc<dyn Store>,
) {
    store
        .create_client(&client("dc_gone", &ACME, "sha256$aa"))
        .await
        .unwrap();
    store
        .create_client(&client("dc_kept", &ACME, "sha256$bb"))
        .await
        .unwrap();
    let first = time::now() - secs(10);
    let revoked = store
        .revoke_client("dc_gone", first)
        .await
        .unwrap()
        .expect("a known client is revoked");
    assert_eq!(revoked.client_id, "dc_gone");
    assert_eq!(revoked.account, *ACME);
    assert!((revoked.revoked_at.unwrap() - first).abs() < ms(1));
    assert!(store.find_client("dc_gone").await.unwrap().is_none());
    assert!(store.find_client("dc_kept").await.unwrap().is_some());
    assert!(
        !store
            .replace_client_secret_hash("dc_gone", "sha256$aa", "sha256$cc")
            .await
            .unwrap(),
        "a revoked client's hash is left alone"
    );

    let again = store
        .revoke_client("dc_gone", time::now())
        .await
        .unwrap()
        .unwrap();
    assert!((again.revoked_at.unwrap() - first).abs() < ms(1));
    assert!(store
        .revoke_client("dc_unknown", time::now())
        .await
        .unwrap()
        .is_none());
}

async fn clients_revoked_since_a_time_are_those_revoked_at_or_after_it(store: Arc<dyn Store>) {
    let now = time::now();
    for id in ["dc_old", "dc_recent", "dc_active"] {
        store.create_client(&client(id, &ACME, "h")).await.unwrap();
    }
    store.revoke_client("dc_old", now - hours(2)).await.unwrap();
    store
        .revoke_client("dc_recent", now - secs(3))
        .await
        .unwrap();
    let mut since_hour = store.clients_revoked_since(now - hours(1)).await.unwrap();
    since_hour.sort();
    assert_eq!(since_hour, ["dc_recent"]);
    let mut since_day = store.clients_revoked_since(now - days(1)).await.unwrap();
    since_day.sort();
    assert_eq!(since_day, ["dc_old", "dc_recent"]);
    assert!(store.clients_revoked_since(now).await.unwrap().is_empty());
}

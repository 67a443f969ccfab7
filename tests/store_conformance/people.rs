//! The people of an account (`PeopleStore`): their roles (read live by
//! `IdentityStore::find_session`), removal, passwords and invitations, and
//! the rule that no change leaves an account without an admin.

use dispatch::store::portal::{Acceptance, InvitationRecord, PeopleChange};

use crate::support::*;

checks!(
    the_people_of_an_account_are_listed_oldest_first_with_their_roles,
    a_new_role_is_read_at_once_by_the_list_the_user_and_their_sessions,
    a_chosen_time_zone_is_read_with_each_session_of_that_person,
    the_only_admin_cannot_be_demoted_but_one_of_two_admins_can,
    removing_a_person_ends_their_sessions_but_never_removes_the_last_admin,
    two_admins_stepping_down_or_removing_each_other_at_once_leave_one_admin,
    a_new_password_ends_every_other_session_of_that_person_only,
    live_invitations_are_listed_found_and_revoked_within_their_account,
    accepting_an_invitation_creates_the_invited_person_and_uses_it_up,
    an_expired_invitation_or_a_taken_email_is_not_accepted,
);

/// A portal user as `dispatch users create --role` builds it (not yet stored).
fn user_value(
    account: &AccountId,
    email: &str,
    role: Role,
    created_at: DateTime<Utc>,
) -> UserRecord {
    UserRecord {
        id: Uuid::now_v7().to_string(),
        account: account.clone(),
        email: email.into(),
        password_hash: format!(
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA${}",
            Uuid::new_v4().simple()
        ),
        role,
        created_at,
    }
}

async fn add_user(
    store: &dyn Store,
    account: &AccountId,
    email: &str,
    role: Role,
    created_at: DateTime<Utc>,
) -> UserRecord {
    let u = user_value(account, email, role, created_at);
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
    assert_eq!(actual.role, expected.role, "role");
    assert_eq!(actual.created_at, expected.created_at, "created_at");
}

fn assert_users_eq(actual: &[UserRecord], expected: &[&UserRecord]) {
    let emails = |us: Vec<&UserRecord>| us.into_iter().map(|u| u.email.clone()).collect::<Vec<_>>();
    assert_eq!(
        emails(actual.iter().collect()),
        emails(expected.to_vec()),
        "the people, in order"
    );
    for (a, e) in actual.iter().zip(expected) {
        assert_user_eq(a, e);
    }
}

/// The user with this email, as the store has it now.
async fn user(store: &dyn Store, email: &str) -> UserRecord {
    store
        .find_user(email)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{email} should exist"))
}

/// Each of the account's people, by email, with their role (oldest first).
async fn roles(store: &dyn Store, account: &AccountId) -> Vec<(String, Role)> {
    store
        .list_users(account)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.email, u.role))
        .collect()
}

fn named(people: &[(&UserRecord, Role)]) -> Vec<(String, Role)> {
    people.iter().map(|(u, r)| (u.email.clone(), *r)).collect()
}

/// A session of `user` (not yet stored), live from `now` for 12 hours. The
/// token hash is 32 bytes, with a NUL and a 0xFF among them.
fn session_value(user: &UserRecord, now: DateTime<Utc>) -> SessionRecord {
    let mut token_hash = vec![0x00, 0xff];
    token_hash.extend_from_slice(Uuid::new_v4().as_bytes());
    token_hash.extend_from_slice(&Uuid::new_v4().as_bytes()[..14]);
    SessionRecord {
        token_hash,
        user_id: user.id.clone(),
        account: user.account.clone(),
        email: user.email.clone(),
        csrf: Uuid::new_v4().simple().to_string(),
        role: user.role,
        time_zone: None,
        created_at: now,
        expires_at: now + hours(12),
    }
}

async fn add_session(store: &dyn Store, user: &UserRecord, now: DateTime<Utc>) -> SessionRecord {
    let s = session_value(user, now);
    store.create_session(&s).await.unwrap();
    s
}

/// The role a live session reads now; None when the session is gone.
async fn session_role(store: &dyn Store, s: &SessionRecord, now: DateTime<Utc>) -> Option<Role> {
    store
        .find_session(&s.token_hash, now)
        .await
        .unwrap()
        .map(|found| {
            assert_eq!(found.user_id, s.user_id, "the session's person");
            found.role
        })
}

/// An invitation as an admin of `account` makes it (not yet stored). The
/// token hash is 32 arbitrary bytes.
fn invitation_value(
    account: &AccountId,
    email: &str,
    role: Role,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> InvitationRecord {
    let mut token_hash = vec![0xff, 0x00];
    token_hash.extend_from_slice(Uuid::new_v4().as_bytes());
    token_hash.extend_from_slice(&Uuid::new_v4().as_bytes()[..14]);
    InvitationRecord {
        id: Uuid::now_v7().to_string(),
        token_hash,
        account: account.clone(),
        email: email.into(),
        role,
        invited_by: format!("admin@{account}.test"),
        created_at,
        expires_at,
    }
}

async fn invite(
    store: &dyn Store,
    account: &AccountId,
    email: &str,
    role: Role,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> InvitationRecord {
    let i = invitation_value(account, email, role, created_at, expires_at);
    store.create_invitation(&i).await.unwrap();
    i
}

async fn find_invitation(
    store: &dyn Store,
    i: &InvitationRecord,
    now: DateTime<Utc>,
) -> Option<InvitationRecord> {
    store.find_invitation(&i.token_hash, now).await.unwrap()
}

fn joined(a: Acceptance) -> UserRecord {
    match a {
        Acceptance::Joined(u) => u,
        other => panic!("expected Joined, got {other:?}"),
    }
}

fn is_gone(a: &Acceptance) -> bool {
    matches!(a, Acceptance::Gone)
}

fn is_email_taken(a: &Acceptance) -> bool {
    matches!(a, Acceptance::EmailTaken)
}

async fn the_people_of_an_account_are_listed_oldest_first_with_their_roles(store: Arc<dyn Store>) {
    let now = time::now();
    // Created out of order, with emails in yet another order: the list
    // follows created_at, not insertion (nor ids) nor emails.
    let viewer = add_user(
        &*store,
        &ACME,
        "alex@acme.test",
        Role::Viewer,
        now - hours(1),
    )
    .await;
    let admin = add_user(&*store, &ACME, "pat@acme.test", Role::Admin, now - hours(3)).await;
    let operator = add_user(
        &*store,
        &ACME,
        "kim@acme.test",
        Role::Operator,
        now - hours(2),
    )
    .await;
    // Another account's people, older and newer than &ACME's.
    let g_old = add_user(
        &*store,
        &GLOBEX,
        "old@globex.test",
        Role::Admin,
        now - days(2),
    )
    .await;
    let g_new = add_user(&*store, &GLOBEX, "new@globex.test", Role::Viewer, now).await;
    store.ensure_account(&account_id("initech")).await.unwrap();

    assert_users_eq(
        &store.list_users(&ACME).await.unwrap(),
        &[&admin, &operator, &viewer],
    );
    assert_users_eq(&store.list_users(&GLOBEX).await.unwrap(), &[&g_old, &g_new]);
    assert!(
        store
            .list_users(&account_id("initech"))
            .await
            .unwrap()
            .is_empty(),
        "an account without people lists none"
    );
    assert!(store
        .list_users(&account_id("nobody"))
        .await
        .unwrap()
        .is_empty());
}

async fn a_new_role_is_read_at_once_by_the_list_the_user_and_their_sessions(store: Arc<dyn Store>) {
    let now = time::now();
    let admin = add_user(
        &*store,
        &ACME,
        "admin@acme.test",
        Role::Admin,
        now - hours(2),
    )
    .await;
    let ops = add_user(
        &*store,
        &ACME,
        "ops@acme.test",
        Role::Operator,
        now - hours(1),
    )
    .await;
    let g_admin = add_user(&*store, &GLOBEX, "admin@globex.test", Role::Admin, now).await;
    let g_viewer = add_user(&*store, &GLOBEX, "viewer@globex.test", Role::Viewer, now).await;
    let s_ops = add_session(&*store, &ops, now).await;
    let s_admin = add_session(&*store, &admin, now).await;
    let s_g_viewer = add_session(&*store, &g_viewer, now).await;
    assert_eq!(
        session_role(&*store, &s_ops, now).await,
        Some(Role::Operator)
    );

    // Each change is seen by the list, by find_user and by the person's
    // session that already exists (the role is read live, not kept in it).
    for role in [Role::Viewer, Role::Admin, Role::Operator, Role::Viewer] {
        assert_eq!(
            store.set_user_role(&ACME, &ops.id, role).await.unwrap(),
            PeopleChange::Done,
            "ops becomes {role}"
        );
        assert_eq!(
            roles(&*store, &ACME).await,
            named(&[(&admin, Role::Admin), (&ops, role)])
        );
        assert_user_eq(
            &user(&*store, &ops.email).await,
            &UserRecord {
                role,
                ..ops.clone()
            },
        );
        assert_eq!(
            session_role(&*store, &s_ops, now + hours(1)).await,
            Some(role),
            "the session reads the role as it is now"
        );
        assert_eq!(
            session_role(&*store, &s_admin, now + hours(1)).await,
            Some(Role::Admin),
            "another person's session is unchanged"
        );
    }

    // Unknown people, and another account's people, are not found; the
    // other account's people keep their roles.
    let unknown = Uuid::now_v7().to_string();
    assert_eq!(
        store
            .set_user_role(&ACME, &unknown, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::NotFound
    );
    assert_eq!(
        store
            .set_user_role(&ACME, &g_viewer.id, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::NotFound,
        "another account's person"
    );
    assert_eq!(
        store
            .set_user_role(&ACME, &g_admin.id, Role::Viewer)
            .await
            .unwrap(),
        PeopleChange::NotFound,
        "another account's admin"
    );
    assert_eq!(
        store
            .set_user_role(&GLOBEX, &ops.id, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::NotFound,
        "a person of &ACME, from &GLOBEX"
    );
    assert_eq!(
        store
            .set_user_role(&account_id("nobody"), &ops.id, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::NotFound,
        "an unknown account"
    );
    assert_user_eq(&user(&*store, &g_viewer.email).await, &g_viewer);
    assert_user_eq(&user(&*store, &g_admin.email).await, &g_admin);
    assert_eq!(
        roles(&*store, &GLOBEX).await,
        named(&[(&g_admin, Role::Admin), (&g_viewer, Role::Viewer)])
    );
    assert_eq!(
        session_role(&*store, &s_g_viewer, now).await,
        Some(Role::Viewer)
    );
    assert_eq!(
        roles(&*store, &ACME).await,
        named(&[(&admin, Role::Admin), (&ops, Role::Viewer)]),
        "the refused changes changed nothing"
    );
}

async fn the_only_admin_cannot_be_demoted_but_one_of_two_admins_can(store: Arc<dyn Store>) {
    let now = time::now();
    let admin = add_user(
        &*store,
        &ACME,
        "admin@acme.test",
        Role::Admin,
        now - hours(3),
    )
    .await;
    let ops = add_user(
        &*store,
        &ACME,
        "ops@acme.test",
        Role::Operator,
        now - hours(2),
    )
    .await;
    let viewer = add_user(
        &*store,
        &ACME,
        "viewer@acme.test",
        Role::Viewer,
        now - hours(1),
    )
    .await;
    // Another account's admin does not count for &ACME.
    let g_admin = add_user(&*store, &GLOBEX, "admin@globex.test", Role::Admin, now).await;
    let s_admin = add_session(&*store, &admin, now).await;

    for role in [Role::Operator, Role::Viewer] {
        assert_eq!(
            store.set_user_role(&ACME, &admin.id, role).await.unwrap(),
            PeopleChange::LastAdmin,
            "the only admin cannot become {role}"
        );
    }
    assert_eq!(
        roles(&*store, &ACME).await,
        named(&[
            (&admin, Role::Admin),
            (&ops, Role::Operator),
            (&viewer, Role::Viewer)
        ]),
        "the refused demotions changed nothing"
    );
    assert_user_eq(&user(&*store, &admin.email).await, &admin);
    assert_eq!(
        session_role(&*store, &s_admin, now).await,
        Some(Role::Admin)
    );
    // Keeping the only admin an admin leaves the account an admin.
    assert_eq!(
        store
            .set_user_role(&ACME, &admin.id, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::Done
    );
    // Changing someone else's role is not a demotion of the admin.
    assert_eq!(
        store
            .set_user_role(&ACME, &viewer.id, Role::Operator)
            .await
            .unwrap(),
        PeopleChange::Done
    );

    // With two admins, either may step down; then the other is the only one.
    assert_eq!(
        store
            .set_user_role(&ACME, &ops.id, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::Done
    );
    assert_eq!(
        store
            .set_user_role(&ACME, &admin.id, Role::Viewer)
            .await
            .unwrap(),
        PeopleChange::Done,
        "one of two admins is demoted"
    );
    assert_eq!(
        session_role(&*store, &s_admin, now).await,
        Some(Role::Viewer)
    );
    assert_eq!(
        store
            .set_user_role(&ACME, &ops.id, Role::Operator)
            .await
            .unwrap(),
        PeopleChange::LastAdmin,
        "the remaining admin is the only one"
    );
    assert_eq!(
        roles(&*store, &ACME).await,
        named(&[
            (&admin, Role::Viewer),
            (&ops, Role::Admin),
            (&viewer, Role::Operator)
        ])
    );
    assert_user_eq(&user(&*store, &g_admin.email).await, &g_admin);
}

/// The last-admin rule under a race: two admins demote (or remove) each
/// other at the same time; exactly one change is made, and the account
/// keeps one admin. Each round is an account of its own.
async fn two_admins_stepping_down_or_removing_each_other_at_once_leave_one_admin(
    store: Arc<dyn Store>,
) {
    let now = time::now();
    for round in 0..8 {
        let account = account_id(&format!("race-{round}"));
        let a = add_user(
            &*store,
            &account,
            &format!("a{round}@race.test"),
            Role::Admin,
            now,
        )
        .await;
        let b = add_user(
            &*store,
            &account,
            &format!("b{round}@race.test"),
            Role::Admin,
            now,
        )
        .await;
        let (x, y) = if round % 2 == 0 {
            tokio::join!(
                store.set_user_role(&account, &a.id, Role::Viewer),
                store.set_user_role(&account, &b.id, Role::Operator),
            )
        } else {
            tokio::join!(
                store.remove_user(&account, &a.id),
                store.remove_user(&account, &b.id),
            )
        };
        let mut outcomes = [x.unwrap(), y.unwrap()];
        outcomes.sort_by_key(|o| *o == PeopleChange::Done);
        assert_eq!(
            outcomes,
            [PeopleChange::LastAdmin, PeopleChange::Done],
            "round {round}"
        );
        let admins = roles(&*store, &account)
            .await
            .into_iter()
            .filter(|(_, r)| *r == Role::Admin)
            .count();
        assert_eq!(
            admins,
            1,
            "round {round}: {:?}",
            roles(&*store, &account).await
        );
    }
}

async fn removing_a_person_ends_their_sessions_but_never_removes_the_last_admin(
    store: Arc<dyn Store>,
) {
    let now = time::now();
    let admin = add_user(
        &*store,
        &ACME,
        "admin@acme.test",
        Role::Admin,
        now - hours(3),
    )
    .await;
    let ops = add_user(
        &*store,
        &ACME,
        "ops@acme.test",
        Role::Operator,
        now - hours(2),
    )
    .await;
    let viewer = add_user(
        &*store,
        &ACME,
        "viewer@acme.test",
        Role::Viewer,
        now - hours(1),
    )
    .await;
    let g_admin = add_user(&*store, &GLOBEX, "admin@globex.test", Role::Admin, now).await;
    let g_ops = add_user(&*store, &GLOBEX, "ops@globex.test", Role::Operator, now).await;
    let ops_sessions = [
        add_session(&*store, &ops, now).await,
        add_session(&*store, &ops, now).await,
    ];
    let s_admin = add_session(&*store, &admin, now).await;
    let s_viewer = add_session(&*store, &viewer, now).await;
    let s_g_ops = add_session(&*store, &g_ops, now).await;

    assert_eq!(
        store.remove_user(&ACME, &ops.id).await.unwrap(),
        PeopleChange::Done
    );
    assert_users_eq(&store.list_users(&ACME).await.unwrap(), &[&admin, &viewer]);
    assert!(store.find_user(&ops.email).await.unwrap().is_none());
    for s in &ops_sessions {
        assert_eq!(
            session_role(&*store, s, now).await,
            None,
            "the removed person's sessions end"
        );
    }
    assert_eq!(
        session_role(&*store, &s_admin, now).await,
        Some(Role::Admin)
    );
    assert_eq!(
        session_role(&*store, &s_viewer, now).await,
        Some(Role::Viewer)
    );
    assert_eq!(
        store.remove_user(&ACME, &ops.id).await.unwrap(),
        PeopleChange::NotFound,
        "removed already"
    );

    // Another account's people are not &ACME's to remove.
    for other in [&g_ops, &g_admin] {
        assert_eq!(
            store.remove_user(&ACME, &other.id).await.unwrap(),
            PeopleChange::NotFound,
            "{} is &GLOBEX's",
            other.email
        );
        assert_user_eq(&user(&*store, &other.email).await, other);
    }
    assert_eq!(
        store.remove_user(&GLOBEX, &viewer.id).await.unwrap(),
        PeopleChange::NotFound
    );
    assert_users_eq(
        &store.list_users(&GLOBEX).await.unwrap(),
        &[&g_admin, &g_ops],
    );
    assert_eq!(
        session_role(&*store, &s_g_ops, now).await,
        Some(Role::Operator)
    );

    // The only admin stays, sessions and all.
    assert_eq!(
        store.remove_user(&ACME, &admin.id).await.unwrap(),
        PeopleChange::LastAdmin
    );
    assert_user_eq(&user(&*store, &admin.email).await, &admin);
    assert_eq!(
        session_role(&*store, &s_admin, now).await,
        Some(Role::Admin)
    );

    // With a second admin, the first may go; then the second is the last.
    assert_eq!(
        store
            .set_user_role(&ACME, &viewer.id, Role::Admin)
            .await
            .unwrap(),
        PeopleChange::Done
    );
    assert_eq!(
        store.remove_user(&ACME, &admin.id).await.unwrap(),
        PeopleChange::Done
    );
    assert_eq!(session_role(&*store, &s_admin, now).await, None);
    assert_eq!(
        store.remove_user(&ACME, &viewer.id).await.unwrap(),
        PeopleChange::LastAdmin
    );
    assert_eq!(
        roles(&*store, &ACME).await,
        named(&[(&viewer, Role::Admin)])
    );

    // A removed person's email is free again.
    add_user(&*store, &ACME, &ops.email, Role::Viewer, now).await;
}

async fn a_new_password_ends_every_other_session_of_that_person_only(store: Arc<dyn Store>) {
    let now = time::now();
    let ops = add_user(
        &*store,
        &ACME,
        "ops@acme.test",
        Role::Operator,
        now - hours(2),
    )
    .await;
    let dev = add_user(&*store, &ACME, "dev@acme.test", Role::Admin, now - hours(1)).await;
    let g_ops = add_user(&*store, &GLOBEX, "ops@globex.test", Role::Admin, now).await;
    let kept = add_session(&*store, &ops, now).await;
    let others = [
        add_session(&*store, &ops, now).await,
        add_session(&*store, &ops, now).await,
    ];
    let s_dev = add_session(&*store, &dev, now).await;
    let s_g_ops = add_session(&*store, &g_ops, now).await;

    assert!(store
        .set_password(&ops.id, "$argon2id$new", &kept.token_hash)
        .await
        .unwrap());
    assert_user_eq(
        &user(&*store, &ops.email).await,
        &UserRecord {
            password_hash: "$argon2id$new".into(),
            ..ops.clone()
        },
    );
    assert_eq!(
        session_role(&*store, &kept, now).await,
        Some(Role::Operator),
        "the session that changed the password stays"
    );
    for s in &others {
        assert_eq!(
            session_role(&*store, s, now).await,
            None,
            "every other session of the person ends"
        );
    }
    assert_eq!(
        session_role(&*store, &s_dev, now).await,
        Some(Role::Admin),
        "another person's session stays"
    );
    assert_eq!(
        session_role(&*store, &s_g_ops, now).await,
        Some(Role::Admin)
    );
    assert_user_eq(&user(&*store, &dev.email).await, &dev);
    assert_user_eq(&user(&*store, &g_ops.email).await, &g_ops);

    // Keeping another person's session keeps none of this person's, and
    // leaves that other session alone.
    let later = add_session(&*store, &ops, now).await;
    assert!(store
        .set_password(&ops.id, "$argon2id$newer", &s_dev.token_hash)
        .await
        .unwrap());
    assert_eq!(
        user(&*store, &ops.email).await.password_hash,
        "$argon2id$newer"
    );
    assert_eq!(session_role(&*store, &kept, now).await, None);
    assert_eq!(session_role(&*store, &later, now).await, None);
    assert_eq!(session_role(&*store, &s_dev, now).await, Some(Role::Admin));

    // An unknown person: false, and nobody's password or sessions change.
    assert!(!store
        .set_password(&Uuid::now_v7().to_string(), "$argon2id$x", &[])
        .await
        .unwrap());
    assert_user_eq(&user(&*store, &dev.email).await, &dev);
    assert_eq!(
        user(&*store, &ops.email).await.password_hash,
        "$argon2id$newer"
    );
    assert_eq!(session_role(&*store, &s_dev, now).await, Some(Role::Admin));
    assert_eq!(
        session_role(&*store, &s_g_ops, now).await,
        Some(Role::Admin)
    );
}

async fn live_invitations_are_listed_found_and_revoked_within_their_account(store: Arc<dyn Store>) {
    let now = time::now();
    store.ensure_account(&ACME).await.unwrap();
    store.ensure_account(&GLOBEX).await.unwrap();
    // Created out of order; one has expired, one expires exactly now.
    let ops = invite(
        &*store,
        &ACME,
        "ops@acme.test",
        Role::Operator,
        now - hours(2),
        now + days(2),
    )
    .await;
    let viewer = invite(
        &*store,
        &ACME,
        "viewer@acme.test",
        Role::Viewer,
        now - hours(3),
        now + days(1),
    )
    .await;
    let expired = invite(
        &*store,
        &ACME,
        "late@acme.test",
        Role::Admin,
        now - days(8),
        now - days(1),
    )
    .await;
    let expiring = invite(
        &*store,
        &ACME,
        "edge@acme.test",
        Role::Admin,
        now - hours(1),
        now,
    )
    .await;
    let g_admin = invite(
        &*store,
        &GLOBEX,
        "admin@globex.test",
        Role::Admin,
        now - days(1),
        now + days(1),
    )
    .await;

    assert_eq!(
        store.list_invitations(&ACME, now).await.unwrap(),
        vec![viewer.clone(), ops.clone()],
        "the live ones, oldest first, only &ACME's"
    );
    assert_eq!(
        store.list_invitations(&ACME, now - ms(1)).await.unwrap(),
        vec![viewer.clone(), ops.clone(), expiring.clone()],
        "an invitation is live until its expiry"
    );
    assert_eq!(
        store.list_invitations(&GLOBEX, now).await.unwrap(),
        vec![g_admin.clone()]
    );
    assert!(store
        .list_invitations(&account_id("nobody"), now)
        .await
        .unwrap()
        .is_empty());

    // Found by the token's hash, whole, while live.
    for i in [&ops, &viewer, &g_admin] {
        assert_eq!(find_invitation(&*store, i, now).await.as_ref(), Some(i));
    }
    assert_eq!(
        find_invitation(&*store, &expiring, now - ms(1)).await,
        Some(expiring.clone())
    );
    for at in [now, now + ms(1)] {
        assert_eq!(
            find_invitation(&*store, &expiring, at).await,
            None,
            "expired at {at}"
        );
    }
    assert_eq!(find_invitation(&*store, &expired, now).await, None);
    assert_eq!(
        store
            .find_invitation(&ops.token_hash[..31], now)
            .await
            .unwrap(),
        None,
        "a token hash matches whole"
    );
    assert_eq!(store.find_invitation(&[0u8; 32], now).await.unwrap(), None);

    // Revoking: once, only in its own account.
    assert!(
        !store.revoke_invitation(&ACME, &g_admin.id).await.unwrap(),
        "&GLOBEX's invitation is not &ACME's to revoke"
    );
    assert_eq!(
        find_invitation(&*store, &g_admin, now).await,
        Some(g_admin.clone())
    );
    assert_eq!(
        store.list_invitations(&GLOBEX, now).await.unwrap(),
        vec![g_admin.clone()]
    );
    assert!(store.revoke_invitation(&ACME, &ops.id).await.unwrap());
    assert!(
        !store.revoke_invitation(&ACME, &ops.id).await.unwrap(),
        "revoked already"
    );
    assert_eq!(find_invitation(&*store, &ops, now).await, None);
    assert_eq!(
        store.list_invitations(&ACME, now).await.unwrap(),
        vec![viewer.clone()]
    );
    assert!(!store
        .revoke_invitation(&ACME, &Uuid::now_v7().to_string())
        .await
        .unwrap());
    assert_eq!(
        find_invitation(&*store, &viewer, now).await,
        Some(viewer.clone())
    );
    assert_eq!(
        find_invitation(&*store, &g_admin, now).await,
        Some(g_admin.clone())
    );
}

async fn accepting_an_invitation_creates_the_invited_person_and_uses_it_up(store: Arc<dyn Store>) {
    let now = time::now();
    let admin = add_user(
        &*store,
        &ACME,
        "admin@acme.test",
        Role::Admin,
        now - days(1),
    )
    .await;
    store.ensure_account(&GLOBEX).await.unwrap();
    let inv = invite(
        &*store,
        &ACME,
        "new@acme.test",
        Role::Operator,
        now - hours(1),
        now + days(1),
    )
    .await;
    let other = invite(
        &*store,
        &ACME,
        "other@acme.test",
        Role::Viewer,
        now - hours(2),
        now + days(1),
    )
    .await;
    let g_inv = invite(
        &*store,
        &GLOBEX,
        "new@globex.test",
        Role::Admin,
        now - hours(1),
        now + days(1),
    )
    .await;

    let id = Uuid::now_v7().to_string();
    let at = now + secs(5);
    let person = joined(
        store
            .accept_invitation(&inv.token_hash, &id, "$argon2id$joined", at)
            .await
            .unwrap(),
    );
    let expected = UserRecord {
        id: id.clone(),
        account: ACME.clone(),
        email: "new@acme.test".into(),
        password_hash: "$argon2id$joined".into(),
        role: Role::Operator,
        created_at: at,
    };
    assert_user_eq(&person, &expected);
    assert_user_eq(&user(&*store, "new@acme.test").await, &expected);
    assert_users_eq(
        &store.list_users(&ACME).await.unwrap(),
        &[&admin, &expected],
    );
    assert!(store.list_users(&GLOBEX).await.unwrap().is_empty());
    // The new person signs in with the invitation's role.
    let s = add_session(&*store, &expected, at).await;
    assert_eq!(session_role(&*store, &s, at).await, Some(Role::Operator));

    // The invitation is used up; the others are untouched.
    assert_eq!(find_invitation(&*store, &inv, at).await, None);
    assert_eq!(
        store.list_invitations(&ACME, at).await.unwrap(),
        vec![other.clone()]
    );
    let again = store
        .accept_invitation(
            &inv.token_hash,
            &Uuid::now_v7().to_string(),
            "$argon2id$again",
            at + secs(1),
        )
        .await
        .unwrap();
    assert!(is_gone(&again), "a second acceptance: {again:?}");
    assert_user_eq(&user(&*store, "new@acme.test").await, &expected);
    assert_users_eq(
        &store.list_users(&ACME).await.unwrap(),
        &[&admin, &expected],
    );
    assert_eq!(
        find_invitation(&*store, &g_inv, at).await,
        Some(g_inv.clone())
    );

    // Another account's invitation joins that account.
    let g_id = Uuid::now_v7().to_string();
    let g_user = joined(
        store
            .accept_invitation(&g_inv.token_hash, &g_id, "$argon2id$g", at)
            .await
            .unwrap(),
    );
    assert_eq!(
        (g_user.id.as_str(), &g_user.account, g_user.role),
        (g_id.as_str(), &*GLOBEX, Role::Admin)
    );
    assert_users_eq(&store.list_users(&GLOBEX).await.unwrap(), &[&g_user]);
    assert_users_eq(
        &store.list_users(&ACME).await.unwrap(),
        &[&admin, &expected],
    );
}

async fn an_expired_invitation_or_a_taken_email_is_not_accepted(store: Arc<dyn Store>) {
    let now = time::now();
    let admin = add_user(
        &*store,
        &ACME,
        "admin@acme.test",
        Role::Admin,
        now - days(1),
    )
    .await;
    let g_taken = add_user(
        &*store,
        &GLOBEX,
        "taken@example.com",
        Role::Viewer,
        now - days(1),
    )
    .await;

    // Expired: at its expiry and after.
    let expired = invite(
        &*store,
        &ACME,
        "late@acme.test",
        Role::Operator,
        now - days(2),
        now,
    )
    .await;
    for at in [now, now + ms(1), now + days(1)] {
        let a = store
            .accept_invitation(
                &expired.token_hash,
                &Uuid::now_v7().to_string(),
                "$argon2id$late",
                at,
            )
            .await
            .unwrap();
        assert!(is_gone(&a), "expired at {at}: {a:?}");
    }
    assert!(store.find_user("late@acme.test").await.unwrap().is_none());
    let unknown = store
        .accept_invitation(&[0u8; 32], &Uuid::now_v7().to_string(), "$argon2id$x", now)
        .await
        .unwrap();
    assert!(is_gone(&unknown), "no such invitation: {unknown:?}");

    // The email is taken, in another account or in the same one: refused,
    // and the invitation stays.
    let in_other = invite(
        &*store,
        &ACME,
        "taken@example.com",
        Role::Admin,
        now - hours(2),
        now + days(1),
    )
    .await;
    let in_same = invite(
        &*store,
        &ACME,
        "admin@acme.test",
        Role::Viewer,
        now - hours(1),
        now + days(1),
    )
    .await;
    for i in [&in_other, &in_same] {
        let a = store
            .accept_invitation(
                &i.token_hash,
                &Uuid::now_v7().to_string(),
                "$argon2id$taken",
                now,
            )
            .await
            .unwrap();
        assert!(is_email_taken(&a), "{} is taken: {a:?}", i.email);
        assert_eq!(
            find_invitation(&*store, i, now).await.as_ref(),
            Some(i),
            "the invitation for {} still exists",
            i.email
        );
    }
    assert_eq!(
        store.list_invitations(&ACME, now).await.unwrap(),
        vec![in_other.clone(), in_same.clone()]
    );
    assert_user_eq(&user(&*store, "taken@example.com").await, &g_taken);
    assert_user_eq(&user(&*store, "admin@acme.test").await, &admin);
    assert_users_eq(&store.list_users(&ACME).await.unwrap(), &[&admin]);
    assert_users_eq(&store.list_users(&GLOBEX).await.unwrap(), &[&g_taken]);
}

async fn a_chosen_time_zone_is_read_with_each_session_of_that_person(store: Arc<dyn Store>) {
    let now = time::now();
    let me = add_user(&*store, &ACME, "me@acme.test", Role::Viewer, now).await;
    let other = add_user(&*store, &ACME, "other@acme.test", Role::Viewer, now).await;
    let mine = add_session(&*store, &me, now).await;
    let theirs = add_session(&*store, &other, now).await;
    let zone = |s: SessionRecord| {
        let store = store.clone();
        async move {
            store
                .find_session(&s.token_hash, now)
                .await
                .unwrap()
                .expect("a live session")
                .time_zone
        }
    };
    assert_eq!(zone(mine.clone()).await, None, "the browser's by default");
    store
        .set_time_zone(&me.id, Some("Asia/Tokyo"))
        .await
        .unwrap();
    assert_eq!(zone(mine.clone()).await.as_deref(), Some("Asia/Tokyo"));
    assert_eq!(zone(theirs).await, None, "another person's is theirs");
    store.set_time_zone(&me.id, None).await.unwrap();
    assert_eq!(zone(mine).await, None, "back to the browser's");
}

//! Roles as a matrix: each role (viewer, operator, admin) × each portal
//! action, over HTTP. Where the role does not allow the action the answer
//! is 403 and nothing of the account changes (its messages, targets,
//! schedules, people and invitations read the same before and after);
//! where it does, the action goes through.

use chrono::{TimeDelta, Utc};
use dispatch::store::portal::{InvitationRecord, Role};

use super::*;
use common::in_ms;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    CancelMessage,
    RescheduleMessage,
    BulkCancel,
    RedriveDeadLetters,
    ReplayRange,
    CancelRange,
    SendTestMessage,
    ResetBreaker,
    CreateTarget,
    EditTarget,
    DisableTarget,
    EnableTarget,
    DeleteTarget,
    RotateSecret,
    CreateSchedule,
    EditSchedule,
    PauseSchedule,
    DeleteSchedule,
    InvitePerson,
    ChangeRole,
    RemovePerson,
    RevokeInvitation,
    NewTargetForm,
    EditTargetForm,
    PeoplePage,
    NewScheduleForm,
    RedriveForm,
    ReplayForm,
    Subscribe,
    EditSubscription,
    DisableSubscription,
    DeleteSubscription,
    ReplayEvents,
    ReplayEventsForm,
}

use Action::*;

const ACTIONS: [Action; 34] = [
    CancelMessage,
    RescheduleMessage,
    BulkCancel,
    RedriveDeadLetters,
    ReplayRange,
    CancelRange,
    SendTestMessage,
    ResetBreaker,
    CreateTarget,
    EditTarget,
    DisableTarget,
    EnableTarget,
    DeleteTarget,
    RotateSecret,
    CreateSchedule,
    EditSchedule,
    PauseSchedule,
    DeleteSchedule,
    InvitePerson,
    ChangeRole,
    RemovePerson,
    RevokeInvitation,
    NewTargetForm,
    EditTargetForm,
    PeoplePage,
    NewScheduleForm,
    RedriveForm,
    ReplayForm,
    Subscribe,
    EditSubscription,
    DisableSubscription,
    DeleteSubscription,
    ReplayEvents,
    ReplayEventsForm,
];

impl Action {
    fn needed(self) -> Role {
        match self {
            CancelMessage | RescheduleMessage | BulkCancel | RedriveDeadLetters | ReplayRange
            | CancelRange | SendTestMessage | ResetBreaker | CreateSchedule | EditSchedule
            | PauseSchedule | DeleteSchedule | NewScheduleForm | RedriveForm | ReplayForm
            | ReplayEvents | ReplayEventsForm => Role::Operator,
            CreateTarget | EditTarget | DisableTarget | EnableTarget | DeleteTarget
            | RotateSecret | InvitePerson | ChangeRole | RemovePerson | RevokeInvitation
            | NewTargetForm | EditTargetForm | PeoplePage | Subscribe | EditSubscription
            | DisableSubscription | DeleteSubscription => Role::Admin,
        }
    }
}

/// A request an action makes; a POST gets the session's CSRF token added.
struct Request {
    post: bool,
    path: String,
    form: Vec<(&'static str, String)>,
}

fn get(path: String) -> Request {
    Request {
        post: false,
        path,
        form: vec![],
    }
}

fn post(path: String, form: Vec<(&'static str, String)>) -> Request {
    Request {
        post: true,
        path,
        form,
    }
}

/// A form's time, and the same in a query string.
const TIME: &str = "%Y-%m-%dT%H:%M:%S";
const QUERY_TIME: &str = "%Y-%m-%dT%H%%3A%M%%3A%S";

/// A day before the test's clock, in `form`: the start of a range that
/// holds everything the test made.
fn since(form: &str) -> String {
    (Utc::now() - TimeDelta::days(1)).format(form).to_string()
}

/// Far ahead of the test's clock, as a form takes a time.
fn far() -> String {
    common::calendar::new_year_ahead(5)
}

struct Ctx {
    app: TestApp,
    api: Api,
    /// Delivers (200).
    ok: String,
    ok_url: String,
    /// Refuses (400): its messages become dead letters.
    dead: String,
    n: std::cell::Cell<u32>,
}

impl Ctx {
    fn next(&self) -> u32 {
        self.n.set(self.n.get() + 1);
        self.n.get()
    }

    async fn message(&self) -> String {
        let at = (Utc::now() + TimeDelta::hours(1)).to_rfc3339();
        s(&self.api.schedule(&self.ok, &at, "{}").await["messageId"]).to_string()
    }

    async fn dead_letter(&self) -> String {
        let id = s(&self.api.schedule(&self.dead, &in_ms(0), "{}").await["messageId"]).to_string();
        self.api.wait_for_state(&id, "DeadLetter", WAIT).await;
        id
    }

    async fn delivered(&self) -> String {
        let id = s(&self.api.schedule(&self.ok, &in_ms(0), "{}").await["messageId"]).to_string();
        self.api.wait_for_state(&id, "Delivered", WAIT).await;
        id
    }

    async fn target(&self) -> String {
        s(&self.api.webhook(&self.ok_url).await["targetId"]).to_string()
    }

    async fn schedule(&self) -> String {
        let r = self
            .api
            .post(
                "/schedules",
                json!({"targetId": self.ok, "name": "hourly", "every": "1h",
                       "payload": "{}", "startAt": format!("{}Z", far())}),
            )
            .await;
        assert_eq!(r.status(), 201);
        s(&r.json::<Value>().await.unwrap()["scheduleId"]).to_string()
    }

    async fn person(&self) -> String {
        let mut u = dispatch::portal::new_user(
            "acme",
            &format!("p{}@example.com", self.next()),
            PASSWORD,
            self.app.now(),
        );
        u.role = Role::Viewer;
        assert!(self.app.store().create_user(&u).await.unwrap());
        u.id
    }

    async fn invitation(&self) -> String {
        let now = Utc::now();
        let i = InvitationRecord {
            id: uuid::Uuid::now_v7().to_string(),
            token_hash: uuid::Uuid::new_v4().as_bytes().to_vec(),
            account: common::account("acme"),
            email: format!("i{}@example.com", self.next()),
            role: Role::Viewer,
            invited_by: "admin@example.com".into(),
            created_at: now,
            expires_at: now + TimeDelta::days(7),
        };
        self.app.store().create_invitation(&i).await.unwrap();
        i.id
    }

    /// A subscription of the delivering target to `order.*`.
    async fn subscription(&self) -> String {
        let r = self
            .api
            .post(
                "/subscriptions",
                json!({"targetId": self.ok, "types": ["order.*"], "name": format!("s{}", self.next())}),
            )
            .await;
        assert_eq!(r.status(), 201);
        s(&r.json::<Value>().await.unwrap()["subscriptionId"]).to_string()
    }

    /// An event published now, of a type no subscription takes.
    async fn event(&self) {
        let r = self
            .api
            .post("/events", json!({"type": "audit.logged", "payload": "{}"}))
            .await;
        assert_eq!(r.status(), 201);
    }

    fn schedule_form(&self, name: &str) -> Vec<(&'static str, String)> {
        vec![
            ("name", name.into()),
            ("targetId", self.ok.clone()),
            ("kind", "every".into()),
            ("cron", "".into()),
            ("every", "1h".into()),
            ("timeZone", "UTC".into()),
            ("startAt", far()),
            ("endAt", "".into()),
            ("payload", "{}".into()),
            ("orderingKey", "".into()),
        ]
    }

    fn target_form(&self, name: &str) -> Vec<(&'static str, String)> {
        vec![
            ("name", name.into()),
            ("type", "webhook".into()),
            ("enabled", "on".into()),
            ("url", self.ok_url.clone()),
        ]
    }

    /// A fresh object for the action to act on, and its request.
    async fn prepare(&self, action: Action) -> Request {
        let wide = |extra: Vec<(&'static str, String)>| {
            let mut f = vec![
                ("from", since(TIME)),
                ("to", common::calendar::new_year_ahead(15)),
                ("rangeTz", "UTC".to_string()),
                ("tz", "UTC".to_string()),
            ];
            f.extend(extra);
            f
        };
        match action {
            CancelMessage => post(format!("/portal/messages/{}/cancel", self.message().await), vec![]),
            RescheduleMessage => post(
                format!("/portal/messages/{}/reschedule", self.message().await),
                vec![("at", far()), ("tz", "UTC".into())],
            ),
            BulkCancel => post(
                "/portal/messages/bulk".into(),
                vec![
                    ("action", "cancel".into()),
                    ("ids", self.message().await),
                    ("confirmed", "1".into()),
                    ("at", "".into()),
                    ("tz", "UTC".into()),
                ],
            ),
            RedriveDeadLetters => {
                self.dead_letter().await;
                post(
                    "/portal/messages/redrive".into(),
                    vec![
                        ("target", self.dead.clone()),
                        ("from", "".into()),
                        ("to", "".into()),
                        ("filterTz", "UTC".into()),
                        ("at", far()),
                        ("tz", "UTC".into()),
                    ],
                )
            }
            ReplayRange => {
                self.delivered().await;
                post(
                    format!("/portal/targets/{}/replay", self.ok),
                    wide(vec![("state", "".into()), ("at", far())]),
                )
            }
            CancelRange => {
                self.message().await;
                post(
                    format!("/portal/targets/{}/cancel-range", self.ok),
                    wide(vec![("state", "".into()), ("at", "".into())]),
                )
            }
            SendTestMessage => post(format!("/portal/targets/{}/test", self.ok), vec![]),
            ResetBreaker => post(format!("/portal/targets/{}/reset-breaker", self.ok), vec![]),
            CreateTarget => post(
                "/portal/targets".into(),
                self.target_form(&format!("new {}", self.next())),
            ),
            EditTarget => post(
                format!("/portal/targets/{}", self.target().await),
                self.target_form("renamed"),
            ),
            DisableTarget => post(
                format!("/portal/targets/{}/disable", self.target().await),
                vec![],
            ),
            EnableTarget => {
                let t = self.target().await;
                let r = self
                    .api
                    .patch(&format!("/targets/{t}"), json!({"enabled": false}))
                    .await;
                assert_eq!(r.status(), 200);
                post(format!("/portal/targets/{t}/enable"), vec![])
            }
            DeleteTarget => post(
                format!("/portal/targets/{}/delete", self.target().await),
                vec![],
            ),
            RotateSecret => post(
                format!("/portal/targets/{}/rotate-secret", self.target().await),
                vec![("overlap", "3600".into())],
            ),
            CreateSchedule => post(
                "/portal/schedules".into(),
                self.schedule_form(&format!("s{}", self.next())),
            ),
            EditSchedule => post(
                format!("/portal/schedules/{}", self.schedule().await),
                self.schedule_form("renamed"),
            ),
            PauseSchedule => post(
                format!("/portal/schedules/{}/pause", self.schedule().await),
                vec![],
            ),
            DeleteSchedule => post(
                format!("/portal/schedules/{}/delete", self.schedule().await),
                vec![],
            ),
            InvitePerson => post(
                "/portal/people/invite".into(),
                vec![
                    ("email", format!("new{}@example.com", self.next())),
                    ("role", "operator".into()),
                ],
            ),
            ChangeRole => post(
                format!("/portal/people/{}/role", self.person().await),
                vec![("role", "operator".into())],
            ),
            RemovePerson => post(
                format!("/portal/people/{}/remove", self.person().await),
                vec![],
            ),
            RevokeInvitation => post(
                format!(
                    "/portal/people/invitations/{}/revoke",
                    self.invitation().await
                ),
                vec![],
            ),
            Subscribe => post(
                format!("/portal/targets/{}/subscriptions", self.ok),
                vec![("types", "invoice.paid order.*".into()), ("name", "billing".into())],
            ),
            EditSubscription => post(
                format!("/portal/subscriptions/{}", self.subscription().await),
                vec![("types", "order.created".into()), ("name", "renamed".into())],
            ),
            DisableSubscription => post(
                format!("/portal/subscriptions/{}/disable", self.subscription().await),
                vec![],
            ),
            DeleteSubscription => post(
                format!("/portal/subscriptions/{}/delete", self.subscription().await),
                vec![],
            ),
            ReplayEvents => {
                self.event().await;
                post(
                    format!("/portal/targets/{}/replay-events", self.ok),
                    wide(vec![("types", "audit.*".into()), ("at", far())]),
                )
            }
            ReplayEventsForm => get(format!(
                "/portal/targets/{}/replay-events?from={}&to={}-01-01T00%3A00%3A00&rangeTz=UTC&types=audit.*",
                self.ok,
                since(QUERY_TIME),
                common::calendar::years_ahead(15)
            )),
            NewTargetForm => get("/portal/targets/new".into()),
            EditTargetForm => get(format!("/portal/targets/{}/edit", self.ok)),
            PeoplePage => get("/portal/people".into()),
            NewScheduleForm => get("/portal/schedules/new".into()),
            RedriveForm => get(format!(
                "/portal/messages/redrive?state=DeadLetter&target={}",
                self.dead
            )),
            ReplayForm => get(format!(
                "/portal/targets/{}/replay?from={}&to={}-01-01T00%3A00%3A00&rangeTz=UTC",
                self.ok,
                since(QUERY_TIME),
                common::calendar::years_ahead(15)
            )),
        }
    }

    /// Everything of the account an action could change.
    async fn fingerprint(&self) -> Value {
        let list = |path: &'static str| async move {
            let r = self.api.get(path).await;
            assert_eq!(r.status(), 200, "{path}");
            let v: Value = r.json().await.unwrap();
            assert!(v["nextCursor"].is_null(), "one page holds {path}");
            v["items"].clone()
        };
        let messages: Vec<Value> = list("/messages?limit=1000")
            .await
            .as_array()
            .unwrap()
            .iter()
            .map(|m| json!([m["messageId"], m["state"], m["deliveryTime"]]))
            .collect();
        let targets = list("/targets?limit=1000").await;
        let store = self.app.store();
        let people: Vec<Value> = store
            .list_users(&common::account("acme"))
            .await
            .unwrap()
            .iter()
            .map(|u| json!([u.email, u.role.as_str()]))
            .collect();
        let invitations: Vec<Value> = store
            .list_invitations(&common::account("acme"), Utc::now())
            .await
            .unwrap()
            .iter()
            .map(|i| json!([i.email, i.role.as_str()]))
            .collect();
        json!({
            "messages": messages,
            "targets": targets,
            "schedules": list("/schedules?limit=100").await,
            "subscriptions": list("/subscriptions?limit=1000").await,
            "people": people,
            "invitations": invitations,
        })
    }

    /// Until nothing of the account is due: what an allowed action
    /// scheduled for now has been delivered or dead-lettered.
    async fn settle(&self) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let v: Value = self
                .api
                .get("/messages?state=Scheduled&limit=1000")
                .await
                .json()
                .await
                .unwrap();
            let soon = Utc::now() + TimeDelta::minutes(10);
            let due = v["items"].as_array().unwrap().iter().any(|m| {
                chrono::DateTime::parse_from_rfc3339(s(&m["deliveryTime"])).unwrap() < soon
            });
            if !due {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "still due: {v}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

async fn signed_in_as(app: &TestApp, email: &str, role: Role) -> Browser {
    let mut u = dispatch::portal::new_user("acme", email, PASSWORD, app.now());
    u.role = role;
    assert!(app.store().create_user(&u).await.unwrap());
    let mut b = Browser::new(app);
    let p = b.try_sign_in(email, PASSWORD).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    b
}

#[tokio::test]
async fn each_role_may_do_what_it_allows_and_nothing_else() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let ok_rx = Receiver::start().await;
    ok_rx.always(Reply::status(200));
    let dead_rx = Receiver::start().await;
    dead_rx.always(Reply::status(400));
    let ok = s(&api.webhook(&ok_rx.url("/ok")).await["targetId"]).to_string();
    let dead = s(&api.webhook(&dead_rx.url("/dead")).await["targetId"]).to_string();
    let mut browsers = [
        (
            Role::Viewer,
            signed_in_as(&app, "viewer@example.com", Role::Viewer).await,
        ),
        (
            Role::Operator,
            signed_in_as(&app, "operator@example.com", Role::Operator).await,
        ),
        (
            Role::Admin,
            signed_in_as(&app, "admin@example.com", Role::Admin).await,
        ),
    ];
    let ctx = Ctx {
        app,
        api,
        ok,
        ok_url: ok_rx.url("/ok"),
        dead,
        n: std::cell::Cell::new(0),
    };
    let mut matrix = String::from("action               viewer    operator  admin\n");
    for action in ACTIONS {
        // Refused roles first: what an allowed one starts must not run
        // into a refused one's before-and-after.
        browsers.sort_by_key(|(role, _)| *role >= action.needed());
        let mut row = vec![String::new(); 3];
        for (role, b) in browsers.iter_mut() {
            let req = ctx.prepare(action).await;
            let before = ctx.fingerprint().await;
            let page = if req.post {
                let csrf = b.csrf().await;
                let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf)];
                form.extend(req.form.iter().map(|(k, v)| (*k, v.as_str())));
                b.post(&req.path, &form).await
            } else {
                b.get(&req.path).await
            };
            let allowed = *role >= action.needed();
            if allowed {
                let expected = if req.post {
                    StatusCode::SEE_OTHER
                } else {
                    StatusCode::OK
                };
                assert_eq!(page.status, expected, "{action:?} as {role}: {}", page.body);
                // (A closed breaker's reset changes nothing to see.)
                if req.post && action != ResetBreaker {
                    assert_ne!(
                        ctx.fingerprint().await,
                        before,
                        "{action:?} as {role} changed nothing"
                    );
                }
                ctx.settle().await;
            } else {
                assert_eq!(
                    page.status,
                    StatusCode::FORBIDDEN,
                    "{action:?} as {role}: {}",
                    page.body
                );
                assert!(page.body.contains("Not allowed"), "{}", page.body);
                assert_eq!(
                    ctx.fingerprint().await,
                    before,
                    "{action:?} refused to {role} changed something"
                );
            }
            row[Role::ALL.iter().position(|r| r == role).unwrap()] =
                format!("{}", page.status.as_u16());
        }
        matrix.push_str(&format!(
            "{:<20} {:<9} {:<9} {}\n",
            format!("{action:?}"),
            row[0],
            row[1],
            row[2]
        ));
    }
    eprintln!("{matrix}");

    // Every role reads every page.
    for (role, b) in browsers.iter_mut() {
        for path in [
            "/portal/overview",
            "/portal/messages",
            "/portal/targets",
            "/portal/schedules",
            "/portal/account",
        ] {
            assert_eq!(b.get(path).await.status, StatusCode::OK, "{path} as {role}");
        }
        // The pages offer what the role allows, and no more.
        let t = b.get(&format!("/portal/targets/{}", ctx.ok)).await;
        assert_eq!(t.status, StatusCode::OK);
        let operates = *role >= Role::Operator;
        let admins = *role == Role::Admin;
        for (marker, shown) in [
            ("id=\"send-test\"", operates),
            ("/cancel-range\"", operates),
            ("id=\"delete-target\"", admins),
            ("/edit\"", admins),
            ("/disable\"", admins),
        ] {
            assert_eq!(t.body.contains(marker), shown, "{marker} as {role}");
        }
        let m = b
            .get(&format!("/portal/messages/{}", ctx.message().await))
            .await;
        assert_eq!(
            m.body.contains("id=\"cancel\""),
            operates,
            "cancel as {role}"
        );
        let nav = b.get("/portal/overview").await;
        assert_eq!(nav.body.contains("href=\"/portal/people\""), admins);
        assert_eq!(
            t.body.contains("id=\"rotate-secret\""),
            admins,
            "rotate as {role}"
        );
        let schedule = ctx.schedule().await;
        let list = b.get("/portal/schedules").await;
        let page = b.get(&format!("/portal/schedules/{schedule}")).await;
        assert_eq!(page.status, StatusCode::OK);
        for (body, marker) in [
            (&list.body, "href=\"/portal/schedules/new\""),
            (&list.body, "/pause\""),
            (&page.body, "/pause\""),
            (&page.body, "/delete\""),
            (&page.body, "id=\"f-targetId\""),
        ] {
            assert_eq!(body.contains(marker), operates, "{marker} as {role}");
        }
    }
    ctx.app.shutdown().await;
}

#[tokio::test]
async fn people_actions_reach_only_the_admins_account_and_joining_needs_its_own_form() {
    let app = TestApp::spawn().await;
    let mut admin = signed_in_as(&app, "admin@acme.test", Role::Admin).await;
    let store = app.store();
    let mut theirs = dispatch::portal::new_user("globex", "them@globex.test", PASSWORD, app.now());
    theirs.role = Role::Viewer;
    assert!(store.create_user(&theirs).await.unwrap());
    let now = Utc::now();
    let invitation = |account: &str, email: &str, token: &str| InvitationRecord {
        id: uuid::Uuid::now_v7().to_string(),
        token_hash: dispatch::service::people::invitation_hash(token),
        account: common::account(account),
        email: email.into(),
        role: Role::Operator,
        invited_by: "admin@example.com".into(),
        created_at: now,
        expires_at: now + TimeDelta::days(7),
    };
    let their_invite = invitation("globex", "new@globex.test", "their-token");
    store.create_invitation(&their_invite).await.unwrap();

    // Another account's person and invitation: 404, and nothing changes.
    let csrf = admin.csrf().await;
    for (path, form) in [
        (
            format!("/portal/people/{}/role", theirs.id),
            vec![("role", "admin")],
        ),
        (format!("/portal/people/{}/remove", theirs.id), vec![]),
        (
            format!("/portal/people/invitations/{}/revoke", their_invite.id),
            vec![],
        ),
    ] {
        let mut f = vec![("csrf", csrf.as_str())];
        f.extend(form);
        assert_eq!(
            admin.post(&path, &f).await.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    let them = store.find_user("them@globex.test").await.unwrap().unwrap();
    assert_eq!(them.role, Role::Viewer);
    assert_eq!(
        store
            .list_invitations(&common::account("globex"), Utc::now())
            .await
            .unwrap()
            .len(),
        1
    );
    // An email with a sign-in in this account cannot be invited again.
    let p = admin
        .post(
            "/portal/people/invite",
            &[
                ("csrf", &csrf),
                ("email", "ADMIN@acme.test"),
                ("role", "admin"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::CONFLICT);
    assert!(store
        .list_invitations(&common::account("acme"), Utc::now())
        .await
        .unwrap()
        .is_empty());
    // One with a sign-in in another account is as if absent: the answer
    // does not tell, and the invitation is made (whoever reads that email
    // learns at joining that it has a sign-in).
    let p = admin
        .post(
            "/portal/people/invite",
            &[
                ("csrf", &csrf),
                ("email", "THEM@globex.test"),
                ("role", "admin"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let ours = store
        .list_invitations(&common::account("acme"), Utc::now())
        .await
        .unwrap();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].email, "them@globex.test");

    // Joining: a made-up token is 404; a post without the join page's own
    // token (another site's form) is refused and the invitation stays.
    store
        .create_invitation(&invitation("acme", "new@acme.test", "our-token"))
        .await
        .unwrap();
    let mut stranger = Browser::new(&app);
    assert_eq!(
        stranger.get("/portal/invite/made-up").await.status,
        StatusCode::NOT_FOUND
    );
    let forged = stranger
        .post(
            "/portal/invite/our-token",
            &[
                ("csrf", "guess"),
                ("password", PASSWORD),
                ("confirm", PASSWORD),
            ],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(store.find_user("new@acme.test").await.unwrap().is_none());
    let page = stranger.get("/portal/invite/our-token").await;
    assert_eq!(page.status, StatusCode::OK);
    let joined = stranger
        .post(
            "/portal/invite/our-token",
            &[
                ("csrf", &page.csrf()),
                ("password", PASSWORD),
                ("confirm", PASSWORD),
            ],
        )
        .await;
    assert_eq!(joined.status, StatusCode::SEE_OTHER, "{}", joined.body);
    let new = store.find_user("new@acme.test").await.unwrap().unwrap();
    assert_eq!((new.account.as_str(), new.role), ("acme", Role::Operator));
    app.shutdown().await;
}

#[tokio::test]
async fn a_role_the_portal_does_not_know_is_refused_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let mut admin = signed_in_as(&app, "admin@acme.test", Role::Admin).await;
    let store = app.store();
    let mut person = dispatch::portal::new_user("acme", "ops@acme.test", PASSWORD, app.now());
    person.role = Role::Operator;
    assert!(store.create_user(&person).await.unwrap());
    let csrf = admin.csrf().await;
    for role in ["owner", "", "Admin ", "superuser"] {
        let p = admin
            .post(
                &format!("/portal/people/{}/role", person.id),
                &[("csrf", &csrf), ("role", role)],
            )
            .await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{role:?}: {}", p.body);
        let p = admin
            .post(
                "/portal/people/invite",
                &[("csrf", &csrf), ("email", "new@acme.test"), ("role", role)],
            )
            .await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{role:?}: {}", p.body);
    }
    let ops = store.find_user("ops@acme.test").await.unwrap().unwrap();
    assert_eq!(ops.role, Role::Operator);
    assert!(store
        .list_invitations(&common::account("acme"), Utc::now())
        .await
        .unwrap()
        .is_empty());
    app.shutdown().await;
}

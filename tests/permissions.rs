//! Who may do what, decided once by the use cases: every use case and read,
//! called by every kind of actor (a person of each role, an API client with
//! each single scope and with all of them, the operator at the CLI), is
//! refused with `Forbidden` exactly when the matrix below says so, and a
//! refusal changes nothing. The doors' renderings of a refusal (403
//! problem+json naming the scope, the portal's page naming the role) are
//! tested with each door.
//!
//! The matrix is written here again, apart from the service's own table, so
//! that a change to either shows as a failure.

mod common;

use chrono::TimeDelta;
use common::{receiver::Receiver, *};
use dispatch::{
    auth::Principal,
    domain::{
        event::{EventType, Pattern},
        ids::{AccountId, EventId, MessageId, ScheduleId, SubscriptionId, TargetId},
        payload::Payload,
        scope::Scope,
    },
    service::{events::PublishRequest, Actor, Service, ServiceError},
    store::{portal::Role, Bulk, BulkAction, EventQuery, MessageFilter, RangeOn},
    wire::{
        event::{EventReplaySpec, SubscriptionSpec},
        pull::ReceiveRequest,
    },
};
use serde_json::json;

/// What each use case needs, in the matrix's words.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    ReadMessages,
    ChangeMessages,
    ReadTargets,
    OperateTargets,
    ConfigureTargets,
    ManagePeople,
    ReceiveMessages,
}

/// Whether `who` may do what `needs` names: the product's matrix.
fn allowed(who: &Who, needs: Needs) -> bool {
    use Needs::*;
    match who {
        Who::Operator => true,
        Who::Person(role) => {
            let least = match needs {
                ReadMessages | ReadTargets => Role::Viewer,
                ChangeMessages | OperateTargets | ReceiveMessages => Role::Operator,
                ConfigureTargets | ManagePeople => Role::Admin,
            };
            *role >= least
        }
        Who::Client(scopes) => {
            let scope = match needs {
                ReadMessages => Some(Scope::MessagesRead),
                ChangeMessages => Some(Scope::MessagesWrite),
                ReadTargets => Some(Scope::TargetsRead),
                OperateTargets | ConfigureTargets => Some(Scope::TargetsWrite),
                ManagePeople => None,
                // A pull target's consumer: its own scope, or messages:write.
                ReceiveMessages => Some(Scope::MessagesReceive),
            };
            scope.is_some_and(|s| scopes.contains(&s))
                || (needs == ReceiveMessages && scopes.contains(&Scope::MessagesWrite))
        }
    }
}

#[derive(Debug, Clone)]
enum Who {
    Person(Role),
    Client(Vec<Scope>),
    Operator,
}

fn actor(who: &Who) -> Actor {
    let account = AccountId::parse("acme").unwrap();
    match who {
        Who::Person(role) => Actor::person(account, "u-1", *role),
        Who::Client(scopes) => Actor::client(&Principal {
            account,
            subject: "c-1".into(),
            scopes: scopes.clone(),
        }),
        Who::Operator => Actor::operator(account),
    }
}

fn everyone() -> Vec<Who> {
    let mut all: Vec<Who> = Role::ALL.into_iter().map(Who::Person).collect();
    all.extend(Scope::ALL.into_iter().map(|s| Who::Client(vec![s])));
    all.push(Who::Client(Scope::ALL.to_vec()));
    all.push(Who::Client(vec![]));
    all.push(Who::Operator);
    all
}

/// Each use case and read, with what it needs, called with inputs that
/// name nothing that exists: allowed, it answers anything but `Forbidden`
/// (not found, invalid) and changes nothing either.
async fn call(service: &Service, a: &Actor, case: usize) -> (Needs, &'static str, bool) {
    let tid = TargetId::from_trusted("tgt_none".to_string());
    let mid = MessageId(uuid::Uuid::nil());
    let sid = ScheduleId::from_trusted("sch_none".to_string());
    let uid = SubscriptionId::from_trusted("sub_none".to_string());
    let eid = EventId(uuid::Uuid::nil());
    let now = service.now();
    let bulk = Bulk {
        action: BulkAction::Cancel { only: None },
        target_id: Some(tid.clone()),
        ids: None,
        range_on: RangeOn::DeliveryTime,
        from: None,
        to: None,
    };
    fn forbidden<T>(r: Result<T, ServiceError>) -> bool {
        matches!(r, Err(ServiceError::Forbidden(_)))
    }
    use Needs::*;
    let reads = service.reads(a);
    match case {
        0 => (
            ChangeMessages,
            "cancel",
            forbidden(service.cancel(a, &mid).await),
        ),
        1 => (
            ChangeMessages,
            "reschedule",
            forbidden(service.reschedule(a, &mid, now).await),
        ),
        2 => (
            ChangeMessages,
            "cancel_many",
            forbidden(service.cancel_many(a, &[mid]).await),
        ),
        3 => (
            ChangeMessages,
            "redrive",
            forbidden(
                service
                    .redrive(a, &MessageFilter::default(), Some(&[mid]), now)
                    .await,
            ),
        ),
        4 => (
            ChangeMessages,
            "bulk",
            forbidden(service.bulk(a, &bulk).await),
        ),
        5 => (
            ChangeMessages,
            "update_schedule",
            forbidden(service.update_schedule(a, &sid, &json!({})).await),
        ),
        6 => (
            ChangeMessages,
            "set_schedule_paused",
            forbidden(service.set_schedule_paused(a, &sid, true).await),
        ),
        7 => (
            ChangeMessages,
            "delete_schedule",
            forbidden(service.delete_schedule(a, &sid).await),
        ),
        8 => (
            OperateTargets,
            "send_test",
            forbidden(service.send_test(a, &tid, None).await),
        ),
        9 => (
            OperateTargets,
            "reset_health",
            forbidden(service.reset_health(a, &tid).await),
        ),
        10 => (
            ConfigureTargets,
            "set_target_enabled",
            forbidden(service.set_target_enabled(a, &tid, false).await),
        ),
        11 => (
            ConfigureTargets,
            "rotate_signing_secret",
            forbidden(
                service
                    .rotate_signing_secret(a, &tid, TimeDelta::zero())
                    .await,
            ),
        ),
        12 => (
            ConfigureTargets,
            "delete_target",
            forbidden(service.delete_target(a, &tid).await),
        ),
        13 => (
            ManagePeople,
            "set_role",
            forbidden(service.set_role(a, "u-none", Role::Admin).await),
        ),
        14 => (
            ManagePeople,
            "remove_person",
            forbidden(service.remove_person(a, "u-none").await),
        ),
        15 => (
            ManagePeople,
            "revoke_invitation",
            forbidden(service.revoke_invitation(a, "inv-none").await),
        ),
        16 => (
            ReadTargets,
            "target_named",
            forbidden(service.target_named(a, "none").await),
        ),
        17 => (
            ReadMessages,
            "reads.message",
            forbidden(reads.message(&mid).await),
        ),
        18 => (
            ReadMessages,
            "reads.messages",
            forbidden(reads.messages(&MessageFilter::default(), None, 10).await),
        ),
        19 => (
            ReadMessages,
            "reads.attempts",
            forbidden(reads.attempts(&mid, None, 10).await),
        ),
        20 => (
            ReadMessages,
            "reads.events",
            forbidden(reads.events(&mid).await),
        ),
        21 => (
            ReadMessages,
            "reads.overview",
            forbidden(reads.overview(now - TimeDelta::hours(1), now).await),
        ),
        22 => (
            ReadMessages,
            "reads.schedule",
            forbidden(reads.schedule(&sid, now).await),
        ),
        23 => (
            ReadMessages,
            "reads.schedules",
            forbidden(reads.schedules(None, None, 10, now).await),
        ),
        24 => (
            ReadMessages,
            "reads.bulk_count",
            forbidden(reads.bulk_count(&bulk, 10, now).await),
        ),
        25 => (
            ReadTargets,
            "reads.target",
            forbidden(reads.target(&tid).await),
        ),
        26 => (
            ReadTargets,
            "reads.targets",
            forbidden(reads.targets(None, 10).await),
        ),
        27 => (
            ManagePeople,
            "reads.people",
            forbidden(reads.people().await),
        ),
        28 => (
            ManagePeople,
            "reads.invitations",
            forbidden(reads.invitations(now).await),
        ),
        29 => (
            ConfigureTargets,
            "create_subscription",
            forbidden(
                service
                    .create_subscription(
                        a,
                        SubscriptionSpec {
                            target_id: tid.clone(),
                            name: String::new(),
                            types: vec![Pattern::All],
                            enabled: true,
                        },
                    )
                    .await,
            ),
        ),
        30 => (
            ConfigureTargets,
            "update_subscription",
            forbidden(
                service
                    .update_subscription(a, &uid, &json!({"enabled": false}))
                    .await,
            ),
        ),
        31 => (
            ConfigureTargets,
            "delete_subscription",
            forbidden(service.delete_subscription(a, &uid).await),
        ),
        32 => (
            ChangeMessages,
            "publish",
            // Dispatch's own type: refused as invalid once allowed.
            forbidden(
                service
                    .publish(
                        a,
                        PublishRequest {
                            ty: EventType::parse("dispatch.none").unwrap(),
                            payload: Payload::parse("p".to_string()).unwrap(),
                            delivery_time: None,
                            ordering_key: None,
                            idempotency_key: None,
                        },
                    )
                    .await,
            ),
        ),
        33 => (
            ChangeMessages,
            "replay_events",
            forbidden(
                service
                    .replay_events(
                        a,
                        EventReplaySpec {
                            target_id: tid.clone(),
                            from: now,
                            to: now,
                            types: None,
                            delivery_time: None,
                        },
                    )
                    .await,
            ),
        ),
        34 => (
            ReadTargets,
            "reads.subscription",
            forbidden(reads.subscription(&uid).await),
        ),
        35 => (
            ReadTargets,
            "reads.subscriptions",
            forbidden(reads.subscriptions(None, None, 10).await),
        ),
        36 => (
            ReadMessages,
            "reads.published_event",
            forbidden(reads.published_event(&eid).await),
        ),
        37 => (
            ReadMessages,
            "reads.published_events",
            forbidden(
                reads
                    .published_events(&EventQuery::default(), None, 10)
                    .await,
            ),
        ),
        38 => (
            ReceiveMessages,
            "receive",
            forbidden(
                service
                    .receive(
                        a,
                        &tid,
                        ReceiveRequest {
                            max: 10,
                            wait: std::time::Duration::ZERO,
                            visibility: None,
                        },
                    )
                    .await,
            ),
        ),
        39 => (
            ReceiveMessages,
            "ack",
            forbidden(service.ack(a, &tid, &["h".to_string()]).await),
        ),
        40 => (
            ReceiveMessages,
            "nack",
            forbidden(
                service
                    .nack(a, &tid, &["h".to_string()], std::time::Duration::ZERO)
                    .await,
            ),
        ),
        41 => (
            ReceiveMessages,
            "change_visibility",
            forbidden(
                service
                    .change_visibility(a, &tid, "h", std::time::Duration::ZERO)
                    .await,
            ),
        ),
        42 => (
            ReadTargets,
            "pull_depth",
            forbidden(service.pull_depth(a, &tid).await),
        ),
        _ => unreachable!(),
    }
}

const CASES: usize = 43;

#[tokio::test]
async fn every_use_case_refuses_exactly_whom_the_matrix_refuses() {
    let app = TestApp::spawn().await;
    let service = &app.running().state.service;
    let mut checked = 0;
    for who in everyone() {
        let a = actor(&who);
        for case in 0..CASES {
            let (needs, name, refused) = call(service, &a, case).await;
            assert_eq!(
                refused,
                !allowed(&who, needs),
                "{name} (needs {needs:?}) by {who:?}: refused = {refused}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, CASES * everyone().len());
    app.shutdown().await;
}

/// A refused change changes nothing: a viewer's cancel of a real message
/// leaves it Scheduled, an operator's target deletion leaves the target.
#[tokio::test]
async fn a_refused_change_changes_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = api.webhook(&rx.url("/hook")).await;
    let tid = target["targetId"].as_str().unwrap().to_string();
    let msg = api.schedule(&tid, &in_ms(3_600_000), "kept").await;
    let mid: MessageId = msg["messageId"].as_str().unwrap().parse().unwrap();
    let service = &app.running().state.service;
    let viewer = actor(&Who::Person(Role::Viewer));
    assert!(matches!(
        service.cancel(&viewer, &mid).await,
        Err(ServiceError::Forbidden(_))
    ));
    assert_eq!(api.message(&mid.to_string()).await["state"], "Scheduled");
    let operator = actor(&Who::Person(Role::Operator));
    let tid: TargetId = tid.parse().unwrap();
    assert!(matches!(
        service.delete_target(&operator, &tid).await,
        Err(ServiceError::Forbidden(_))
    ));
    assert!(service
        .reads(&operator)
        .target(&tid)
        .await
        .unwrap()
        .is_some());
    // The admin may, and the operator at the CLI too.
    let admin = actor(&Who::Person(Role::Admin));
    assert!(service.cancel(&admin, &mid).await.is_ok());
    app.shutdown().await;
}

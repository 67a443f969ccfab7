//! Who acts, and what each may do: the one place where a permission is
//! decided. The doors authenticate (a bearer token, a portal session, the
//! operator at the machine) and hand the use cases an `Actor`; each use
//! case names the `Permission` it needs and asks `Actor::allow`.
//!
//! | permission         | API client scope | portal role | CLI operator |
//! |--------------------|------------------|-------------|--------------|
//! | `ReadMessages`     | `messages:read`  | viewer      | yes          |
//! | `ChangeMessages`   | `messages:write` | operator    | yes          |
//! | `ReadTargets`      | `targets:read`   | viewer      | yes          |
//! | `OperateTargets`   | `targets:write`  | operator    | yes          |
//! | `ConfigureTargets` | `targets:write`  | admin       | yes          |
//! | `ManagePeople`     | (none)           | admin       | yes          |
//! | `ReceiveMessages`  | `messages:receive` or `messages:write` | operator | yes |
//!
//! Schedules are the account's messages to come, and events are messages:
//! they need the message permissions. Subscriptions are a target's
//! configuration: they need the target permissions (`ConfigureTargets` to
//! change one).

use crate::{
    auth::Principal,
    domain::{ids::AccountId, scope::Scope},
    store::portal::Role,
};

use super::{ServiceError, ServiceResult};

/// What a use case needs of its actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Messages, their attempts and events, schedules, the overview.
    ReadMessages,
    /// Schedule, cancel, reschedule, redrive, replay; manage schedules.
    ChangeMessages,
    /// Targets and their health.
    ReadTargets,
    /// Reset a target's breaker, send it a test message.
    OperateTargets,
    /// Create, change, enable, disable and delete targets; rotate and show
    /// a signing secret.
    ConfigureTargets,
    /// The people of the account and their invitations.
    ManagePeople,
    /// Receive, ack, nack and hide the messages of a pull target.
    ReceiveMessages,
}

impl Permission {
    pub const ALL: [Permission; 7] = [
        Permission::ReadMessages,
        Permission::ChangeMessages,
        Permission::ReadTargets,
        Permission::OperateTargets,
        Permission::ConfigureTargets,
        Permission::ManagePeople,
        Permission::ReceiveMessages,
    ];

    /// The scope an API client needs; None: no client may.
    pub const fn scope(self) -> Option<Scope> {
        match self {
            Permission::ReadMessages => Some(Scope::MessagesRead),
            Permission::ChangeMessages => Some(Scope::MessagesWrite),
            Permission::ReadTargets => Some(Scope::TargetsRead),
            Permission::OperateTargets | Permission::ConfigureTargets => Some(Scope::TargetsWrite),
            Permission::ManagePeople => None,
            Permission::ReceiveMessages => Some(Scope::MessagesReceive),
        }
    }

    /// Whether a client with `scopes` may: its scope, or for receiving a
    /// pull target's messages also `messages:write` (which may do more).
    fn granted_by(self, scopes: &[Scope]) -> bool {
        self.scope().is_some_and(|s| scopes.contains(&s))
            || (self == Permission::ReceiveMessages && scopes.contains(&Scope::MessagesWrite))
    }

    /// The least role a person needs.
    pub const fn role(self) -> Role {
        match self {
            Permission::ReadMessages | Permission::ReadTargets => Role::Viewer,
            Permission::ChangeMessages
            | Permission::OperateTargets
            | Permission::ReceiveMessages => Role::Operator,
            Permission::ConfigureTargets | Permission::ManagePeople => Role::Admin,
        }
    }
}

/// Who acts, in which account.
#[derive(Debug, Clone)]
pub struct Actor {
    account: AccountId,
    who: Who,
}

#[derive(Debug, Clone)]
pub enum Who {
    /// An API client, with the scopes of its token.
    Client { id: String, scopes: Vec<Scope> },
    /// A person signed in to the portal, with their role as it is now.
    Person { id: String, role: Role },
    /// The operator at the command line, who holds the store itself.
    Operator,
}

impl Actor {
    pub fn client(principal: &Principal) -> Self {
        Self {
            account: principal.account.clone(),
            who: Who::Client {
                id: principal.subject.clone(),
                scopes: principal.scopes.clone(),
            },
        }
    }

    pub fn person(account: AccountId, user_id: impl Into<String>, role: Role) -> Self {
        Self {
            account,
            who: Who::Person {
                id: user_id.into(),
                role,
            },
        }
    }

    pub fn operator(account: AccountId) -> Self {
        Self {
            account,
            who: Who::Operator,
        }
    }

    pub fn account(&self) -> &AccountId {
        &self.account
    }

    pub fn who(&self) -> &Who {
        &self.who
    }

    /// The person's id, when a person acts.
    pub fn person_id(&self) -> Option<&str> {
        match &self.who {
            Who::Person { id, .. } => Some(id),
            _ => None,
        }
    }

    pub fn may(&self, permission: Permission) -> bool {
        match &self.who {
            Who::Client { scopes, .. } => permission.granted_by(scopes),
            Who::Person { role, .. } => *role >= permission.role(),
            Who::Operator => true,
        }
    }

    /// The account to act in, when the actor may; else `Forbidden`, and
    /// nothing changes.
    pub fn allow(&self, permission: Permission) -> ServiceResult<&AccountId> {
        if self.may(permission) {
            Ok(&self.account)
        } else {
            Err(ServiceError::Forbidden(Refusal {
                needed: permission,
                role: match &self.who {
                    Who::Person { role, .. } => Some(*role),
                    _ => None,
                },
            }))
        }
    }
}

/// What an actor lacked: each door words it (a scope for a client, a role
/// for a person).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub needed: Permission,
    /// The person's role, when a person was refused.
    pub role: Option<Role>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.role, self.needed.scope()) {
            (Some(role), _) => write!(
                f,
                "the {role} role does not allow this: it needs the {} role",
                self.needed.role()
            ),
            (None, Some(scope)) => write!(f, "this needs the {scope} scope"),
            (None, None) => f.write_str("no API client may do this"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(scopes: &[Scope]) -> Actor {
        Actor::client(&Principal {
            account: AccountId::parse("acme").unwrap(),
            subject: "c1".into(),
            scopes: scopes.to_vec(),
        })
    }

    fn person(role: Role) -> Actor {
        Actor::person(AccountId::parse("acme").unwrap(), "u1", role)
    }

    /// The whole matrix of the module's table, permission by permission.
    #[test]
    fn the_matrix() {
        use Permission::*;
        let expect = [
            // permission, viewer, operator, admin
            (ReadMessages, true, true, true),
            (ChangeMessages, false, true, true),
            (ReadTargets, true, true, true),
            (OperateTargets, false, true, true),
            (ConfigureTargets, false, false, true),
            (ManagePeople, false, false, true),
            (ReceiveMessages, false, true, true),
        ];
        assert_eq!(expect.len(), Permission::ALL.len());
        for (p, viewer, operator, admin) in expect {
            assert_eq!(person(Role::Viewer).may(p), viewer, "viewer {p:?}");
            assert_eq!(person(Role::Operator).may(p), operator, "operator {p:?}");
            assert_eq!(person(Role::Admin).may(p), admin, "admin {p:?}");
            assert!(
                Actor::operator(AccountId::parse("acme").unwrap()).may(p),
                "the CLI operator {p:?}"
            );
            for scope in Scope::ALL {
                let receives_by_write = p == ReceiveMessages && scope == Scope::MessagesWrite;
                assert_eq!(
                    client(&[scope]).may(p),
                    p.scope() == Some(scope) || receives_by_write,
                    "a client with only {scope} and {p:?}"
                );
            }
            assert_eq!(client(&Scope::ALL).may(p), p != ManagePeople);
            assert!(!client(&[]).may(p));
        }
    }

    #[test]
    fn a_refusal_names_what_was_missing_and_gives_no_account() {
        let e = client(&[Scope::MessagesRead])
            .allow(Permission::ChangeMessages)
            .unwrap_err();
        assert_eq!(e.to_string(), "this needs the messages:write scope");
        let e = person(Role::Viewer)
            .allow(Permission::ConfigureTargets)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the viewer role does not allow this: it needs the admin role"
        );
        assert_eq!(
            person(Role::Admin)
                .allow(Permission::ManagePeople)
                .unwrap()
                .as_str(),
            "acme"
        );
    }
}

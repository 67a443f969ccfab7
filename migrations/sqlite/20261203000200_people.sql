-- People and roles per account: see the PostgreSQL migration.
ALTER TABLE portal_users ADD COLUMN role TEXT NOT NULL DEFAULT 'admin'
    CHECK (role IN ('viewer', 'operator', 'admin'));

CREATE TABLE portal_invitations (
    id          TEXT PRIMARY KEY,
    token_hash  BLOB NOT NULL UNIQUE,
    account     TEXT NOT NULL REFERENCES accounts (name),
    email       TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    invited_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX portal_invitations_by_account ON portal_invitations (account, created_at);

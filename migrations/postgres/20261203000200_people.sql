-- People and roles per account (issue: the portal's people). Everyone who
-- could sign in before could do everything: they become admins.
ALTER TABLE portal_users ADD COLUMN role text NOT NULL DEFAULT 'admin'
    CHECK (role IN ('viewer', 'operator', 'admin'));
ALTER TABLE portal_users ALTER COLUMN role DROP DEFAULT;

-- An admin's invitation: a one-time sign-up link whose token only the
-- invited person's link holds (its SHA-256 is kept). Accepting it deletes it.
CREATE TABLE portal_invitations (
    id          text PRIMARY KEY,
    token_hash  bytea NOT NULL UNIQUE,
    account     text NOT NULL REFERENCES accounts (name),
    email       text NOT NULL,                   -- lower-cased
    role        text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    invited_by  text NOT NULL,                   -- the admin's email
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX portal_invitations_by_account ON portal_invitations (account, created_at);

-- The portal: people who sign in, their sessions, and each message's history
-- of manual actions (cancel, reschedule).

CREATE TABLE portal_users (
    id             TEXT PRIMARY KEY,
    account        TEXT NOT NULL REFERENCES accounts (name),
    email          TEXT NOT NULL UNIQUE,    -- lower-cased
    password_hash  TEXT NOT NULL,           -- argon2
    created_at     INTEGER NOT NULL
);

-- The cookie holds a random token; only its SHA-256 is kept.
CREATE TABLE portal_sessions (
    token_hash  BLOB PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES portal_users (id) ON DELETE CASCADE,
    account     TEXT NOT NULL,
    email       TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX portal_sessions_expiry ON portal_sessions (expires_at);

CREATE TABLE message_events (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    at             INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('Cancelled', 'Rescheduled')),
    from_state     TEXT NOT NULL,
    delivery_time  INTEGER
);
CREATE INDEX message_events_by_message ON message_events (message_id, seq);

-- The overview counts what happened in the last day per account from indexes alone.
DROP INDEX messages_delivered;
CREATE INDEX messages_delivered ON messages (delivered_at, account) WHERE state = 'Delivered';
DROP INDEX messages_dead;
CREATE INDEX messages_dead ON messages (dead_lettered_at, account) WHERE state = 'DeadLetter';
ALTER TABLE attempts ADD COLUMN account TEXT;
UPDATE attempts SET account = (SELECT m.account FROM messages m WHERE m.id = attempts.message_id);
CREATE INDEX attempts_failed_by_account ON attempts (account, finished_at) WHERE outcome <> 'Success';

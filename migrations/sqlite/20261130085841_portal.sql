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

-- The portal: people who sign in, their sessions, and each message's history
-- of manual actions (cancel, reschedule).

CREATE TABLE portal_users (
    id             text PRIMARY KEY,
    account        text NOT NULL REFERENCES accounts (name),
    email          text NOT NULL UNIQUE,            -- lower-cased
    password_hash  text NOT NULL,                   -- argon2
    created_at     timestamptz NOT NULL
);

-- The cookie holds a random token; only its SHA-256 is kept.
CREATE TABLE portal_sessions (
    token_hash  bytea PRIMARY KEY,
    user_id     text NOT NULL REFERENCES portal_users (id) ON DELETE CASCADE,
    account     text NOT NULL,
    email       text NOT NULL,
    csrf        text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX portal_sessions_expiry ON portal_sessions (expires_at);

CREATE TABLE message_events (
    message_id     uuid NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    at             timestamptz NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('Cancelled', 'Rescheduled')),
    from_state     text NOT NULL,
    delivery_time  timestamptz,
    PRIMARY KEY (message_id, seq)
);

-- The overview counts what happened in the last day per account from indexes alone.
DROP INDEX messages_delivered;
CREATE INDEX messages_delivered ON messages (delivered_at, account) WHERE state = 'Delivered';
DROP INDEX messages_dead;
CREATE INDEX messages_dead ON messages (dead_lettered_at, account) WHERE state = 'DeadLetter';
ALTER TABLE attempts ADD COLUMN account text;
UPDATE attempts a SET account = m.account FROM messages m WHERE m.id = a.message_id;
ALTER TABLE attempts ALTER COLUMN account SET NOT NULL;
CREATE INDEX attempts_failed_by_account ON attempts (account, finished_at) WHERE outcome <> 'Success';

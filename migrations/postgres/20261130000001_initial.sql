-- Dispatch schema for PostgreSQL.

CREATE TABLE accounts (
    name        text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- OAuth 2 clients (client credentials grant). Only a password hash of the secret is kept.
CREATE TABLE clients (
    client_id    text PRIMARY KEY,
    account      text NOT NULL REFERENCES accounts (name),
    name         text NOT NULL,
    secret_hash  text NOT NULL,
    scopes       text[] NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Keys that sign the access tokens this server issues (HS256), shared by all instances.
CREATE TABLE signing_keys (
    kid         text PRIMARY KEY,
    secret      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE targets (
    id          text PRIMARY KEY,
    account     text NOT NULL REFERENCES accounts (name),
    name        text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('webhook', 'sqs', 'sns')),
    enabled     boolean NOT NULL DEFAULT true,
    config      jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX targets_by_account ON targets (account, created_at DESC, id DESC);

CREATE TABLE messages (
    id               uuid PRIMARY KEY,           -- UUIDv7: time-ordered
    account          text NOT NULL,
    target_id        text NOT NULL REFERENCES targets (id) ON DELETE CASCADE,
    state            text NOT NULL CHECK (state IN ('Scheduled', 'Delivered', 'Cancelled', 'DeadLetter')),
    payload          bytea NOT NULL,               -- UTF-8; bytea because text refuses U+0000
    delivery_time    timestamptz NOT NULL,       -- of the most recent schedule or reschedule
    next_attempt_at  timestamptz,                -- what the API shows while Scheduled
    -- When the sweeper may claim the message: next_attempt_at, or the end of
    -- the lease while an attempt is under way (lease_token set).
    claim_at         timestamptz,
    lease_token      uuid,
    paused           boolean NOT NULL DEFAULT false,  -- its target is disabled
    attempt_count    integer NOT NULL DEFAULT 0,      -- every attempt ever made
    ladder_attempts  integer NOT NULL DEFAULT 0,      -- attempts since the last (re)schedule
    delivered_at     timestamptz,
    cancelled_at     timestamptz,
    dead_lettered_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
-- The claim query's index: only due-able rows, so millions of finished or
-- paused rows never slow it down.
CREATE INDEX messages_due ON messages (claim_at) WHERE state = 'Scheduled' AND NOT paused;
CREATE INDEX messages_by_account ON messages (account, id DESC);
CREATE INDEX messages_by_account_state ON messages (account, state, id DESC);
CREATE INDEX messages_by_target ON messages (target_id, state, id DESC);
-- Retention scans.
CREATE INDEX messages_delivered ON messages (delivered_at) WHERE state = 'Delivered';
CREATE INDEX messages_cancelled ON messages (cancelled_at) WHERE state = 'Cancelled';
CREATE INDEX messages_dead ON messages (dead_lettered_at) WHERE state = 'DeadLetter';

CREATE TABLE attempts (
    message_id     uuid NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    attempt        integer NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL,
    duration_ms    bigint NOT NULL,
    outcome        text NOT NULL CHECK (outcome IN ('Success', 'RetryableFailure', 'NonRetryableFailure')),
    status_code    integer,
    error          text,
    response_body  text,
    PRIMARY KEY (message_id, attempt)
);
CREATE INDEX attempts_failed ON attempts (finished_at) WHERE outcome <> 'Success';

CREATE TABLE idempotency_keys (
    account       text NOT NULL,
    key           text NOT NULL,
    request_hash  bytea NOT NULL,
    status        integer NOT NULL,
    response      text NOT NULL,                -- JSON; text keeps \u0000 escaped, jsonb refuses it
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (account, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Dispatch schema for the embedded SQLite store. Times are integer
-- milliseconds since the Unix epoch (UTC); ids and JSON are text.

CREATE TABLE accounts (
    name        TEXT PRIMARY KEY,
    created_at  INTEGER NOT NULL
);

CREATE TABLE clients (
    client_id    TEXT PRIMARY KEY,
    account      TEXT NOT NULL REFERENCES accounts (name),
    name         TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    scopes       TEXT NOT NULL,          -- JSON array
    created_at   INTEGER NOT NULL
);

CREATE TABLE signing_keys (
    kid         TEXT PRIMARY KEY,
    secret      BLOB NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE targets (
    id          TEXT PRIMARY KEY,
    account     TEXT NOT NULL REFERENCES accounts (name),
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('webhook', 'sqs', 'sns')),
    enabled     INTEGER NOT NULL DEFAULT 1,
    config      TEXT NOT NULL,           -- JSON
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX targets_by_account ON targets (account, created_at DESC, id DESC);

CREATE TABLE messages (
    id               TEXT PRIMARY KEY,   -- UUIDv7, lower-case hyphenated: sorts by creation
    account          TEXT NOT NULL,
    target_id        TEXT NOT NULL REFERENCES targets (id) ON DELETE CASCADE,
    state            TEXT NOT NULL CHECK (state IN ('Scheduled', 'Delivered', 'Cancelled', 'DeadLetter')),
    payload          TEXT NOT NULL,
    delivery_time    INTEGER NOT NULL,
    next_attempt_at  INTEGER,
    claim_at         INTEGER,
    lease_token      TEXT,
    paused           INTEGER NOT NULL DEFAULT 0,
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    ladder_attempts  INTEGER NOT NULL DEFAULT 0,
    delivered_at     INTEGER,
    cancelled_at     INTEGER,
    dead_lettered_at INTEGER,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX messages_due ON messages (claim_at) WHERE state = 'Scheduled' AND paused = 0;
CREATE INDEX messages_by_account ON messages (account, id DESC);
CREATE INDEX messages_by_account_state ON messages (account, state, id DESC);
CREATE INDEX messages_by_target ON messages (target_id, state, id DESC);
CREATE INDEX messages_delivered ON messages (delivered_at) WHERE state = 'Delivered';
CREATE INDEX messages_cancelled ON messages (cancelled_at) WHERE state = 'Cancelled';
CREATE INDEX messages_dead ON messages (dead_lettered_at) WHERE state = 'DeadLetter';

CREATE TABLE attempts (
    message_id     TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    finished_at    INTEGER NOT NULL,
    duration_ms    INTEGER NOT NULL,
    outcome        TEXT NOT NULL CHECK (outcome IN ('Success', 'RetryableFailure', 'NonRetryableFailure')),
    status_code    INTEGER,
    error          TEXT,
    response_body  TEXT,
    PRIMARY KEY (message_id, attempt)
) WITHOUT ROWID;
CREATE INDEX attempts_failed ON attempts (finished_at) WHERE outcome <> 'Success';

CREATE TABLE idempotency_keys (
    account       TEXT NOT NULL,
    key           TEXT NOT NULL,
    request_hash  BLOB NOT NULL,
    status        INTEGER NOT NULL,
    response      TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (account, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

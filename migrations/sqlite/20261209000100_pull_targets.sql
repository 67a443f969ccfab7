-- Pull targets (docs/api.md#pull-targets); see the PostgreSQL migration of
-- the same name for what the columns mean. SQLite cannot change a CHECK
-- constraint in place: `targets` and `attempts` are built anew and their
-- rows copied. Migrations run with foreign keys off (the store opens them
-- so), so dropping the old `targets` deletes none of the rows that refer
-- to it.

CREATE TABLE targets_new (
    id                   TEXT PRIMARY KEY,
    account              TEXT NOT NULL REFERENCES accounts (name),
    name                 TEXT NOT NULL,
    kind                 TEXT NOT NULL CHECK (kind IN ('webhook', 'sqs', 'sns', 'pull')),
    enabled              INTEGER NOT NULL DEFAULT 1,
    config               TEXT NOT NULL,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    secrets_key_id       TEXT,
    sealed_secrets       BLOB,
    gated                INTEGER NOT NULL DEFAULT 0,
    flow_starts          TEXT NOT NULL DEFAULT '[]',
    breaker_state        TEXT NOT NULL DEFAULT 'closed',
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    open_until           INTEGER,
    cooldown_ms          INTEGER
);
INSERT INTO targets_new (id, account, name, kind, enabled, config, created_at, updated_at,
    secrets_key_id, sealed_secrets, gated, flow_starts, breaker_state, consecutive_failures,
    open_until, cooldown_ms)
SELECT id, account, name, kind, enabled, config, created_at, updated_at,
    secrets_key_id, sealed_secrets, gated, flow_starts, breaker_state, consecutive_failures,
    open_until, cooldown_ms
FROM targets;
DROP TABLE targets;
ALTER TABLE targets_new RENAME TO targets;
CREATE INDEX targets_by_account ON targets (account, created_at DESC, id DESC);
CREATE INDEX targets_gated ON targets (id) WHERE gated = 1;

CREATE TABLE attempts_new (
    message_id     TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    finished_at    INTEGER NOT NULL,
    duration_ms    INTEGER NOT NULL,
    outcome        TEXT NOT NULL
        CHECK (outcome IN ('Success', 'RetryableFailure', 'NonRetryableFailure', 'Received')),
    status_code    INTEGER,
    error          TEXT,
    response_body  TEXT,
    account        TEXT,
    retry_after_ms INTEGER,
    target_id      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (message_id, attempt)
) WITHOUT ROWID;
INSERT INTO attempts_new (message_id, attempt, started_at, finished_at, duration_ms, outcome,
    status_code, error, response_body, account, retry_after_ms, target_id)
SELECT message_id, attempt, started_at, finished_at, duration_ms, outcome,
    status_code, error, response_body, account, retry_after_ms, target_id
FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
-- A receive is an attempt, not a failure: the indexes of failed attempts
-- leave receives out.
CREATE INDEX attempts_failed ON attempts (finished_at) WHERE outcome NOT IN ('Success', 'Received');
CREATE INDEX attempts_failed_by_account ON attempts (account, finished_at, target_id)
    WHERE outcome NOT IN ('Success', 'Received');

ALTER TABLE messages ADD COLUMN pull INTEGER NOT NULL DEFAULT 0;
DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (claim_at)
    WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0 AND pull = 0;
CREATE INDEX messages_pull ON messages (target_id, claim_at, id)
    WHERE state = 'Scheduled' AND paused = 0 AND held = 0 AND pull = 1;
CREATE INDEX messages_pull_last ON messages (claim_at)
    WHERE state = 'Scheduled' AND pull = 1 AND lease_token IS NOT NULL AND next_attempt_at IS NULL;


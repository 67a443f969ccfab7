-- Events and subscriptions (docs/api.md#events-and-subscriptions): see the
-- PostgreSQL migration.
CREATE TABLE subscriptions (
    id          TEXT PRIMARY KEY,
    account     TEXT NOT NULL,
    target_id   TEXT NOT NULL REFERENCES targets (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    types       TEXT NOT NULL,
    enabled     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX subscriptions_by_account ON subscriptions (account, created_at DESC, id DESC);
CREATE INDEX subscriptions_by_target ON subscriptions (target_id);

CREATE TABLE subscription_patterns (
    subscription_id TEXT NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    account         TEXT NOT NULL,
    pattern         TEXT NOT NULL,
    PRIMARY KEY (subscription_id, pattern)
);
CREATE INDEX subscription_patterns_lookup ON subscription_patterns (account, pattern);

CREATE TABLE events (
    id            TEXT PRIMARY KEY,
    account       TEXT NOT NULL,
    type          TEXT NOT NULL,
    payload       TEXT NOT NULL,
    delivery_time INTEGER NOT NULL,
    ordering_key  TEXT,
    created_at    INTEGER NOT NULL
);
CREATE INDEX events_by_account ON events (account, created_at DESC, id DESC);
CREATE INDEX events_by_type ON events (account, type, created_at DESC, id DESC);
CREATE INDEX events_created ON events (created_at);

CREATE TABLE event_messages (
    event_id   TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    message_id TEXT NOT NULL,
    target_id  TEXT NOT NULL,
    PRIMARY KEY (event_id, message_id)
);

ALTER TABLE messages ADD COLUMN event_id TEXT;
ALTER TABLE messages ADD COLUMN event_type TEXT;
CREATE INDEX messages_by_event ON messages (account, event_id, id DESC)
    WHERE event_id IS NOT NULL;

-- Events and subscriptions (docs/api.md#events-and-subscriptions).
--
-- A subscription belongs to a target and goes with it. An event is kept for
-- `retention.events` whatever becomes of its messages; `event_messages`
-- remembers which message each target got, so that an event still lists
-- them after retention removed the messages themselves.
CREATE TABLE subscriptions (
    id          text PRIMARY KEY,
    account     text NOT NULL,
    target_id   text NOT NULL REFERENCES targets (id) ON DELETE CASCADE,
    name        text NOT NULL,
    types       jsonb NOT NULL,
    enabled     boolean NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX subscriptions_by_account ON subscriptions (account, created_at DESC, id DESC);
CREATE INDEX subscriptions_by_target ON subscriptions (target_id);

-- Each distinct pattern of a subscription, as text (`order.created`,
-- `order.*`, `*`), with the account beside it: publishing an event of type
-- a.b.c looks up the few pattern texts that can match it (`a.b.c`, `a.*`,
-- `a.b.*`, `*`) in this index, so its cost does not grow with the number of
-- subscriptions that do not match.
CREATE TABLE subscription_patterns (
    subscription_id text NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    account         text NOT NULL,
    pattern         text NOT NULL,
    PRIMARY KEY (subscription_id, pattern)
);
CREATE INDEX subscription_patterns_lookup ON subscription_patterns (account, pattern);

CREATE TABLE events (
    id            uuid PRIMARY KEY,
    account       text NOT NULL,
    type          text NOT NULL,
    payload       bytea NOT NULL,
    delivery_time timestamptz NOT NULL,
    ordering_key  text,
    created_at    timestamptz NOT NULL
);
CREATE INDEX events_by_account ON events (account, created_at DESC, id DESC);
CREATE INDEX events_by_type ON events (account, type, created_at DESC, id DESC);
CREATE INDEX events_created ON events (created_at);

CREATE TABLE event_messages (
    event_id   uuid NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    message_id uuid NOT NULL,
    target_id  text NOT NULL,
    PRIMARY KEY (event_id, message_id)
);

ALTER TABLE messages
    ADD COLUMN event_id uuid,
    ADD COLUMN event_type text;
-- GET /messages?eventId=
CREATE INDEX messages_by_event ON messages (account, event_id, id DESC)
    WHERE event_id IS NOT NULL;

-- Ordering keys (API.md §10): the messages of one (target, orderingKey) are
-- attempted one at a time, in order of (delivery_time, id). Of each key's
-- Scheduled messages exactly one is its head (`held` false); the others are
-- held and kept out of every claim's index, so a long queue behind a key
-- costs the claims nothing. The head changes only under a transaction-level
-- advisory lock on the key (see store::postgres::ordering).
ALTER TABLE messages
    ADD COLUMN ordering_key text,
    ADD COLUMN held boolean NOT NULL DEFAULT false;

DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (claim_at)
    WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held;
DROP INDEX messages_gated_due;
CREATE INDEX messages_gated_due ON messages (target_id, claim_at)
    WHERE state = 'Scheduled' AND NOT paused AND gated AND NOT held;
DROP INDEX messages_gated_next;
CREATE INDEX messages_gated_next ON messages (claim_at)
    WHERE state = 'Scheduled' AND NOT paused AND gated AND NOT held;

-- A key's order, to find the message that should be its head.
CREATE INDEX messages_key_order ON messages (target_id, ordering_key, delivery_time, id)
    WHERE state = 'Scheduled' AND ordering_key IS NOT NULL;
-- A key's head as it is: one row per key.
CREATE INDEX messages_key_head ON messages (target_id, ordering_key)
    WHERE state = 'Scheduled' AND ordering_key IS NOT NULL AND NOT held;
-- GET /messages?orderingKey=
CREATE INDEX messages_by_key ON messages (account, ordering_key, id DESC)
    WHERE ordering_key IS NOT NULL;

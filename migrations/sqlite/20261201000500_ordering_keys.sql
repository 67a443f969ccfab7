-- Ordering keys (API.md §10): of each (target, orderingKey)'s Scheduled
-- messages exactly one is its head (`held` 0); the others are held and kept
-- out of every claim's index. The embedded store has one writer, so the
-- head changes inside each writing transaction without further locks.
ALTER TABLE messages ADD COLUMN ordering_key TEXT;
ALTER TABLE messages ADD COLUMN held INTEGER NOT NULL DEFAULT 0;

DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (claim_at)
    WHERE state = 'Scheduled' AND paused = 0 AND gated = 0 AND held = 0;
DROP INDEX messages_gated_due;
CREATE INDEX messages_gated_due ON messages (target_id, claim_at)
    WHERE state = 'Scheduled' AND paused = 0 AND gated = 1 AND held = 0;
DROP INDEX messages_gated_next;
CREATE INDEX messages_gated_next ON messages (claim_at)
    WHERE state = 'Scheduled' AND paused = 0 AND gated = 1 AND held = 0;

CREATE INDEX messages_key_order ON messages (target_id, ordering_key, delivery_time, id)
    WHERE state = 'Scheduled' AND ordering_key IS NOT NULL;
CREATE INDEX messages_key_head ON messages (target_id, ordering_key)
    WHERE state = 'Scheduled' AND ordering_key IS NOT NULL AND held = 0;
CREATE INDEX messages_by_key ON messages (account, ordering_key, id DESC)
    WHERE ordering_key IS NOT NULL;

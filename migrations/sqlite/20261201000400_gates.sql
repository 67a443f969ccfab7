-- Gated targets (API.md §9: flowControl, circuitBreaker): their messages are
-- kept out of the main claim's index and claimed one target at a time; the
-- target's row holds the gate's state (recent starts, the breaker).
ALTER TABLE targets ADD COLUMN gated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE targets ADD COLUMN flow_starts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE targets ADD COLUMN breaker_state TEXT NOT NULL DEFAULT 'closed';
ALTER TABLE targets ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE targets ADD COLUMN open_until INTEGER;
ALTER TABLE targets ADD COLUMN cooldown_ms INTEGER;
CREATE INDEX targets_gated ON targets (id) WHERE gated = 1;

ALTER TABLE messages ADD COLUMN gated INTEGER NOT NULL DEFAULT 0;
DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (claim_at) WHERE state = 'Scheduled' AND paused = 0 AND gated = 0;
CREATE INDEX messages_gated_due ON messages (target_id, claim_at)
    WHERE state = 'Scheduled' AND paused = 0 AND gated = 1;
CREATE INDEX messages_gated_next ON messages (claim_at) WHERE state = 'Scheduled' AND paused = 0 AND gated = 1;
CREATE INDEX messages_gated_leased ON messages (target_id)
    WHERE state = 'Scheduled' AND gated = 1 AND lease_token IS NOT NULL;

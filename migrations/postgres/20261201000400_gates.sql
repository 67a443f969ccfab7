-- Gated targets (API.md §9: flowControl, circuitBreaker). Their messages are
-- kept out of the main claim's index (`gated`) and claimed one target at a
-- time under a lock on the target's row, which also holds the gate's state:
-- the attempts started lately (for `rate`) and the breaker.
ALTER TABLE targets
    ADD COLUMN gated                boolean NOT NULL DEFAULT false,
    ADD COLUMN flow_starts          text    NOT NULL DEFAULT '[]',
    ADD COLUMN breaker_state        text    NOT NULL DEFAULT 'closed',
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN open_until           timestamptz,
    ADD COLUMN cooldown_ms          bigint;
CREATE INDEX targets_gated ON targets (id) WHERE gated;

ALTER TABLE messages ADD COLUMN gated boolean NOT NULL DEFAULT false;
DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (claim_at) WHERE state = 'Scheduled' AND NOT paused AND NOT gated;
-- A gated target's head: its oldest due messages.
CREATE INDEX messages_gated_due ON messages (target_id, claim_at)
    WHERE state = 'Scheduled' AND NOT paused AND gated;
-- The next gated message to fall due, whatever its target.
CREATE INDEX messages_gated_next ON messages (claim_at) WHERE state = 'Scheduled' AND NOT paused AND gated;
-- The attempts in flight to a gated target, on every instance: bounded by
-- its parallelism, not by its backlog.
CREATE INDEX messages_gated_leased ON messages (target_id)
    WHERE state = 'Scheduled' AND gated AND lease_token IS NOT NULL;

-- Pull targets (docs/api.md#pull-targets): a queue its consumers read over
-- HTTPS. A pull target's messages are never claimed by the sweeper: `pull`
-- keeps them out of its index, and `receive` reads them by this target's
-- own index. A received message stays Scheduled, hidden until `claim_at`
-- (the end of its visibility), with the receive's token in `lease_token`
-- (the receipt handle names both); `ladder_attempts` counts its receives
-- since the ladder last started; `next_attempt_at` is NULL after the last
-- receive it is allowed, so that the end of that visibility dead-letters it.
ALTER TABLE targets DROP CONSTRAINT targets_kind_check;
ALTER TABLE targets ADD CONSTRAINT targets_kind_check CHECK (kind IN ('webhook', 'sqs', 'sns', 'pull'));

ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('Success', 'RetryableFailure', 'NonRetryableFailure', 'Received'));

-- A receive is an attempt, not a failure: the indexes of failed attempts
-- (retention's, the overview's) leave receives out.
DROP INDEX attempts_failed;
CREATE INDEX attempts_failed ON attempts (finished_at) WHERE outcome NOT IN ('Success', 'Received');
DROP INDEX attempts_failed_by_account;
CREATE INDEX attempts_failed_by_account ON attempts (account, finished_at) INCLUDE (target_id)
    WHERE outcome NOT IN ('Success', 'Received');

ALTER TABLE messages ADD COLUMN pull boolean NOT NULL DEFAULT false;

DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (claim_at)
    WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull;
-- What a pull target's consumers can receive, earliest first: in the very
-- order a receive takes them (claim_at, then id), so that a receive reads
-- only what it takes, whatever the planner's statistics say (with the
-- order by claim_at alone, or an index of the target by delivery time
-- beside it, a receive right after a bulk insert sorted every message of
-- the target: 25 ms at 50,000 messages, 0.2 ms this way). Retention's pass
-- reads a target's Scheduled messages by `messages_by_target`.
CREATE INDEX messages_pull ON messages (target_id, claim_at, id)
    WHERE state = 'Scheduled' AND NOT paused AND NOT held AND pull;
-- Received for the last time: dead when the visibility runs out.
CREATE INDEX messages_pull_last ON messages (claim_at)
    WHERE state = 'Scheduled' AND pull AND lease_token IS NOT NULL AND next_attempt_at IS NULL;


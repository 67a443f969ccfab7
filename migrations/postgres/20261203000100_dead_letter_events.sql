-- A message's history and the overview's counts come from what happened, not
-- from the current row: a redrive clears `dead_lettered_at`, so dead-lettering
-- is kept as an event (with the reason at that moment) beside cancels and
-- reschedules. Events carry their account so that an account's events in a
-- window are read from an index.
ALTER TABLE message_events ADD COLUMN account text;
UPDATE message_events e SET account = m.account FROM messages m WHERE m.id = e.message_id;
ALTER TABLE message_events ALTER COLUMN account SET NOT NULL;
ALTER TABLE message_events ADD COLUMN detail text;
ALTER TABLE message_events DROP CONSTRAINT message_events_kind_check;
ALTER TABLE message_events ADD CONSTRAINT message_events_kind_check
    CHECK (kind IN ('Cancelled', 'Rescheduled', 'DeadLettered'));
INSERT INTO message_events (message_id, at, kind, from_state, account, detail)
    SELECT id, dead_lettered_at, 'DeadLettered', 'Scheduled', account, last_error
    FROM messages WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX message_events_dead_by_account ON message_events (account, at) WHERE kind = 'DeadLettered';
